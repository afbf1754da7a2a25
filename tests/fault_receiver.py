"""Subprocess side of the fault-injection suite (tests/test_faults.py): one receiver process on its
own embedded store directory, and a reader that counts what the store holds afterwards.

Usage (run with the project's python):

* ``fault_receiver.py migrate STORE_DIR`` — create and migrate a store (the suite's template);
* ``fault_receiver.py serve STORE_DIR SPOOL_DIR PORT_FILE [--gate DIR] [--kill-on-append N]
  [--spool-max-bytes B] [--lazy] [--min-free-bytes B]`` — run a receiver wired as ``infercost
  collector`` does (disk guard included) until SIGTERM (then drain and exit 0).
  ``--gate DIR``: while ``DIR/down`` exists, inserts fail as if the store were unreachable (store
  down without touching its files). ``--kill-on-append N``: the N-th spool append writes half its
  record and the process SIGKILLs itself (kill -9 during a spool write, deterministically).
  ``--lazy``: connect the store as the collector does (:class:`schema.store.LazyStore`), so the
  receiver starts even when the store cannot be opened;
* ``fault_receiver.py count STORE_DIR`` — print ``{"rows", "distinct", "span_ids"}`` of otel_traces.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _store(store_dir: str, lazy: bool = False):
    from schema.migrate import migrate
    from schema.store import LazyStore, connect

    if lazy:
        store = LazyStore(f"chdb://{store_dir}", "infercost", on_connect=lambda s: migrate(s, 3650), retry_s=0.5)
        try:
            store.get()
        except Exception as exc:  # noqa: BLE001 - reported; the receiver starts anyway
            print(f"store unavailable at start: {exc}", file=sys.stderr, flush=True)
        return store
    store = connect(f"chdb://{store_dir}", "infercost")
    migrate(store, 3650)
    return store


class FaultyInserts:
    """The real store behind a fault switch: ``raw_insert`` and ``insert`` first call ``_check``, which a
    subclass makes raise StoreUnavailable while its fault is on (also used by tests/test_durability.py)."""

    def __init__(self, store):
        self.store = store

    def _check(self) -> None:
        raise NotImplementedError

    def raw_insert(self, *args, **kwargs):
        self._check()
        return self.store.raw_insert(*args, **kwargs)

    def insert(self, *args, **kwargs):
        self._check()
        return self.store.insert(*args, **kwargs)


class GatedSink(FaultyInserts):
    """The real store, except while ``<gate>/down`` exists: then every insert is refused as unreachable."""

    def __init__(self, store, gate: Path):
        super().__init__(store)
        self.gate = gate

    @property
    def embedded(self):
        return True

    def _check(self):
        from schema.store import StoreUnavailable

        if (self.gate / "down").exists():
            raise StoreUnavailable("injected: store down (gate file)", "fault", "unreachable")

    def clone(self):
        # the writer's extra clients (inserts in flight) go through the same gate
        return GatedSink(self.store.clone(), self.gate)

    def __getattr__(self, name):
        return getattr(self.store, name)


def _kill_on_append(n: int) -> None:
    import collectors.spool as spool_mod

    original = spool_mod._write_all
    count = {"n": 0}

    def write_all(fd, header, payload):
        count["n"] += 1
        if count["n"] == n:
            os.write(fd, header + bytes(payload[: len(payload) // 2]))  # half a record on disk ...
            os.kill(os.getpid(), signal.SIGKILL)  # ... and the process dies mid-write
        return original(fd, header, payload)

    spool_mod._write_all = write_all


def serve(args) -> None:
    from collectors.receiver import ReceiverConfig
    from infercost.commands.collector import start_collector

    if args.kill_on_append:
        _kill_on_append(args.kill_on_append)
    store = _store(args.store_dir, lazy=args.lazy)
    sink = GatedSink(store, Path(args.gate)) if args.gate else None
    config = ReceiverConfig(port=0, spool_dir=Path(args.spool_dir), batch_max_seconds=0.1, drain_timeout_s=20,
                            spool_max_bytes=args.spool_max_bytes, retry_after_s=1, retention_days=3650)
    # wired as `infercost collector` wires it (disk guard included), with a smaller free-space floor
    receiver, _ = start_collector(store, config, min_free_disk_bytes=args.min_free_bytes, sink=sink)
    Path(args.port_file).write_text(str(receiver.port))
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    done.wait()
    receiver.stop()
    stats = receiver.stats
    print(json.dumps({"stored": stats.stored, "queue_rows": stats.queue_rows}), flush=True)


def count(args) -> None:
    from schema.store import connect

    store = connect(f"chdb://{args.store_dir}", "infercost")
    ids = [r[0] for r in store.query("SELECT SpanId FROM otel_traces", tag="fault.count").result_rows]
    calls = store.scalar("SELECT count() FROM llm_calls", tag="fault.count")
    print(json.dumps({"rows": len(ids), "distinct": len(set(ids)), "span_ids": sorted(set(ids)), "llm_calls": calls}))


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("migrate")
    p.add_argument("store_dir")
    p = sub.add_parser("serve")
    p.add_argument("store_dir")
    p.add_argument("spool_dir")
    p.add_argument("port_file")
    p.add_argument("--gate")
    p.add_argument("--kill-on-append", type=int, default=0)
    p.add_argument("--spool-max-bytes", type=int, default=1 << 30)
    p.add_argument("--lazy", action="store_true")
    p.add_argument("--min-free-bytes", type=int, default=8 << 20)
    p = sub.add_parser("count")
    p.add_argument("store_dir")
    args = parser.parse_args()
    if args.mode == "migrate":
        _store(args.store_dir).close()
    elif args.mode == "serve":
        serve(args)
    else:
        count(args)


if __name__ == "__main__":
    main()
