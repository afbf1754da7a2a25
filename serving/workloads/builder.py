"""Task plans from real traces: chat, copilot and research-agent mixes with trace arrivals and lengths.

Position: serving (workloads). Output: ``serving.plans.TaskPlan`` lists, consumed by the live load
runner (:mod:`serving.workloads.runner`) and by the emulator's virtual-time simulator.

How a trace becomes tasks (documented choice):

* Each trace row is one model CALL: its arrival and its prompt/output lengths are replayed
  exactly, so the fleet sees the trace's call rate (x ``rate_scale``) and token distributions.
* Calls are grouped in arrival order into tasks: each task draws its type from ``mix`` and takes
  the next ``n`` calls (chat 1, copilot 10-20, research_agent 40-60, about 50). The task arrives at
  its first call's time; in a live run its later calls follow as its steps complete.
* Steps: chat = one step; copilot = mostly sequential single-call steps with an occasional
  fan-out of 2-3 calls; research_agent = ``plan``, then alternating ``search_k`` fan-outs (4-8
  concurrent calls) and sequential ``read_k`` calls, then ``synthesize``.
* Prefix sharing: Mooncake ``hash_ids`` are kept exactly (offset per replay loop, so a looped day
  does not share blocks with the previous loop). Azure carries none; there the calls of one
  multi-call task share the task's context as a prefix (block ids unique to the task; chat turns
  share nothing), which is how agent frameworks re-send their growing context.
* ``duration_s`` longer than the trace loops it (a period = trace span / rate_scale);
  ``start_offset_s`` selects a window of that looped timeline, so a week can be built hour by hour.
  ``arrival_s`` is seconds from the workload start (the offset included).
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np

from serving.plans import CallPlan, StepPlan, TaskPlan
from serving.workloads.traces import MOONCAKE_BLOCK_TOKENS, load_trace

DEFAULT_MIX = {"chat": 0.6, "copilot": 0.3, "research_agent": 0.1}
DEFAULT_TENANTS = ("acme", "globex", "initech", "umbrella", "hooli")
# Priorities and latency budgets per task type (milliseconds). Interactive types get a TTFT SLO;
# research agents run in the background. Values are operator defaults, not measurements.
DEFAULT_PRIORITY = {"chat": "interactive", "copilot": "interactive", "research_agent": "batch"}
DEFAULT_SLO_MS = {"chat": (2000.0, 60_000.0), "copilot": (1000.0, 300_000.0), "research_agent": (None, 1_800_000.0)}
TASK_TYPES = ("chat", "copilot", "research_agent")
DEFAULT_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
AZURE_TASK_BLOCK_BASE = 1 << 40  # synthetic per-task block ids live far above Mooncake's (< 2**18)
# Share of tasks that fail on their own (a step's result is rejected), per task type, for agentic
# demos. research_agent: 0.39 = 1 - pass^1 of gpt-4o on tau-bench's retail domain (61.2 %; Yao et
# al., "tau-bench", arXiv:2406.12045, 2024, Table 2; its airline domain is worse, 35.2 %).
# copilot: 0.12 = an assumption (no public per-action failure rate of coding assistants; chosen
# below the agent's since an action has fewer steps). chat: 0 (a turn has one step; a bad answer is
# still a delivered one).
AGENTIC_FAILURE_RATES = {"chat": 0.0, "copilot": 0.12, "research_agent": 0.39}
# Share of an agent's model calls whose answer the client rejects and asks again (an invalid or
# wrong tool call): 0.1, about 1 - the overall accuracy of the strongest models on the Berkeley
# Function Calling Leaderboard (Yan et al., 2024, gorilla.cs.berkeley.edu/leaderboard: ~0.9).
# Applied to the multi-call types (copilot, research_agent); chat answers are not re-asked.
AGENTIC_REASK_RATES = {"chat": 0.0, "copilot": 0.1, "research_agent": 0.1}


def _n_calls(task_type: str, rng: random.Random) -> int:
    if task_type == "chat":
        return 1
    if task_type == "copilot":
        return rng.randint(10, 20)
    return rng.randint(40, 60)


def _step_sizes(task_type: str, n: int, rng: random.Random) -> list[tuple[str, int]]:
    """Split ``n`` calls into named steps (name, calls); the sizes sum to ``n``."""
    if task_type == "chat":
        return [("respond", n)]
    steps: list[tuple[str, int]] = []
    if task_type == "copilot":
        steps.append(("context", 1))
        left, k = n - 1, 1
        while left > 0:
            size = min(left, rng.choice((1, 1, 1, 2, 3)))
            steps.append((f"edit_{k}" if size == 1 else f"check_{k}", size))
            left -= size
            k += 1
        return steps
    steps.append(("plan", 1))
    left, k = n - 2, 1
    while left > 0:
        fan = min(left, rng.randint(4, 8))
        steps.append((f"search_{k}", fan))
        left -= fan
        if left > 0:
            steps.append((f"read_{k}", 1))
            left -= 1
        k += 1
    steps.append(("synthesize", 1))
    return steps


def _reasks(rng: random.Random, p: float, cap: int = 2) -> int:
    n = 0
    while n < cap and rng.random() < p:
        n += 1
    return n


def _validate_rates(rates: dict[str, float]) -> dict[str, float]:
    problems = [f"{t!r}: failure rate must be in [0, 1], got {r}" for t, r in rates.items() if not 0 <= r <= 1]
    if problems:
        raise ValueError("invalid failure rates: " + "; ".join(problems))
    return dict(rates)


def _validate_mix(mix: dict[str, float]) -> dict[str, float]:
    problems = [f"unknown task type {t!r}" for t in mix if t not in TASK_TYPES]
    problems += [f"share of {t!r} must be >= 0" for t, s in mix.items() if s < 0]
    if not problems and sum(mix.values()) <= 0:
        problems.append("shares must sum to > 0")
    if problems:
        raise ValueError("invalid task mix: " + "; ".join(problems) + f" (types: {', '.join(TASK_TYPES)})")
    total = sum(mix.values())
    return {t: s / total for t, s in mix.items() if s > 0}


def build_plans(trace: str = "azure", data_dir: str | Path | None = None, mix: dict[str, float] | None = None,
                rate_scale: float = 1.0, duration_s: float = 3600.0, start_offset_s: float = 0.0, seed: int = 0,
                tenants: list[str] | tuple[str, ...] | None = None, model: str = DEFAULT_MODEL,
                priorities: dict[str, str] | None = None,
                slo_ms: dict[str, tuple[float | None, float | None]] | None = None,
                max_tokens_cap: int | None = None,
                failure_rates: dict[str, float] | None = None,
                reask_rates: dict[str, float] | None = None) -> list[TaskPlan]:
    """Task plans replaying ``trace`` for ``duration_s`` seconds, starting ``start_offset_s`` into the looped trace.

    trace: "azure" | "mooncake". data_dir: folder of the trace files (default: the shipped copy, traces.default_data_dir).
    mix: task type -> share (normalised; default 60% chat, 30% copilot, 10% research_agent).
    rate_scale: call-rate multiplier (2.0 = twice the trace's calls per second). seed: makes the
    plans reproducible (types, call counts, steps, tenants). tenants: tenant ids, drawn with
    Zipf-like weights 1/rank (a few big customers). priorities / slo_ms: per task type
    (``slo_ms[type] = (ttft_ms, e2e_ms)``). max_tokens_cap: if set, output lengths are capped there.
    failure_rates: task type -> probability (0..1) that the task fails on its own (the client rejects a
    step's result: :attr:`TaskPlan.fail_at_step`, drawn uniformly over the task's steps), e.g.
    :data:`AGENTIC_FAILURE_RATES`. Default: no task fails on its own (only faults fail tasks).
    reask_rates: task type -> probability that the client rejects a call's answer and asks again
    (:attr:`CallPlan.rejected_attempts`, geometric, at most 2), e.g. :data:`AGENTIC_REASK_RATES`.
    Returns plans sorted by ``arrival_s`` (seconds from the workload start, offset included);
    a task whose first call falls in the window is kept whole. Raises ValueError on bad arguments.
    """
    if rate_scale <= 0:
        raise ValueError(f"rate_scale must be > 0, got {rate_scale}")
    if duration_s <= 0:
        raise ValueError(f"duration_s must be > 0, got {duration_s}")
    if start_offset_s < 0:
        raise ValueError(f"start_offset_s must be >= 0, got {start_offset_s}")
    shares = _validate_mix(dict(mix or DEFAULT_MIX))
    tenants = tuple(tenants or DEFAULT_TENANTS)
    if not tenants:
        raise ValueError("tenants must not be empty")
    priorities = {**DEFAULT_PRIORITY, **(priorities or {})}
    slo = {**DEFAULT_SLO_MS, **(slo_ms or {})}
    tr = load_trace(trace, str(data_dir) if data_dir is not None else None)

    # The looped, time-scaled call timeline restricted to [start, end).
    period = tr.span_s / rate_scale
    scaled = tr.arrival_s / rate_scale
    start, end = start_offset_s, start_offset_s + duration_s
    first_loop, last_loop = int(start // period), int(end // period)
    loops, rows, times = [], [], []
    for loop in range(first_loop, last_loop + 1):
        t = scaled + loop * period
        lo, hi = np.searchsorted(t, start, "left"), np.searchsorted(t, end, "left")
        if hi > lo:
            idx = np.arange(lo, hi)
            rows.append(idx)
            times.append(t[lo:hi])
            loops.append(np.full(hi - lo, loop))
    if not rows:
        return []
    rows_a, times_a, loops_a = np.concatenate(rows), np.concatenate(times), np.concatenate(loops)
    prompt_a = tr.prompt_tokens[rows_a]
    output_a = tr.output_tokens[rows_a]
    if max_tokens_cap is not None:
        output_a = np.minimum(output_a, max_tokens_cap)
    hash_stride = 0
    if tr.hash_ids is not None:
        # Flattened ids so a replay loop's offset is one vectorised add per call, not a Python loop.
        lengths = np.fromiter((len(h) for h in tr.hash_ids), dtype=np.int64, count=len(tr.hash_ids))
        offs = np.concatenate(([0], np.cumsum(lengths))).tolist()
        flat = np.fromiter((x for h in tr.hash_ids for x in h), dtype=np.int64, count=int(lengths.sum()))
        hash_stride = int(flat.max()) + 1 if len(flat) else 1

    # Scalar draws from the stdlib generator: ~10x cheaper per draw than numpy's, and a week of
    # plans makes hundreds of thousands of them.
    rng = random.Random(seed)
    # Failures draw from their own generator so the types, sizes and tenants stay those of the seed.
    fail_rng = random.Random(seed * 1_000_003 + 17)
    failure_rates = _validate_rates(failure_rates or {})
    reask_rates = _validate_rates(reask_rates or {})
    types = list(shares)
    probs = [shares[t] for t in types]
    weights = [1.0 / r for r in range(1, len(tenants) + 1)]
    plans: list[TaskPlan] = []
    i, n_rows, k = 0, len(rows_a), 0
    while i < n_rows:
        task_type = rng.choices(types, probs)[0]
        n = min(_n_calls(task_type, rng), n_rows - i)
        sl = slice(i, i + n)
        prompts, outputs = prompt_a[sl].tolist(), output_a[sl].tolist()
        if tr.hash_ids is not None:
            blocks = [tr.hash_ids[r] if lp == 0 else tuple((flat[offs[r]:offs[r + 1]] + lp * hash_stride).tolist())
                      for r, lp in zip(rows_a[sl].tolist(), loops_a[sl].tolist())]
        elif n > 1:
            base = AZURE_TASK_BLOCK_BASE + (int(seed) << 24) + k * 4096
            blocks = [tuple(range(base, base + p // MOONCAKE_BLOCK_TOKENS)) for p in prompts]
        else:
            blocks = [()] * n
        reask = reask_rates.get(task_type, 0.0)
        calls = [CallPlan(p, o, b, rejected_attempts=_reasks(fail_rng, reask) if reask else 0)
                 for p, o, b in zip(prompts, outputs, blocks)]
        steps, pos = [], 0
        for name, size in _step_sizes(task_type, n, rng):
            steps.append(StepPlan(name, tuple(calls[pos:pos + size])))
            pos += size
        ttft_ms, e2e_ms = slo.get(task_type, (None, None))
        fail_at = None
        if fail_rng.random() < failure_rates.get(task_type, 0.0):
            fail_at = fail_rng.randrange(len(steps))
        plans.append(TaskPlan(task_id=f"{trace}-{seed}-{int(start)}-{k:07d}", task_type=task_type,
                              tenant=rng.choices(tenants, weights)[0], arrival_s=float(times_a[i]),
                              steps=tuple(steps), priority=priorities.get(task_type, "interactive"), model=model,
                              slo_ttft_ms=ttft_ms, slo_e2e_ms=e2e_ms, fail_at_step=fail_at))
        i += n
        k += 1
    return plans
