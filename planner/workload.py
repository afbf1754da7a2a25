"""The measured workload of a period, extracted from the store as task plans the simulator replays.

Position: planner (wiring: reads the store through ``schema.queries.planner``, produces
``serving.plans.TaskPlan``). What is extracted, and from where (docs/telemetry.md):

* **tasks**: every task that started in ``[start, end)`` and ended before ``end`` (cost job's
  ``tasks``; a task still running at ``end`` is left out, so the period's workload does not grow when
  the cost jobs later reach its end): arrival, type, tenant, priority, model, SLO. Arrivals are replayed exactly, so the diurnal shape, bursts and the
  task-type mix are the period's own; ``hourly`` keeps the shape for :func:`resample`.
* **steps and calls**: from the client attempt spans, a step's calls are its first attempts (a
  fan-out of k calls has k); each accepted call keeps its measured prompt and output lengths. A call
  that never succeeded takes the lengths of the largest unit of GPU work its task ran that no
  accepted call explains (else the task type's median). Tasks whose client sent no spans
  (gateway-only deployments) become one sequential step per accepted unit of work.
* **prefix sharing**: the engine spans carry no per-call cache hits (vLLM 0.32), so the planner
  measures the fleet's prefix-cache hit rate from ``vllm:prefix_cache_hits / queries`` and, when
  there was sharing (> 0.5 %), replays it in one of two shapes, each sized so the replay's hit rate
  is about the measured one (512-token blocks, as ``serving.workloads.builder``):
  ``common`` (:func:`share_common_prefix`): every call starts with the same blocks (a
  system prompt, a tool catalogue), so each call saves about the same share of its prefill;
  ``task`` (:func:`share_prefixes`, :func:`sharing_fraction`): the calls of one multi-call task share
  the first part of the task's context, the way agent frameworks resend it; ``auto`` (the default)
  chooses by how close the measured rate is to what ``task`` could give at most
  (``planner.extract.auto_sharing_model``). Without per-call cache evidence the two cannot be told
  apart for sure; on the demo's day (Mooncake prompts, whose hits are mostly
  the block every request starts with) ``task`` gave the multi-call tasks all the hits and replayed
  their p95 TTFT 7-10 % low and chat's 10 % high (median of 3 seeds), ``common`` within 4-8 %
  (median of 5).
  Sharing a task's whole context replayed a 5 % fleet as 54 %. The backtest reports measured vs
  replayed hit rate.

Client and gateway behaviour are inferred in ``behaviour.py``.
"""

from __future__ import annotations

import random
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

import pandas as pd

from schema.queries import num
from serving.plans import CallPlan, RetryPolicy, StepPlan, TaskPlan

BLOCK_TOKENS = 512  # prefix block size of the replayed sharing (Mooncake's block, builder.py)
TASK_BLOCK_BASE = 1 << 41  # synthetic per-task block ids, apart from the workload builder's (1 << 40)
SHARING_MIN_HIT_RATE = 0.005  # below this measured hit rate the period had no prefix sharing to replay
HOUR = 3600.0


class WorkloadError(ValueError):
    """The period has no workload the planner can replay (no tasks, or the cost jobs never ran on it)."""


@dataclass(frozen=True)
class Workload:
    """A period's workload. ``start``/``end``: naive UTC. ``plans``: TaskPlans in arrival order,
    ``arrival_s`` seconds from ``start``. ``client``: the inferred RetryPolicy; ``gateway``: policy
    and hidden retry budget; ``evidence``: for every inferred setting, how it was obtained.
    ``hourly``: tasks started per hour of the period. ``prefix_hit_rate``: measured (None = no
    counters); ``prefix_sharing``: whether the replay shares task context as a prefix."""

    start: datetime
    end: datetime
    plans: tuple[TaskPlan, ...]
    client: RetryPolicy
    gateway_policy: str
    gateway_retries: int
    admission_rejections: int = 0
    prefix_hit_rate: float | None = None
    prefix_sharing: bool = False
    sharing_model: str = "common"  # "common": every call's first blocks; "task": a task's calls share its context
    sharing_fraction: float = 1.0  # "task": share of a task's context its calls share (sized to the hit rate)
    hourly: tuple[int, ...] = ()
    evidence: dict = field(default_factory=dict)
    slos: dict = field(default_factory=dict)  # task type -> (ttft_ms, e2e_ms) the replay carries

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()

    @property
    def calls(self) -> int:
        return sum(p.n_calls for p in self.plans)

    def summary(self) -> dict:
        """JSON-able facts: tasks, calls, mix, tokens, hourly shape, client behaviour and its evidence."""
        mix = Counter(p.task_type for p in self.plans)
        calls = [c for p in self.plans for s in p.steps for c in s.calls]
        return {
            "start": self.start.isoformat(), "end": self.end.isoformat(), "tasks": len(self.plans),
            "calls": len(calls), "task_types": dict(sorted(mix.items())),
            "prompt_tokens_mean": statistics.fmean(c.prompt_tokens for c in calls) if calls else None,
            "output_tokens_mean": statistics.fmean(c.output_tokens for c in calls) if calls else None,
            "hourly_tasks": list(self.hourly),
            "client": {"max_attempts": self.client.max_attempts, "timeout_s": self.client.timeout_s,
                       "backoff_base_s": self.client.backoff_base_s, "backoff_max_s": self.client.backoff_max_s,
                       "give_up_after_failed_steps": self.client.give_up_after_failed_steps,
                       "abandon_after_s": self.client.abandon_after_s},
            "gateway": {"policy": self.gateway_policy, "retries": self.gateway_retries,
                        "admission_rejections": self.admission_rejections},
            "prefix_hit_rate": self.prefix_hit_rate, "prefix_sharing": self.prefix_sharing,
            "sharing_fraction": self.sharing_fraction,
            "slos": {k: list(v) for k, v in sorted(self.slos.items())},
            "evidence": self.evidence,
        }


