"""Extract a period's workload and its clients' and gateway's behaviour from the store.

Position: planner. Reads only named queries (``schema.queries.planner``,
``schema.queries.review.prefix_cache``). Every setting the replay needs is either *measured*
(with the evidence: how many observations, which query) or *assumed* (a stated default, because
the period never exercised it); ``Workload.evidence`` records which, and the report prints it.

Client behaviour (``serving.plans.RetryPolicy``, the task SDK's retry loop):

* ``timeout_s``: median duration of the client attempts that ended in ``error.type = timeout``.
* ``max_attempts``: the highest ``task.attempt`` seen (when any call was retried).
* backoff: full jitter draws ``uniform(0, cap_r)`` before retry ``r`` (AWS, "Exponential Backoff
  And Jitter"), so ``cap_r ~ 2 x mean gap`` between a failed attempt's end and the next attempt's
  start; ``backoff_base_s = cap_1``, ``backoff_max_s`` = the largest cap seen (needs >= 5 gaps).
* ``give_up_after_failed_steps``: one more than the most failed steps a successful task survived.
* ``abandon_after_s``: median duration of the abandoned tasks.

Gateway: routing policy = the policy of most upstream attempts; hidden retry budget = the most
hidden retries one request made; admission rejections are counted (caps are not inferable).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from datetime import datetime

from planner.workload import (SHARING_MIN_HIT_RATE, Workload, WorkloadError, hourly_counts, naive_utc,
                              plans_from_frames, share_common_prefix, share_prefixes, sharing_fraction,
                              sharing_potential)
from serving.plans import RetryPolicy

MIN_GAPS = 5  # backoff estimates need at least this many observed gaps


def measured_slos(tasks) -> dict[str, tuple[float | None, float | None]]:
    """Per task type, the (ttft_ms, e2e_ms) budget most of its tasks carried."""
    out = {}
    for task_type, group in tasks.groupby("task_type"):
        ttft = group["slo_ttft_ms"].dropna()
        e2e = group["slo_e2e_ms"].dropna()
        out[str(task_type)] = (float(ttft.mode().iloc[0]) if len(ttft) else None,
                               float(e2e.mode().iloc[0]) if len(e2e) else None)
    return out


def backoff_caps(attempts) -> dict[int, list[float]]:
    """Gaps (seconds) before retry r (1 = first retry), keyed by r, from client attempt rows.

    A retry numbered n pairs with the latest-ending failed attempt n-1 of the same (task, step)
    that ended before it started (fan-out steps have several calls; this is the closest match)."""
    gaps: dict[int, list[float]] = defaultdict(list)
    groups = defaultdict(list)
    for row in attempts.itertuples(index=False):
        groups[(row.task_id, row.step)].append(row)
    for rows in groups.values():
        for row in rows:
            n = int(row.attempt)
            if n < 2:
                continue
            prev = [r for r in rows if int(r.attempt) == n - 1 and r.status == "error" and r.end_time <= row.start_time]
            if prev:
                last = max(prev, key=lambda r: r.end_time)
                gaps[n - 1].append((row.start_time - last.end_time).total_seconds())
    return gaps


def infer_client(timeouts, attempts, tasks, steps) -> tuple[RetryPolicy, dict]:
    """The clients' RetryPolicy and the evidence for each field (module docstring)."""
    default = RetryPolicy()
    evidence = {}
    row = timeouts.iloc[0] if len(timeouts) else None
    n_timeouts = int(row["timeouts"]) if row is not None else 0
    if n_timeouts > 0:
        timeout_s = float(row["timeout_median_s"])
        evidence["timeout_s"] = f"measured: median of {n_timeouts} client attempts ended by timeout"
    else:
        timeout_s = default.timeout_s
        evidence["timeout_s"] = f"assumed {default.timeout_s:g} s (SDK default): no attempt timed out"
    retries = int(row["retries"]) if row is not None else 0
    if retries > 0:
        max_attempts = int(row["max_attempt"])
        evidence["max_attempts"] = f"measured: highest task.attempt over {retries} retries"
    else:
        max_attempts = default.max_attempts
        evidence["max_attempts"] = f"assumed {default.max_attempts} (SDK default): no call was retried"
    gaps = backoff_caps(attempts) if len(attempts) else {}
    caps = {r: 2 * statistics.fmean(g) for r, g in gaps.items() if len(g) >= MIN_GAPS}
    if 1 in caps:
        base = round(caps[1], 3)
        top = round(max(caps.values()), 3)
        evidence["backoff"] = (f"measured: {len(gaps[1])} gaps before first retries (cap = 2 x mean gap); "
                               f"max from retries {sorted(caps)}")
    else:
        base, top = default.backoff_base_s, default.backoff_max_s
        evidence["backoff"] = f"assumed base {base:g} s, max {top:g} s (SDK default): fewer than {MIN_GAPS} retries"
    top = max(top, base)
    failed_steps = defaultdict(int)
    for srow in steps.itertuples(index=False):
        if len(srow.ok) < int(srow.calls):
            failed_steps[srow.task_id] += 1
    survived = [failed_steps.get(t, 0) for t, o in zip(tasks["task_id"], tasks["outcome"]) if o == "success"]
    give_up = max(survived, default=0) + 1
    evidence["give_up_after_failed_steps"] = (f"measured: successful tasks survived up to {give_up - 1} failed "
                                              f"step(s)")
    abandoned = tasks.loc[tasks["outcome"] == "abandoned", "e2e_s"].dropna()
    if len(abandoned):
        abandon = float(abandoned.median())
        evidence["abandon_after_s"] = f"measured: median duration of {len(abandoned)} abandoned tasks"
    else:
        abandon = None
        evidence["abandon_after_s"] = "none: no task was abandoned"
    policy = RetryPolicy(max_attempts=max_attempts, backoff_base_s=base, backoff_max_s=top, timeout_s=timeout_s,
                         give_up_after_failed_steps=give_up, abandon_after_s=abandon)
    return policy, evidence


