"""The explicit runner's statements as a dependency graph, run by a few workers (one client each).

Position in the flow: serving -> collectors -> **schema** -> app/alerts; used by
:func:`schema.jobs.run_jobs` only.

A chunk ``[ws, we)`` of an explicit run is twelve tasks (the ``.sql`` files they run):

* ``inputs`` (``run_inputs``): the chunk's engine counters and gauges into
  ``engine_counters_runs`` / ``replica_gauges_runs`` (migration 1004). Reads raw telemetry only.
* ``resolve`` (``run_resolve``): the chunk's calls into ``resolved_calls_runs``. Reads raw
  telemetry only, so it runs beside ``inputs``.
* ``reconcile`` (``run_reconcile``): the resolved calls reconciled with the counters into
  ``reconciliation_runs``, after ``inputs`` and ``resolve``.
* ``delete`` (``delete_*``): drop the chunk's ``*_history`` rows (patch parts, migration 1003).
* ``cost`` (``run_call_costs``, ``advance_watermark``): ``call_costs_history`` of the chunk, then
  the watermark to ``we``. Its learned capacity reads ``replica_minutes_history`` of the 7 days
  before ``ws``, so it waits for the previous chunk's ``replica_minutes``.
* ``replica_minutes`` (``run_replica_minutes``): reads the chunk's ``call_costs`` (history, below
  the watermark) and reconciliation.
* ``scratch`` (``drop_scratch``): drops the chunk's scratch rows after ``replica_minutes``, the last
  step that reads them; off the chain (``inputs``/``resolve``/``delete`` of the chunk :data:`AHEAD`
  later wait for it, which bounds the scratch rows).
* ``tasks`` (``run_tasks``): reads ``call_costs`` of the chunk and up to ``task_lookback_s``
  before it (the previous chunk's, done before this chunk's ``cost``).
* The hourly rollups (migration 1003) of every hour the chunk touched, each file as soon as what it
  reads is written: ``rollup_calls`` (``run_cost_rollup_calls``: calls and the triangle's engine
  calls) after ``cost``, ``rollup_replicas`` (``run_cost_rollup_replicas``) after
  ``replica_minutes``, ``rollup_tasks`` (``run_cost_rollup``: tasks and the triangle's successes)
  after ``tasks``, each after the previous chunk's same step; then ``rollup``
  (``run_cost_rollup_marks``, ``run_cost_blocks``): the marks that make the hours' new version
  readable, then the triangle's blocks, after the three and the previous chunk's ``rollup`` (an
  hour two chunks share is marked last by the later one, after both chunks' rows).

So ``cost`` -> ``replica_minutes`` is one chain through the chunks, and ``inputs``/``resolve``/
``reconcile``/``delete`` of later chunks, ``tasks``, the scratch drops and the rollup rows run beside
it. No task reads rows a task running beside it writes: the result is the one a single worker gets
in chunk order. ``inputs``/``resolve``/``delete`` run at most :data:`AHEAD` chunks ahead of the
chain, which bounds the scratch rows (memory and disk: a day of calls each) and the time readers see
a chunk without history rows.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime

# inputs/resolve/delete of chunk i wait for the scratch drop of chunk i - AHEAD
AHEAD = 2
# task kind -> (.sql files, job the seconds count for, rank: lower runs first when several are ready)
KINDS = {
    "delete": (("delete_call_costs", "delete_replica_minutes", "delete_tasks"), "delete", 2),
    "inputs": (("run_inputs",), "call_costs", 2),
    "resolve": (("run_resolve",), "call_costs", 2),
    "reconcile": (("run_reconcile",), "call_costs", 1),
    "cost": (("run_call_costs", "advance_watermark"), "call_costs", 0),
    "replica_minutes": (("run_replica_minutes",), "replica_minutes", 0),
    "scratch": (("drop_scratch",), "delete", 1),
    "tasks": (("run_tasks",), "tasks", 1),
    "rollup_calls": (("run_cost_rollup_calls",), "rollup", 1),
    "rollup_replicas": (("run_cost_rollup_replicas",), "rollup", 1),
    "rollup_tasks": (("run_cost_rollup",), "rollup", 1),
    "rollup": (("run_cost_rollup_marks", "run_cost_blocks"), "rollup", 1),
}


@dataclass
class Chunk:
    """One chunk of an explicit run: index, window [start, end) (UTC, naive) and its scratch run_id."""

    index: int
    start: datetime
    end: datetime
    run_id: int
    scratch_dropped: bool = False


@dataclass
class Task:
    """One step of a chunk: ``kind`` (a key of :data:`KINDS`) and the (kind, index) keys it waits for."""

    kind: str
    chunk: Chunk
    deps: list[tuple[str, int]] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, int]:
        return (self.kind, self.chunk.index)

    @property
    def files(self) -> tuple[str, ...]:
        return KINDS[self.kind][0]

    @property
    def job(self) -> str:
        return KINDS[self.kind][1]


def plan(chunks: list[Chunk]) -> list[Task]:
    """The tasks of ``chunks`` with their dependencies, in the order one worker runs them (a
    topological order; also the preference among ready tasks)."""
    tasks = []
    for c in chunks:
        i = c.index
        ahead = [("scratch", i - AHEAD)] if i >= AHEAD else []
        prev = (lambda kind: [(kind, i - 1)] if i else [])
        tasks += [
            # resolve first: the longest of the three (one worker's, beside inputs then delete)
            Task("resolve", c, list(ahead)),
            Task("inputs", c, list(ahead)),
            Task("delete", c, list(ahead)),
            Task("reconcile", c, [("inputs", i), ("resolve", i)]),
            Task("cost", c, [("reconcile", i), ("delete", i)] + prev("replica_minutes")),
            Task("replica_minutes", c, [("cost", i)]),
            Task("tasks", c, [("cost", i)] + prev("tasks")),
            Task("rollup_calls", c, [("cost", i)] + prev("rollup_calls")),
            Task("scratch", c, [("replica_minutes", i)]),
            Task("rollup_replicas", c, [("replica_minutes", i)] + prev("rollup_replicas")),
            Task("rollup_tasks", c, [("tasks", i)] + prev("rollup_tasks")),
            Task("rollup", c, [("rollup_calls", i), ("rollup_replicas", i), ("rollup_tasks", i)] + prev("rollup")),
        ]
    return tasks


def run_plan(store, tasks: list[Task], execute, *, workers: int) -> None:
    """Run ``execute(client, task)`` for every task once its dependencies are done, on up to
    ``workers`` clients at once (``store``, and ``store.clone()``s each opened on its worker's
    thread and closed afterwards).

    Among ready tasks the lowest :data:`KINDS` rank, then the earliest chunk, goes first. The first
    exception stops new tasks; running ones finish; then it is raised.
    """
    if workers <= 1 or len(tasks) <= 1:
        for task in tasks:
            execute(store, task)
        return
    order = {t.key: n for n, t in enumerate(tasks)}
    pending = sorted(tasks, key=lambda t: (KINDS[t.kind][2], t.chunk.index, order[t.key]))
    done: set[tuple[str, int]] = set()
    state = {"running": 0, "error": None}
    cond = threading.Condition()

    def next_task():
        with cond:
            while True:
                if state["error"] is not None or not pending:
                    return None
                for task in pending:
                    if all(dep in done for dep in task.deps):
                        pending.remove(task)
                        state["running"] += 1
                        return task
                if state["running"] == 0:  # a cycle: plan() never makes one
                    state["error"] = RuntimeError(f"no runnable job task among {[t.key for t in pending]}")
                    cond.notify_all()
                    return None
                cond.wait()

    def work(client):
        while (task := next_task()) is not None:
            try:
                execute(client, task)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller below
                with cond:
                    state["running"] -= 1
                    state["error"] = state["error"] or exc
                    cond.notify_all()
                return
            with cond:
                state["running"] -= 1
                done.add(task.key)
                cond.notify_all()

    clones, clones_lock = [], threading.Lock()

    def cloned_worker():
        # the clone is opened on its worker's thread, so the first worker starts at once (opening a
        # client is 5 engine queries: 0.03-0.7 s on the shared 2-core host, each run)
        try:
            client = store.clone()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below
            with cond:
                state["error"] = state["error"] or exc
                cond.notify_all()
            return
        with clones_lock:
            clones.append(client)
        work(client)

    threads = [threading.Thread(target=work, args=(store,), name="cost-jobs-0", daemon=True)]
    threads += [threading.Thread(target=cloned_worker, name=f"cost-jobs-{n}", daemon=True)
                for n in range(1, min(workers, len(tasks)))]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for client in clones:
            client.close()
    if state["error"] is not None:
        raise state["error"]