def naive_utc(t: datetime) -> datetime:
    if t.tzinfo is not None:
        t = t.astimezone(timezone.utc).replace(tzinfo=None)
    return t


def _seconds(ts, start: datetime) -> float:
    """A timestamp from the store (naive or aware UTC) as float seconds after ``start`` (naive UTC)."""
    ts = pd.Timestamp(ts)
    if ts.tzinfo is not None:
        ts = ts.tz_convert(None)
    return (ts - pd.Timestamp(start)).total_seconds()


def build_steps(task_type: str, steps_rows: list, units: list, median_output: dict) -> tuple[StepPlan, ...]:
    """The StepPlans of one task from its client-span step rows and its units of GPU work.

    ``steps_rows``: dicts (step, calls, ok) in start order, ``ok`` in call order; ``units``: (start,
    prompt, output, ok) in start order. Accepted calls keep their measured lengths and their order
    in the step (the simulator routes a fan-out in that order); calls that never succeeded follow
    them, taking the largest unexplained unit (else (median prompt, median output) of the type)."""
    if not steps_rows:  # no client spans: one step per accepted unit (order known, fan-out not)
        ok_units = [u for u in units if u[3]] or list(units[-1:])
        return tuple(StepPlan(f"call_{i + 1}", (CallPlan(max(1, int(u[1])), max(1, int(u[2]))),))
                     for i, u in enumerate(ok_units))
    explained = Counter()
    for row in steps_rows:
        for pair in row["ok"]:
            explained[(int(pair[0]), int(pair[1]))] += 1
    spare = []  # units no accepted call explains: evidence of the failed calls' sizes
    for u in sorted(units, key=lambda u: (-int(u[1] or 0), -int(u[2] or 0))):
        key = (int(u[1] or 0), int(u[2] or 0))
        if u[3] and explained[key] > 0:
            explained[key] -= 1
        else:
            spare.append(key)
    default_out = median_output.get(task_type, (512, 128))
    out = []
    for row in steps_rows:
        calls = [CallPlan(max(1, int(p)), max(1, int(o))) for p, o in row["ok"]]
        for _ in range(max(int(row["calls"]), 1) - len(calls)):
            p, o = spare.pop(0) if spare else default_out
            calls.append(CallPlan(max(1, int(p)), max(1, int(o) if o else default_out[1])))
        out.append(StepPlan(str(row["step"]) or "step", tuple(calls)))
    return tuple(out)


