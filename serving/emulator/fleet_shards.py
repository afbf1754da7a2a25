"""The fleet simulator on several cores: the fleet as independent cells, one process each.

Where it sits: serving/emulator, on top of fleet_sim.py. A large fleet is deployed in cells (each
with its own gateway); simulating cells in separate processes uses every core. Each process runs
``fleet_sim.simulate`` on its cell's replicas and tasks and sends to its own sink.
"""

from __future__ import annotations

import time
import zlib

from serving.emulator.fleet_sim import ReplicaSpec, SimSummary, simulate



def shard_of(task_id: str, shards: int) -> int:
    """The shard (0..shards-1) a task belongs to: a stable hash of its id (zlib.crc32)."""
    return zlib.crc32(task_id.encode()) % shards


def _run_shard(args):
    i, shards, plans_factory, fleet, sink_factory, kw = args
    plans = (p for p in plans_factory() if shard_of(p.task_id, shards) == i)
    sink = sink_factory(i) if sink_factory is not None else None
    try:
        return simulate(plans, fleet[i::shards], sink=sink, seed=kw.pop("seed", 0) * 1000 + i, **kw)
    finally:
        close = getattr(sink, "close", None)
        if close:
            close()


def _child(job, conn):
    try:
        conn.send((True, _run_shard(job)))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises
        conn.send((False, f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def simulate_sharded(plans_factory, fleet: list[ReplicaSpec], *, shards: int = 2, sink_factory=None,
                     **kwargs) -> SimSummary:
    """``simulate`` on ``shards`` processes (one per core): the fleet as ``shards`` independent cells.

    Replica ``j`` belongs to cell ``j % shards`` and task ``t`` to cell ``shard_of(t.task_id)``; each
    cell has its own gateway, as a large fleet is deployed in cells. ``plans_factory()`` returns
    the plans sorted by arrival (each process filters its share); ``sink_factory(shard)`` builds a
    sink inside each process (e.g. ``lambda i: OtlpHttpSink(url)``; an in-memory sink would stay in
    the child). Other keyword arguments go to ``simulate`` (``start_time_ns`` should be given so
    the cells agree). Returns the summed summary; ``sim_seconds`` is the longest cell's, wall the total.
    Raises ValueError when a cell would have no replica.
    """
    import multiprocessing as mp

    if shards < 1 or shards > len(fleet):
        raise ValueError(f"shards must be in 1..{len(fleet)} (one replica per cell at least), got {shards}")
    kwargs.setdefault("start_time_ns", (time.time_ns() // 60_000_000_000) * 60_000_000_000)
    kwargs["progress"] = False
    wall0 = time.perf_counter()
    jobs = [(i, shards, plans_factory, fleet, sink_factory, dict(kwargs)) for i in range(shards)]
    if shards == 1:
        parts = [_run_shard(jobs[0])]
    else:
        # fork: the children inherit the factories (closures are fine), only summaries travel back
        ctx = mp.get_context("fork")
        pipes, procs = [], []
        for job in jobs:
            parent, child = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_child, args=(job, child), name=f"fleet-cell-{job[0]}")
            proc.start()
            child.close()
            pipes.append(parent)
            procs.append(proc)
        parts = []
        for parent, proc in zip(pipes, procs):
            ok, value = parent.recv()
            proc.join()
            if not ok:
                raise RuntimeError(f"{proc.name} failed: {value}")
            parts.append(value)
    total = SimSummary()
    for p in parts:
        for k, v in p.tasks.items():
            total.tasks[k] = total.tasks.get(k, 0) + v
        for name in ("calls", "attempts", "engine_requests", "engine_spans", "spans", "metric_points",
                     "client_retries", "gateway_retries", "timeouts", "rejections", "scale_events", "crashed_requests",
                     "preemptions", "generation_tokens"):
            setattr(total, name, getattr(total, name) + getattr(p, name))
        total.per_replica.update(p.per_replica)
        total.sim_seconds = max(total.sim_seconds, p.sim_seconds)
    total.wall_seconds = time.perf_counter() - wall0
    return total
