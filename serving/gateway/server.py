"""Run an ASGI app (the gateway, a test upstream) under uvicorn: blocking, or in a background thread.

Position: serving. :class:`ServerThread` binds port 0 by default and exposes the bound ``port``
once started (tests, benchmarks, the demo); :func:`serve` blocks (``infercost gateway``).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time

import uvicorn


def _config(app, host: str, port: int, log_level: str) -> uvicorn.Config:
    # Backlog sized for the 256-stream benchmark. proxy_headers off: nothing reads the client address,
    # and uvicorn's X-Forwarded-For middleware is one more coroutine layer per request.
    return uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="on", access_log=False,
                          backlog=4096, timeout_keep_alive=30, proxy_headers=False)


class ServerThread:
    """Serve ``app`` on ``host:port`` in a daemon thread. ``start()`` waits until listening (or raises)."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning"):
        self.server = uvicorn.Server(_config(app, host, port, log_level))
        self.server.install_signal_handlers = lambda: None  # not the main thread
        self.host = host
        self.port: int | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, name=f"asgi-{type(app).__name__}", daemon=True)

    def _run(self):
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self.server.serve())

    def start(self, timeout_s: float = 10.0) -> "ServerThread":
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"server on {self.host}:{self.server.config.port} did not start")
            time.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        return self

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self, timeout_s: float = 10.0) -> None:
        self.server.should_exit = True
        self._thread.join(timeout_s)

    def __enter__(self) -> "ServerThread":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


GC_GEN0 = int(os.environ.get("INFERCOST_GATEWAY_GC_GEN0", "20000"))


def _settle_gc() -> None:
    """Keep the cyclic garbage collector off the modules and objects loaded at start.

    Measured with perf on one gateway process at 128 streams: 12-15 % of the gateway's CPU was
    the collector, mostly its older generations walking the ~10^5 objects of the imported libraries
    (OTel SDK, protobuf, aiohttp, uvicorn, pydantic). ``gc.freeze()`` moves them to the permanent
    generation (never scanned again; CPython's documented use: after start-up, before serving), and a
    larger first-generation threshold makes the young collections rarer (the request path's cycles
    are few and short-lived: a collection still runs every ``GC_GEN0`` new container objects;
    ``INFERCOST_GATEWAY_GC_GEN0`` sets it, CPython's default is 2000)."""
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_GEN0, *gc.get_threshold()[1:])


def serve(app, host: str, port: int, log_level: str = "info") -> None:
    """Serve ``app`` until interrupted (blocking). The collector is settled first (``_settle_gc``)."""
    server = uvicorn.Server(_config(app, host, port, log_level))
    _settle_gc()
    server.run()
