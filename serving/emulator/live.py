"""Run emulated vLLM replicas in-process, for tests, the demo and ``infercost emulate``.

Usage (a gateway test, say)::

    from serving.emulator.live import start_replicas

    fleet = start_replicas(2, "h100-llama-3.1-8b", base_port=0,
                           otlp_endpoint="http://127.0.0.1:4318")   # or span_exporter=..., or neither
    try:
        url = fleet[0].url                    # "http://127.0.0.1:PORT"; POST {url}/v1/chat/completions
        fleet[1].set_fault("slowdown", 3.0)   # or POST {url}/admin/faults {"kind": "slowdown", "value": 3}
        fleet[1].set_fault("crash", None, until_s=2.0)   # crash now, restart 2 s later
        fleet[0].server.engine.stats.generation_tokens   # engine statistics (stats.EngineStats)
    finally:
        fleet.stop()

All replicas run on one background thread's asyncio loop (one uvicorn server each, on
consecutive ports from ``base_port``, or free ports when it is 0), bound to 127.0.0.1 by default.
Replica ids are ``replica-0`` .. ``replica-{n-1}`` unless ``ids`` is given.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from dataclasses import dataclass

import uvicorn

from serving.emulator.faults import SIM_FAULT_KINDS
from serving.emulator.profiles import get_profile
from serving.emulator.server import HEALTHY, ReplicaServer


@dataclass
class RunningReplica:
    """A replica being served: ``url`` (no trailing slash), ``replica_id``, ``port``, ``server``."""

    url: str
    replica_id: str
    port: int
    server: ReplicaServer
    _fleet: "Fleet"

    @property
    def admin(self) -> str:
        """URL of the admin endpoint (``GET``/``POST`` JSON faults)."""
        return f"{self.url}/admin/faults"

    def set_fault(self, kind: str, value=None, until_s: float | None = None) -> None:
        """Apply a fault from any thread (see faults.py for kinds and values)."""
        self._fleet.call(self.server.set_fault, kind, value, until_s)

    def restart(self) -> None:
        self._fleet.call(self.server.restart)


class Fleet(list):
    """The list of ``RunningReplica``; ``stop()`` shuts every server down and flushes spans."""

    def __init__(self):
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.thread: threading.Thread | None = None
        self.servers: list[uvicorn.Server] = []
        self._done = threading.Event()

    def call(self, fn, *args):
        """Run ``fn(*args)`` on the replicas' loop and return its result."""
        async def _run():
            return fn(*args)
        return asyncio.run_coroutine_threadsafe(_run(), self.loop).result(timeout=10)

    def schedule_faults(self, events) -> None:
        """Apply a fault timeline (``faults.FaultEvent``; ``at_s``/``until_s`` from now) to the replicas."""
        ids = {r.replica_id: r for r in self}
        for ev in events:
            if ev.replica != "*" and ev.replica not in ids:
                raise ValueError(f"fault {ev} names unknown replica {ev.replica!r}; replicas: {sorted(ids)}")
            if ev.kind in SIM_FAULT_KINDS:
                raise ValueError(f"fault kind {ev.kind!r} exists in the virtual-time simulator only (--virtual)")

        def apply(ev, end: bool):
            for r in self if ev.replica == "*" else [ids[ev.replica]]:
                srv = r.server
                if ev.kind == "crash":
                    if not end:
                        srv.crash(restart_after_s=None if ev.until_s is None else ev.until_s - ev.at_s)
                elif end:
                    srv.set_fault(ev.kind, HEALTHY[ev.kind])
                else:
                    srv.set_fault(ev.kind, ev.value)

        def arm():
            for ev in events:
                self.loop.call_later(ev.at_s, apply, ev, False)
                if ev.until_s is not None and ev.kind != "crash":
                    self.loop.call_later(ev.until_s, apply, ev, True)

        self.loop.call_soon_threadsafe(arm)

    def stop(self, timeout: float = 10.0) -> None:
        for s in self.servers:
            s.should_exit = True
        if self.thread is not None:
            self.thread.join(timeout)
        for r in self:
            tp = r.server.tracer_provider
            if tp is not None:
                tp.shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def _bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(512)
    sock.setblocking(False)
    return sock


def start_replicas(n: int, profile: str = "h100-llama-3.1-8b", *, base_port: int = 0, host: str = "127.0.0.1",
                   otlp_endpoint: str | None = None, span_exporter_factory=None, faults: dict | None = None,
                   ids: list[str] | None = None, seed: int = 0, prefix_caching: bool = True, static: bool = False,
                   profile_overrides: dict | None = None, log_level: str = "warning") -> Fleet:
    """Start ``n`` emulated replicas and return once all accept connections.

    ``otlp_endpoint``: base URL of an OTLP/HTTP receiver (spans POSTed to ``{endpoint}/v1/traces``,
    protobuf). ``span_exporter_factory``: alternatively, ``f(replica_id) -> SpanExporter``.
    ``faults``: initial faults for every replica, ``{kind: value}``. Raises ValueError for an
    unknown profile or bad fault; OSError when a port is taken.
    """
    if n < 1:
        raise ValueError(f"need at least one replica, got {n}")
    prof = get_profile(profile, **(profile_overrides or {}))
    ids = ids or [f"replica-{i}" for i in range(n)]
    if len(ids) != n:
        raise ValueError(f"{len(ids)} ids given for {n} replicas")
    fleet = Fleet()
    socks = [_bind(host, base_port + i if base_port else 0) for i in range(n)]
    for i, (rid, sock) in enumerate(zip(ids, socks)):
        exporter = None
        if span_exporter_factory is not None:
            exporter = span_exporter_factory(rid)
        elif otlp_endpoint:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter(endpoint=otlp_endpoint.rstrip("/") + "/v1/traces")
        srv = ReplicaServer(rid, prof, span_exporter=exporter, faults=faults, seed=seed + i,
                            prefix_caching=prefix_caching, static=static)
        port = sock.getsockname()[1]
        cfg = uvicorn.Config(srv.app(), log_level=log_level, access_log=False, lifespan="on",
                             timeout_graceful_shutdown=1)
        userv = uvicorn.Server(cfg)
        userv.install_signal_handlers = lambda: None  # not the main thread
        fleet.servers.append(userv)
        fleet.append(RunningReplica(url=f"http://{host}:{port}", replica_id=rid, port=port, server=srv, _fleet=fleet))

    async def main():
        await asyncio.gather(*(s.serve(sockets=[sk]) for s, sk in zip(fleet.servers, socks)))

    def run():
        asyncio.set_event_loop(fleet.loop)
        try:
            fleet.loop.run_until_complete(main())
        except Exception:  # noqa: BLE001 - logged; stop() joins
            logging.getLogger(__name__).exception("emulated replicas stopped with an error")
        finally:
            fleet._done.set()

    fleet.thread = threading.Thread(target=run, name="emulator-replicas", daemon=True)
    fleet.thread.start()
    import time

    deadline = time.monotonic() + 15
    while not all(s.started for s in fleet.servers):
        if fleet._done.is_set() or time.monotonic() > deadline:
            fleet.stop()
            raise RuntimeError("emulated replicas failed to start")
        time.sleep(0.01)
    return fleet
