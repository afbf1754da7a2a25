"""The review's levers: the four moves (avoid, share, move, delay), each measured and priced.

Every saving is computed from this week's measurements with the method stated beside it (no
assumed percentages); where a measure is missing the lever says so and estimates nothing.
Savings are USD per week at this week's prices and allocation, i.e. the cost of the work or
capacity the move would free. Inputs are the DataFrames of ``schema.queries.review`` and
``schema.queries.cost``; this module does arithmetic only.

When the capacity planner (``infercost plan``) has a run covering the week, the review shows its
levers instead (:func:`planner_levers`): each move replayed on the week's workload as a candidate
fleet, with its predicted saving and risk, rather than estimated from the measurements.
"""

from __future__ import annotations

import math

from app.review import fmt
from app.review.model import Lever
from schema.queries import num

# error.type values that mean "the fleet was overloaded" (docs/telemetry.md: the gateway and the
# client record timeouts and HTTP statuses as error.type); admission control would delay these.
OVERLOAD_ERRORS = ("timeout", "http.429", "http.503", "http.504", "queue_full", "rejected", "admission_rejected")
AFFINITY_POLICIES = ("session_affinity", "prefix_aware", "prefixaware", "session", "cache_aware", "kvaware")


def _rows(df) -> list[dict]:
    return [] if df is None or df.empty else df.to_dict("records")


def avoid_lever(prefix_cache_df, prefill_df) -> Lever:
    """Prefix-cache hit rate; saving = each replica's prefill cost x the share of it the best
    replica's hit rate would have avoided: prefill_r x (1 - (1 - h_best) / (1 - h_r))."""
    prefill = {r["replica"]: r for r in _rows(prefill_df)}
    rates: dict[str, float] = {}
    source = ""
    pc = [r for r in _rows(prefix_cache_df) if (num(r["query_tokens"]) or 0) > 0]
    if pc:
        rates = {r["replica"]: num(r["hit_tokens"]) / num(r["query_tokens"]) for r in pc}
        hits = sum(num(r["hit_tokens"]) for r in pc)
        queries = sum(num(r["query_tokens"]) for r in pc)
        source = "vllm:prefix_cache_hits / vllm:prefix_cache_queries"
    else:
        spans = [r for r in prefill.values() if (num(r["prompt_tok"]) or 0) > 0]
        if spans and sum(num(r["cached_tok"]) or 0 for r in spans) > 0:
            rates = {r["replica"]: (num(r["cached_tok"]) or 0) / num(r["prompt_tok"]) for r in spans}
            hits = sum(num(r["cached_tok"]) or 0 for r in spans)
            queries = sum(num(r["prompt_tok"]) for r in spans)
            source = "cached / prompt tokens of the calls' spans"
    if not rates:
        return Lever("avoid", "Prefix caching", None, "%", "prefix-cache hit rate", None,
                     "Not measured: no vllm:prefix_cache_* counters and no cached-token attributes this week.")
    fleet = hits / queries
    best_replica, best = max(rates.items(), key=lambda kv: (kv[1], kv[0]))
    saving = 0.0
    for replica, h in rates.items():
        p = num(prefill.get(replica, {}).get("prefill_usd")) or 0.0
        if h < best and h < 1:
            saving += p * (1 - (1 - best) / (1 - h))
    prefill_total = sum(num(r["prefill_usd"]) or 0.0 for r in prefill.values())
    return Lever(
        "avoid", "Prefix caching", fleet, "%", "prefix-cache hit rate", saving,
        f"Prefill (uncached prompt) cost of each replica × the part a hit rate equal to the best replica's "
        f"({best_replica}: {fmt.pct(best)}) would have avoided. Source: {source}.",
        (("best replica", f"{best_replica} {fmt.pct(best)}"), ("prefill cost", fmt.usd(prefill_total))))