def infer_gateway(gateway) -> tuple[str, int, int, dict]:
    """(routing policy, hidden retry budget, admission rejections, evidence) from ``planner.gateway``."""
    evidence = {}
    policies = gateway[(gateway["kind"] == "policy") & (gateway["name"] != "")]
    if len(policies):
        top = policies.sort_values("n", ascending=False).iloc[0]
        policy = str(top["name"])
        evidence["policy"] = f"measured: gateway.policy of {int(top['n'])} of {int(policies['n'].sum())} attempts"
    else:
        policy = "round_robin"
        evidence["policy"] = "assumed round_robin (the gateway's default): no gateway attempt spans"
    admission = gateway[gateway["kind"] == "admission"]
    seen = int(admission["max_retries"].max()) if len(admission) else 0
    if seen > 0:
        retries = seen
        evidence["gateway_retries"] = "measured: most hidden retries (gateway.retries) of one request"
    else:
        retries = 1
        evidence["gateway_retries"] = "assumed 1: no request needed a hidden retry"
    rejected = int(admission.loc[admission["name"] == "rejected", "n"].sum()) if len(admission) else 0
    if rejected:
        evidence["admission"] = (f"{rejected} requests rejected by admission control: caps are not inferable, "
                                 f"set them under current: in the candidates file")
    return policy, retries, rejected, evidence


def prefix_hit_rate(prefix_df) -> float | None:
    queries = float(prefix_df["query_tokens"].sum()) if len(prefix_df) else 0.0
    return float(prefix_df["hit_tokens"].sum()) / queries if queries > 0 else None


AUTO_TASK_SHARE = 0.5  # "auto": task sharing when the measured hit rate is at least this share of its bound


