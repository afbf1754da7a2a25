"""Single-engine virtual-time replay and the public-trace readers the emulator's own tools use.

``replay(engine, requests)`` runs one engine model (engine.Engine or static.StaticEngine) over
requests with arrival times on a simulated clock, jumping between events; ``replay_with_frontend``
runs one step at a time behind the API-server model (frontend.py), as a live replica. The fleet-level
simulator with clients, gateway, spans and metrics is fleet_sim.py; the workload generators that
turn traces into task mixes are serving/workloads (this module only reads sizes and times).

Traces (serving/workloads/data/README.md): Azure LLM inference 2023 conversation (``TIMESTAMP``,
``ContextTokens``, ``GeneratedTokens``; replayed by inter-arrival deltas) and the Mooncake
conversation trace (``timestamp`` ms, ``input_length``, ``output_length``, ``hash_ids``).
"""

from __future__ import annotations

import csv
import heapq
import json
import math
from datetime import datetime
from pathlib import Path

from serving.emulator.engine import EngineRequest
from serving.emulator.frontend import step_outputs
from serving.emulator.kvcache import segments_from_hash_ids


def replay(engine, requests: list[EngineRequest], input_overhead_s: float | None = None) -> list[EngineRequest]:
    """Run ``requests`` (any order; ``arrival`` in seconds) through ``engine`` until all finish.

    Each request enters the waiting queue ``input_overhead_s`` after its arrival (default: the
    profile's). Returns the finished requests in finish order (timestamps on the engine clock).
    """
    ov = engine.profile.input_overhead_s if input_overhead_s is None else input_overhead_s
    reqs = sorted(requests, key=lambda r: r.arrival)
    done: list[EngineRequest] = []
    i, n = 0, len(reqs)
    while True:
        ta = reqs[i].arrival + ov if i < n else math.inf
        end = engine.plan(horizon=ta)
        if end is None:
            if i >= n:
                break
            engine.add(reqs[i], now=ta)
            i += 1
            continue
        if end <= ta:
            done.extend(engine.commit())
        else:
            done.extend(engine.commit(until=ta))
            while i < n and reqs[i].arrival + ov <= engine.now:
                engine.add(reqs[i], now=reqs[i].arrival + ov)
                i += 1
    return done


def replay_with_frontend(engine, frontend, requests: list[EngineRequest]) -> list[EngineRequest]:
    """Run ``requests`` (``arrival`` in seconds) through ``engine`` behind the API-server model
    ``frontend`` (frontend.FrontEnd) one engine step at a time, as a live replica does (server.py): a
    request joins the engine when the front end has taken its input (``FrontEnd.admit``, slower while
    the engine is busy), and each step's tokens are stamped with the front end's pickup of them
    (``step_outputs``: ``first_seen`` ends TTFT, as vLLM's API server stamps it). A request joining at
    a step's end is in the next step. Returns ``requests`` (the same objects, timestamps filled in on
    the engine clock), in their given order.
    """
    arrivals = sorted(requests, key=lambda r: r.arrival)
    joins: list[tuple[float, int, EngineRequest]] = []
    i = 0
    while i < len(arrivals) or joins or not engine.idle() or engine.pending is not None:
        ta = arrivals[i].arrival if i < len(arrivals) else math.inf
        tj = joins[0][0] if joins else math.inf
        end = engine.plan(max_steps=1)
        if end is not None and end < min(ta, tj):
            finished = engine.commit()
            step_outputs(frontend, engine, finished, not engine.idle())
        elif ta <= tj:
            busy = not engine.idle() or engine.pending is not None
            heapq.heappush(joins, (frontend.admit(ta, busy), i, arrivals[i]))
            i += 1
        else:
            _, _, r = heapq.heappop(joins)
            engine.add(r, now=tj)
    return requests


def read_azure(path: str | Path, limit: int | None = None, time_scale: float = 1.0) -> list[tuple[float, int, int]]:
    """Azure LLM inference 2023 rows as ``(arrival_s, prompt_tokens, output_tokens)``.

    ``arrival_s`` is seconds since the first row, divided by ``time_scale`` (2.0 = twice the rate).
    Raises ValueError naming the row for a malformed line.
    """
    out = []
    t0 = None
    with open(path, newline="") as f:
        for i, row in enumerate(csv.DictReader(f)):
            if limit is not None and i >= limit:
                break
            try:
                ts = datetime.fromisoformat(row["TIMESTAMP"][:26])
                p, g = int(row["ContextTokens"]), int(row["GeneratedTokens"])
            except (KeyError, ValueError) as exc:
                raise ValueError(f"{path}: row {i + 2}: {exc}") from None
            if t0 is None:
                t0 = ts
            out.append(((ts - t0).total_seconds() / time_scale, max(1, p), max(1, g)))
    return out


def read_mooncake(path: str | Path, limit: int | None = None,
                  time_scale: float = 1.0) -> list[tuple[float, int, int, tuple[int, ...]]]:
    """Mooncake rows as ``(arrival_s, prompt_tokens, output_tokens, hash_ids)``."""
    out = []
    with open(path) as f:
        for i, line in enumerate(f):
            if limit is not None and i >= limit:
                break
            try:
                d = json.loads(line)
                out.append((d["timestamp"] / 1000.0 / time_scale, max(1, int(d["input_length"])),
                            max(1, int(d["output_length"])), tuple(d.get("hash_ids", ()))))
            except (KeyError, ValueError, TypeError) as exc:
                raise ValueError(f"{path}: line {i + 1}: {exc}") from None
    return out


def engine_requests(rows, block_size: int = 16) -> list[EngineRequest]:
    """EngineRequests from ``read_azure`` / ``read_mooncake`` rows (prefix segments from hash ids)."""
    reqs = []
    for i, row in enumerate(rows):
        segs = segments_from_hash_ids(row[3], row[1], block_size=block_size) if len(row) > 3 and row[3] else ()
        reqs.append(EngineRequest(f"req-{i}", row[1], row[2], segments=segs, arrival=row[0]))
    return reqs


def single_call_plans(rows, model: str = "meta-llama/Llama-3.1-8B-Instruct", tenant: str = "trace",
                      task_type: str = "chat"):
    """One single-call ``TaskPlan`` per trace row (what ``infercost emulate --virtual`` replays)."""
    from serving.plans import CallPlan, StepPlan, TaskPlan

    plans = []
    for i, row in enumerate(rows):
        blocks = tuple(row[3]) if len(row) > 3 else ()
        plans.append(TaskPlan(task_id=f"{tenant}-{i}", task_type=task_type, tenant=tenant, arrival_s=row[0],
                              steps=(StepPlan("answer", (CallPlan(row[1], row[2], prefix_blocks=blocks),)),),
                              model=model))
    return plans