def share_lever(occupancy_df, replica_summary_df) -> Lever:
    """Batch occupancy (mean vllm:num_requests_running per replica); saving = per GPU type, the
    spend of the replicas that packing the mean load at the largest observed p95 batch would free:
    needed = ceil(sum of mean running / max p95 running); saving = spend x (1 - needed / n)."""
    spend = {r["grp"]: num(r["spend_usd"]) or 0.0 for r in _rows(replica_summary_df)}
    occ = [r for r in _rows(occupancy_df) if (num(r["running_points"]) or 0) > 0]
    if not occ:
        return Lever("share", "Batching (occupancy)", None, "requests", "mean running batch", None,
                     "Not measured: no vllm:num_requests_running points this week.")
    groups: dict[str, list[dict]] = {}
    for r in occ:
        groups.setdefault(r["gpu_type"] or "?", []).append(r)
    saving = 0.0
    details = []
    for gpu, rows in sorted(groups.items()):
        target = max(num(r["running_p95"]) or 0.0 for r in rows)
        load = sum(num(r["running_mean"]) or 0.0 for r in rows)
        n = len(rows)
        if target <= 0:
            continue
        needed = max(1, math.ceil(load / target - 1e-9))
        group_spend = sum(spend.get(r["replica"], 0.0) for r in rows)
        if needed < n:
            saving += group_spend * (1 - needed / n)
        details.append((f"{gpu}", f"{n} replicas, {needed} needed at batch {fmt.number(target, 1)}"))
    mean_running = sum(num(r["running_mean"]) or 0.0 for r in occ) / len(occ)
    return Lever(
        "share", "Batching (occupancy)", mean_running, "requests", "mean running batch per replica", saving,
        "Per GPU type: the mean running requests of all its replicas packed at the largest p95 batch any of "
        "them sustained this week; the replicas that frees × their share of that type's spend.",
        tuple(details))


def move_lever(replica_summary_df, engine_load_df, routing_df) -> Lever:
    """Replica imbalance: per (model, GPU type), the busiest replica's tokens over the mean; saving =
    spend above the group's cost per token on the replicas where it was higher:
    sum_r max(0, spend_r - tokens_r x group spend / group tokens)."""
    summary = {r["grp"]: r for r in _rows(replica_summary_df)}
    load = _rows(engine_load_df)
    groups: dict[tuple[str, str], list[str]] = {}
    for r in load:
        groups.setdefault((r["model_name"], r["gpu"]), []).append(r["replica"])
    saving = 0.0
    worst = None
    for key, replicas in groups.items():
        tokens = {rep: num(summary.get(rep, {}).get("tokens")) or 0.0 for rep in replicas}
        spends = {rep: num(summary.get(rep, {}).get("spend_usd")) or 0.0 for rep in replicas}
        total_tokens, total_spend = sum(tokens.values()), sum(spends.values())
        if len(replicas) < 2 or total_tokens <= 0:
            continue
        rate = total_spend / total_tokens
        saving += sum(max(0.0, spends[r] - tokens[r] * rate) for r in replicas)
        spread = max(tokens.values()) / (total_tokens / len(replicas))
        if worst is None or spread > worst[0]:
            worst = (spread, key)
    details = []
    policies = [r for r in _rows(routing_df) if r["kind"] == "policy"]
    attempts = sum(num(r["n"]) or 0 for r in policies)
    if attempts:
        affinity = sum(num(r["n"]) or 0 for r in policies if r["name"] in AFFINITY_POLICIES)
        details.append(("affinity routing", f"{fmt.pct(affinity / attempts)} of gateway attempts"))
        details.append(("policies", ", ".join(f"{r['name'] or '(none)'} {fmt.count(r['n'])}" for r in policies)))
    if worst is None:
        return Lever("move", "Routing (replica balance)", None, "×", "busiest replica's load / mean", None,
                     "Not measured: fewer than two replicas served the same model on the same GPU type.",
                     tuple(details))
    details.insert(0, ("group", f"{worst[1][0]} on {worst[1][1]}"))
    return Lever(
        "move", "Routing (replica balance)", worst[0], "× mean", "busiest replica's tokens / mean", saving,
        "Per model and GPU type: spend above the group's average cost per token on the replicas where it "
        "was higher (what balancing their traffic, or their capacity, would recover).", tuple(details))