def share_prefixes(plans: list[TaskPlan], fraction: float = 1.0) -> list[TaskPlan]:
    """Give the calls of each multi-call task the first ``fraction`` of the task's context as a shared
    prefix (module doc)."""
    out = []
    for k, p in enumerate(plans):
        if p.n_calls < 2:
            out.append(p)
            continue
        base = TASK_BLOCK_BASE + k * 4096
        steps = tuple(StepPlan(s.name, tuple(replace(c, prefix_blocks=tuple(range(
            base, base + int(c.prompt_tokens * fraction) // BLOCK_TOKENS))) for c in s.calls)) for s in p.steps)
        out.append(replace(p, steps=steps))
    return out


COMMON_BLOCK_BASE = TASK_BLOCK_BASE - (1 << 20)  # block ids of the fleet-wide common prefix
CALL_BLOCK_BASE = 1 << 42  # block ids of a call's own blocks, after the common ones (above the per-task ids)


def share_common_prefix(plans: list[TaskPlan], hit_rate: float) -> tuple[list[TaskPlan], float]:
    """Give every call the same first blocks (a system prompt, a tool catalogue: what every request of a
    deployment starts with), so the share of prompt tokens they cover is about ``hit_rate``: ``b`` blocks
    for every call and one more for the share of calls (spread evenly in arrival order) that brings the
    cover from ``b``'s up to the rate (one 512-token block is ~4 % of a 13k-token prompt: whole blocks
    alone replayed a 5.4 % fleet at 3.7 %). The rest of each prompt is blocks of the call's own, ids no
    other call has: a retry resends the same prompt, and on the replica that prefilled it finds it
    cached, as the measured one did (without them a replay of an incident's timeouts prefilled every
    retried prompt again and queued more than the fleet had). The blocks are sized to the whole
    measured rate, retries' hits included, so first attempts get a little more than theirs.
    Returns the plans and the mean common blocks per call."""
    prompts = [c.prompt_tokens for p in plans for s in p.steps for c in s.calls]
    total = sum(prompts)

    def cover(b):
        return sum(min(n // BLOCK_TOKENS, b) * BLOCK_TOKENS for n in prompts) / total if total else 0.0

    blocks = 0
    while total and blocks < 4096 and cover(blocks + 1) <= hit_rate:
        blocks += 1
    low, high = cover(blocks), cover(blocks + 1)
    extra = (hit_rate - low) / (high - low) if high > low else 0.0  # share of calls with one more block
    out, owed, given, n, next_own = [], 0.0, 0, 0, 0
    for p in plans:
        steps = []
        for s in p.steps:
            calls = []
            for c in s.calls:
                owed += extra
                b = blocks + (1 if owed >= 1.0 else 0)
                owed -= 1.0 if owed >= 1.0 else 0.0
                b = min(b, c.prompt_tokens // BLOCK_TOKENS)
                given, n = given + b, n + 1
                own = max(0, -(-c.prompt_tokens // BLOCK_TOKENS) - b)
                calls.append(replace(c, prefix_blocks=tuple(range(COMMON_BLOCK_BASE, COMMON_BLOCK_BASE + b))
                                     + tuple(range(CALL_BLOCK_BASE + next_own, CALL_BLOCK_BASE + next_own + own))))
                next_own += own
            steps.append(StepPlan(s.name, tuple(calls)))
        out.append(replace(p, steps=tuple(steps)))
    return out, given / n if n else 0.0


def sharing_potential(plans) -> float:
    """The prefix-cache hit rate (0..1) full sharing of each task's context would give if every call
    after a task's first found the blocks its earlier calls left (same replica, nothing evicted): an
    upper bound, linear in the shared fraction."""
    hits = total = 0
    for p in plans:
        seen = 0
        for s in p.steps:
            for c in s.calls:
                blocks = c.prompt_tokens // BLOCK_TOKENS
                hits += min(blocks, seen) * BLOCK_TOKENS
                total += c.prompt_tokens
            seen = max([seen] + [c.prompt_tokens // BLOCK_TOKENS for c in s.calls])
    return hits / total if total else 0.0


def sharing_fraction(plans, measured_hit_rate: float) -> float:
    """The share of each task's context to replay as a shared prefix so the replay's hit rate is about
    the measured one: measured / :func:`sharing_potential` (at most 1). Evictions and calls routed to
    another replica make the replayed rate somewhat lower; the backtest prints both."""
    potential = sharing_potential(plans)
    return min(1.0, measured_hit_rate / potential) if potential > 0 else 0.0


def plans_from_frames(tasks, steps, units, start: datetime, slos: dict) -> list[TaskPlan]:
    """TaskPlans from the three workload frames (``schema.queries.planner.workload_*``).

    ``slos``: task type -> (ttft_ms, e2e_ms) to carry (the effective SLOs); a type missing there
    keeps the SLO its tasks carried."""
    by_task_steps = defaultdict(list)
    for row in steps.itertuples(index=False):
        by_task_steps[row.task_id].append({"step": row.step, "calls": row.calls, "ok": list(row.ok)})
    by_task_units = {row.task_id: list(row.units) for row in units.itertuples(index=False)}
    outputs = defaultdict(list)
    for row in tasks.itertuples(index=False):
        for srow in by_task_steps.get(row.task_id, ()):
            outputs[row.task_type].extend(srow["ok"])
    median_output = {t: (int(statistics.median(p for p, _ in v)), int(statistics.median(o for _, o in v)))
                     for t, v in outputs.items() if v}
    plans = []
    for row in tasks.itertuples(index=False):
        steps_rows = by_task_steps.get(row.task_id, [])
        task_units = by_task_units.get(row.task_id, [])
        if not steps_rows and not task_units:
            continue  # a task with no call at all (e.g. rejected before any attempt reached a model)
        built = build_steps(row.task_type, steps_rows, task_units, median_output)
        ttft, e2e = slos.get(row.task_type, (num(row.slo_ttft_ms), num(row.slo_e2e_ms)))
        # A task that failed although every call it made succeeded was failed by its client (a rejected
        # result, a failed check): the replay fails it after the same last step. Failures with a failed
        # call are left to the replay, which may or may not reproduce them on another fleet.
        rejected = (row.outcome == "failure" and bool(steps_rows)
                    and all(len(r["ok"]) >= int(r["calls"]) for r in steps_rows))
        plans.append(TaskPlan(task_id=row.task_id, task_type=row.task_type, tenant=row.tenant_id or "",
                              arrival_s=max(0.0, _seconds(row.start_time, start)), steps=built,
                              priority=row.tenant_priority or "interactive", model=row.model or "",
                              slo_ttft_ms=ttft, slo_e2e_ms=e2e, fail_at_step=len(built) - 1 if rejected else None))
    plans.sort(key=lambda p: (p.arrival_s, p.task_id))
    return impute_tails(plans, {row.task_id: row.outcome for row in tasks.itertuples(index=False)})


def impute_tails(plans: list[TaskPlan], outcomes: dict[str, str]) -> list[TaskPlan]:
    """Give each task that failed on a failed call (a timeout, a lost stream: not its client's own
    rejection) the steps it never reached, from the nearest-arriving successful task of its type that
    had more steps: its steps beyond the failed task's last one. A replay that fails the task at the
    same step never runs them (the client gives up); one that does not runs the work the task would
    have done instead of ending it early as a short success. Without them a replay of a day with a
    cascade lost ~700 of its ~21,500 calls, all in its busiest hours, and its queues stayed shorter."""
    donors = defaultdict(list)
    for p in plans:
        if outcomes.get(p.task_id) == "success":
            donors[p.task_type].append(p)
    out = []
    for p in plans:
        if outcomes.get(p.task_id) not in ("failure", "abandoned") or p.fail_at_step is not None:
            out.append(p)
            continue
        longer = [d for d in donors.get(p.task_type, ()) if len(d.steps) > len(p.steps)]
        if not longer:
            out.append(p)
            continue
        donor = min(longer, key=lambda d: (abs(d.arrival_s - p.arrival_s), d.task_id))
        out.append(replace(p, steps=p.steps + donor.steps[len(p.steps):]))
    return out


def hourly_counts(plans, seconds: float) -> tuple[int, ...]:
    hours = max(1, int(-(-seconds // HOUR)))
    counts = [0] * hours
    for p in plans:
        counts[min(hours - 1, int(p.arrival_s // HOUR))] += 1
    return tuple(counts)


def resample(workload: Workload, seed: int) -> list[TaskPlan]:
    """Another week like this one: per hour, a Poisson number of tasks (mean: the hour's measured
    count) drawn with replacement from the tasks of the same hour of day, at uniform times within
    the hour. Keeps the diurnal shape, the mix and each task's structure; changes arrivals and
    which tasks recur. For forward tests (a run with a different seed)."""
    rng = random.Random(seed)
    by_hour_of_day = defaultdict(list)
    for p in workload.plans:
        by_hour_of_day[int(p.arrival_s // HOUR) % 24].append(p)
    out = []
    for h, mean in enumerate(workload.hourly):
        pool = by_hour_of_day.get(h % 24)
        if not pool or mean <= 0:
            continue
        n = _poisson(rng, mean)
        for i in range(n):
            src = rng.choice(pool)
            out.append(replace(src, task_id=f"{src.task_id}~{seed}-{h}-{i}", arrival_s=h * HOUR + rng.random() * HOUR))
    out.sort(key=lambda p: (p.arrival_s, p.task_id))
    if not workload.prefix_sharing:
        return out
    if workload.sharing_model == "common":
        return share_common_prefix([_unshared(p) for p in out], workload.prefix_hit_rate or 0.0)[0]
    return share_prefixes([_unshared(p) for p in out], workload.sharing_fraction)


def _unshared(p: TaskPlan) -> TaskPlan:
    return replace(p, steps=tuple(StepPlan(s.name, tuple(replace(c, prefix_blocks=()) for c in s.calls))
                                  for s in p.steps))


def _poisson(rng: random.Random, mean: float) -> int:
    if mean > 50:  # normal approximation, ample at these sizes
        return max(0, int(round(rng.gauss(mean, mean ** 0.5))))
    limit, k, prod = pow(2.718281828459045, -mean), 0, rng.random()
    while prod > limit:
        k += 1
        prod *= rng.random()
    return k