def auto_sharing_model(plans, hit_rate: float) -> str:
    """``task`` when the measured hit rate is at least ``AUTO_TASK_SHARE`` of what tasks resending their
    context could give (``sharing_potential``): the context is what is shared; else ``common``: a small
    hit rate far below that bound is what every call has in common (a system prompt). Two workloads
    measured: the demo's Mooncake day (5.1 % of a bound above 54 %: common) and the Azure trace with the
    builder's per-task context (43.6 %, close to its bound: task)."""
    potential = sharing_potential(plans)
    return "task" if potential > 0 and hit_rate >= AUTO_TASK_SHARE * potential else "common"


def extract_workload(store, start: datetime, end: datetime, slos: dict | None = None,
                     sharing_model: str = "auto") -> Workload:
    """The workload of ``[start, end)`` (UTC) as a :class:`Workload`.

    ``slos``: task type -> (ttft_ms, e2e_ms) the replay should carry (``--slo-from``); default:
    the budget most of each type's tasks carried. ``sharing_model``: how the measured prefix-cache hit
    rate is replayed (``workload.py``: ``common``, ``task``, or ``auto``: :func:`auto_sharing_model`).
    Raises WorkloadError when no task started in
    the period (or the cost jobs never ran over it: the planner reads their ``tasks``).
    """
    from schema.queries import planner as pq
    from schema.queries import review

    start, end = naive_utc(start), naive_utc(end)
    tasks = pq.workload_tasks(store, start, end)
    if not len(tasks):
        raise WorkloadError(f"no task started between {start:%Y-%m-%d %H:%M} and {end:%Y-%m-%d %H:%M} UTC in the "
                            f"cost job's tasks: is there traffic, and did the cost jobs run over it? "
                            f"(infercost cost --recompute --since ...)")
    steps = pq.workload_steps(store, start, end)
    units = pq.workload_units(store, start, end)
    measured = measured_slos(tasks)
    effective = {**measured, **(slos or {})}
    plans = plans_from_frames(tasks, steps, units, start, effective)
    if not plans:
        raise WorkloadError("the period's tasks made no model call the planner could replay")
    client, evidence = infer_client(pq.timeouts(store, start, end), pq.client_attempts(store, start, end), tasks,
                                    steps)
    policy, retries, rejected, gw_evidence = infer_gateway(pq.gateway(store, start, end))
    evidence.update(gw_evidence)
    hit_rate = prefix_hit_rate(review.prefix_cache(store, start, end))
    sharing = hit_rate is not None and hit_rate > SHARING_MIN_HIT_RATE
    fraction = sharing_fraction(plans, hit_rate) if sharing else 0.0
    if sharing and sharing_model == "auto":
        sharing_model = auto_sharing_model(plans, hit_rate)
    evidence["prefix_sharing"] = ("no vllm:prefix_cache_* counters: replayed without sharing" if hit_rate is None
                                  else f"measured hit rate {hit_rate:.1%}: " +
                                  (f"calls of a task share the first {fraction:.0%} of its context"
                                   if sharing else "replayed without sharing"))
    if sharing and sharing_model == "common":
        plans, blocks = share_common_prefix(plans, hit_rate)
        evidence["prefix_sharing"] = (f"measured hit rate {hit_rate:.1%} (at most {sharing_potential(plans):.0%} if "
                                      f"every task resent its context): every call starts with the same "
                                      f"{blocks:.2f} block(s) of 512 tokens on average")
    elif sharing:
        plans = share_prefixes(plans, fraction)
    evidence["slos"] = "from the SLO file" if slos else "the budget most tasks of each type carried"
    return Workload(start=start, end=end, plans=tuple(plans), client=client, gateway_policy=policy,
                    gateway_retries=retries, admission_rejections=rejected, prefix_hit_rate=hit_rate,
                    prefix_sharing=sharing, sharing_model=sharing_model,
                    sharing_fraction=fraction, hourly=hourly_counts(plans, (end - start).total_seconds()),
                    evidence=evidence, slos=effective)