def delay_lever(engine_load_df, occupancy_df, waste_errors_df, routing_df) -> Lever:
    """Queueing: request-weighted mean engine queue time; saving = retry and failed-task waste of
    calls that ended in an overload error (OVERLOAD_ERRORS), which admission control would have
    delayed instead of paying for."""
    load = [r for r in _rows(engine_load_df) if (num(r["requests"]) or 0) > 0 and num(r["queue_mean_s"]) is not None]
    waste = {r["error_type"]: num(r["usd"]) or 0.0 for r in _rows(waste_errors_df)}
    saving = sum(v for k, v in waste.items() if k in OVERLOAD_ERRORS)
    details = []
    if load:
        requests = sum(num(r["requests"]) for r in load)
        mean_queue = sum(num(r["queue_mean_s"]) * num(r["requests"]) for r in load) / requests
        worst = max(load, key=lambda r: num(r["queue_p95_s"]) or 0.0)
        details.append(("worst p95", f"{worst['replica']} {fmt.seconds(num(worst['queue_p95_s']))}"))
        over = sum(num(r["queued_over_threshold"]) or 0 for r in load)
        details.append(("queued > 1 s", fmt.pct(over / requests)))
    else:
        mean_queue = None
    occ = [r for r in _rows(occupancy_df) if (num(r["waiting_points"]) or 0) > 0]
    if occ:
        details.append(("mean waiting", fmt.number(sum(num(r["waiting_mean"]) for r in occ), 1) + " requests (fleet)"))
    admission = {r["name"]: num(r["n"]) or 0 for r in _rows(routing_df) if r["kind"] == "admission"}
    if admission:
        details.append(("admission rejected", fmt.count(admission.get("rejected", 0))))
    overload = ", ".join(f"{k} {fmt.usd(v)}" for k, v in sorted(waste.items(), key=lambda kv: -kv[1])
                         if k in OVERLOAD_ERRORS)
    return Lever(
        "delay", "Admission & queueing", mean_queue, "s", "mean time in engine queue", saving if (load or waste) else None,
        "Retry and failed-task waste of calls that ended in overload errors "
        f"({', '.join(OVERLOAD_ERRORS[:4])}, …){': ' + overload if overload else ''}; admission control "
        "and back-off would have delayed that work instead of paying for it.", tuple(details))


# --- levers computed by the capacity planner (infercost plan) ------------------------------------

RISK_WORDS = {"low": "low", "medium": "medium", "high": "high: misses an SLO"}


def planner_levers(run_df) -> list[Lever]:
    """The four moves as the planner evaluated them (``schema.queries.planner.run`` row), or [] when
    there is no run: each lever is a candidate fleet that changes that one move, replayed on the
    week's own workload with the same cost jobs; saving = (CPST current - CPST candidate) x the
    current replay's successful tasks (of the period; a lever compared on the busiest day of a long
    period is carried over the period's tasks), scaled to 7 days; risk = the SLO margin it leaves and its p95
    TTFT change (planner/report.py)."""
    import json

    rows = _rows(run_df)
    if not rows:
        return []
    run = rows[0]
    try:
        levers = json.loads(run.get("levers") or "[]")
    except ValueError:
        return []
    period_s = (run["period_end"] - run["period_start"]).total_seconds()
    week = 7 * 86400 / period_s if period_s > 0 else 1.0
    out = []
    for lev in levers:
        # a lever compared on the period's busiest day (planner/screen.py): its USD is that day's, and
        # ``to_period`` carries the same CPST gap over the period's successful tasks
        window = lev.get("window") or {}
        scale = week * ((num(window.get("to_period")) or 1.0) if window else 1.0)
        workload = "the busiest day's workload" if window else "the week's workload"
        source = f"Planner run {run['run_id']}"
        if lev.get("candidate") is None:
            out.append(Lever(lev["move"], lev["title"], None, "%", "predicted CPST saving", None,
                             f"{source}: no candidate changed this move ({lev.get('note') or 'not evaluated'})."))
            continue
        risk = lev.get("risk") or {}
        usd = num(lev.get("saving_usd"))
        change = num(risk.get("ttft_p95_change"))
        margin = num(risk.get("slo_margin"))
        risk_text = (f"{RISK_WORDS.get(risk.get('level'), risk.get('level'))}: worst SLO attainment "
                     f"{fmt.wow(margin)} vs target, p95 TTFT {fmt.wow(change)}")
        out.append(Lever(
            lev["move"], lev["title"], num(lev.get("saving_ratio")), "%", "predicted CPST saving",
            None if usd is None else usd * scale,
            f"{source}: {workload} replayed in virtual time on {lev.get('label') or lev['candidate']} "
            f"and costed by the same cost jobs; saving = (CPST current - CPST candidate) x successful tasks, "
            f"per 7 days. Risk {risk_text}.",
            (("candidate", f"{lev['candidate']}: {lev.get('label') or ''}"), ("risk", risk_text))))
    return out
