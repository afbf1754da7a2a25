"""The backtest's figures and, when it misses, why: the same named queries over the measured store
and over the current fleet's replay, outside the minutes of incidents the replay cannot model.

Position: planner. ``figures`` reads ``schema.queries.planner.backtest_tasks`` /
``backtest_replicas`` (the cost job's ``tasks`` and ``replica_minutes``); ``compare`` judges a
replay against the measured period and, for every figure off by more than the tolerance, names the
task type, the hours that contribute most to the gap, and what differs in those hours between the
measured period and the replay:

* **arrivals**: tasks that ended in the hour (the replay keeps the measured start times, so a gap
  here means tasks that ended in another hour, failed sooner, or ran longer);
* **lengths**: mean prompt and output tokens per call;
* **retries**: attempts beyond the first per call;
* **cache hit rate**: vLLM's prefix-cache counters (cached / prompt tokens);
* **batch size**: mean running requests and mean queue over the replicas' up minutes.

A driver is named when it differs by more than ``DRIVER_TOLERANCE`` (relative; 2 points for the hit
rate). CPST = spend / successful tasks over the compared minutes (the cost model's definition,
DESIGN.md); p95 TTFT = the exact p95 of the successful tasks' worst-call TTFT, as
``planner_task_latency``.
"""

from __future__ import annotations

from datetime import datetime

from schema.queries import num

ALL_HOURS = "1970-01-01T00:00:00"
DRIVER_TOLERANCE = 0.10
HIT_RATE_POINTS = 0.02
TOP_HOURS = 3


def figures(store, start: datetime, end: datetime, excluded=()) -> dict:
    """The backtest's figures of ``store`` over ``[start, end)`` less ``excluded`` ((from, to) UTC pairs).

    Returns ``{"cpst_usd", "spend_usd", "successful_tasks", "ttft_p95_s", "hit_rate", "types": {type:
    row}, "hours": {hour ISO: {"all": row, "types": {type: row}, "fleet": row}}}``; rows carry
    ``tasks``, ``successful_tasks``, ``ttft_p95_s``, ``calls``, ``attempts``, ``prompt_tokens``,
    ``output_tokens``; fleet rows ``spend_usd``, ``hit_rate``, ``running_avg``, ``waiting_avg``."""
    import pandas as pd

    from schema.queries import planner as pq

    tasks = pq.backtest_tasks(store, start, end, excluded)
    fleet = pq.backtest_replicas(store, start, end, excluded)
    hours: dict = {}
    overall, types = {}, {}
    for r in tasks.to_dict("records"):
        hour = pd.Timestamp(r["hour"]).isoformat()
        row = {k: num(r[k]) for k in ("tasks", "successful_tasks", "ttft_p95_s", "calls", "attempts",
                                      "prompt_tokens", "output_tokens")}
        if hour == ALL_HOURS:
            if r["task_type"] == "":
                overall = row
            else:
                types[r["task_type"]] = row
            continue
        slot = hours.setdefault(hour, {"all": {}, "types": {}, "fleet": {}})
        if r["task_type"] == "":
            slot["all"] = row
        else:
            slot["types"][r["task_type"]] = row
    fleet_all = {}
    for r in fleet.to_dict("records"):
        hour = pd.Timestamp(r["hour"]).isoformat()
        row = {k: num(r[k]) for k in ("spend_usd", "hit_rate", "running_avg", "waiting_avg")}
        if hour == ALL_HOURS:
            fleet_all = row
        else:
            hours.setdefault(hour, {"all": {}, "types": {}, "fleet": {}})["fleet"] = row
    spend = fleet_all.get("spend_usd") or 0.0
    ok = int(overall.get("successful_tasks") or 0)
    return {"cpst_usd": spend / ok if ok else None, "spend_usd": spend, "successful_tasks": ok,
            "ttft_p95_s": overall.get("ttft_p95_s"), "hit_rate": fleet_all.get("hit_rate"),
            "types": types, "hours": hours}


def median_figures(runs: list[dict]) -> dict:
    """One set of :func:`figures` from replays of the same fleet with other seeds: the median of every
    headline figure (a saturated hour's tail is chaotic: one replay's p95 moves by ~10 % with the seed),
    the hours of the replay whose overall p95 TTFT is the median one. The lowest and highest of each
    headline figure are kept beside it (``*_range``): :func:`compare` says whether the measured figure lies
    inside them (the seed could explain a miss) or not (the model does not)."""
    import statistics

    runs = [r for r in runs if r]
    if len(runs) == 1:
        return runs[0]

    def median_range(key, values):
        """{key: median, key_range: [lowest, highest]} of the values the replays have."""
        values = [v for v in values if v is not None]
        if not values:
            return {key: None, f"{key}_range": None}
        return {key: statistics.median_low(values), f"{key}_range": [min(values), max(values)]}

    middle = sorted(runs, key=lambda r: r.get("ttft_p95_s") or 0.0)[(len(runs) - 1) // 2]
    types = {t: {**middle["types"].get(t, {}),
                 **median_range("ttft_p95_s", (r["types"].get(t, {}).get("ttft_p95_s") for r in runs))}
             for t in {t for r in runs for t in r["types"]}}
    return {**middle, **median_range("cpst_usd", (r["cpst_usd"] for r in runs)),
            **median_range("ttft_p95_s", (r["ttft_p95_s"] for r in runs)),
            "hit_rate": median_range("hit_rate", (r["hit_rate"] for r in runs))["hit_rate"], "types": types,
            "seeds": len(runs)}


def _rel(replayed, measured):
    if replayed is None or measured is None or measured == 0:
        return None
    return abs(replayed - measured) / abs(measured)


def _per_call(row: dict, key: str):
    calls = row.get("calls") or 0
    return (row.get(key) or 0) / calls if calls else None


def drivers(measured_hour: dict, replay_hour: dict, task_type: str = "") -> list[str]:
    """What differs between a measured hour and its replay (module docstring), as short phrases."""
    m = measured_hour["types"].get(task_type, {}) if task_type else measured_hour.get("all", {})
    r = replay_hour["types"].get(task_type, {}) if task_type else replay_hour.get("all", {})
    mf, rf = measured_hour.get("fleet", {}), replay_hour.get("fleet", {})
    out = []
    mt, rt = m.get("tasks") or 0, r.get("tasks") or 0
    if _rel(rt, mt) is not None and _rel(rt, mt) > DRIVER_TOLERANCE or (mt == 0) != (rt == 0):
        out.append(f"arrivals: {int(mt)} tasks ended measured vs {int(rt)} replayed")
    for key, label in (("prompt_tokens", "prompt"), ("output_tokens", "output")):
        a, b = _per_call(m, key), _per_call(r, key)
        if _rel(b, a) is not None and _rel(b, a) > DRIVER_TOLERANCE:
            out.append(f"lengths: {a:,.0f} {label} tokens per call measured vs {b:,.0f} replayed")
    a = ((m.get("attempts") or 0) - (m.get("calls") or 0)) / m["calls"] if m.get("calls") else None
    b = ((r.get("attempts") or 0) - (r.get("calls") or 0)) / r["calls"] if r.get("calls") else None
    if a is not None and b is not None and abs(a - b) > 0.01:
        out.append(f"retries: {a:.1%} of calls retried measured vs {b:.1%} replayed")
    a, b = mf.get("hit_rate"), rf.get("hit_rate")
    if a is not None and b is not None and abs(a - b) > HIT_RATE_POINTS:
        out.append(f"cache hit rate: {a:.1%} measured vs {b:.1%} replayed")
    for key, label in (("running_avg", "batch size"), ("waiting_avg", "queue")):
        a, b = mf.get(key), rf.get(key)
        if a is not None and b is not None and (_rel(b, a) or 0) > DRIVER_TOLERANCE and abs(a - b) >= 0.1:
            out.append(f"{label}: {a:.2f} requests measured vs {b:.2f} replayed")
    return out or ["no driver differs by more than the tolerance (the tail of a saturated hour is chaotic)"]


def _hour_gaps(measured: dict, replay: dict, task_type: str, figure: str) -> list[tuple]:
    gaps = []
    for hour, mh in measured["hours"].items():
        rh = replay["hours"].get(hour, {"all": {}, "types": {}, "fleet": {}})
        m = mh["types"].get(task_type, {}) if task_type else mh.get("all", {})
        r = rh["types"].get(task_type, {}) if task_type else rh.get("all", {})
        if figure == "ttft":
            a, b = m.get("ttft_p95_s"), r.get("ttft_p95_s")
            if a is None or b is None:
                continue
            gaps.append((abs(a - b) * (m.get("successful_tasks") or 0), hour, f"p95 TTFT {a:.2f} s measured vs "
                                                                              f"{b:.2f} s replayed", mh, rh))
        else:
            a = (mh.get("fleet", {}).get("spend_usd") or 0.0, mh.get("all", {}).get("successful_tasks") or 0)
            b = (rh.get("fleet", {}).get("spend_usd") or 0.0, rh.get("all", {}).get("successful_tasks") or 0)
            if not a[1] and not b[1]:
                continue
            gaps.append((abs(a[1] - b[1]) + abs(a[0] - b[0]) / max(a[0], b[0], 1e-9) * a[1], hour,
                         f"spend ${a[0]:.2f} / {int(a[1])} successful tasks measured vs ${b[0]:.2f} / {int(b[1])} "
                         f"replayed", mh, rh))
    gaps.sort(key=lambda g: g[0], reverse=True)
    return [g for g in gaps if g[0] > 0][:TOP_HOURS]


def _seeds(measured: float, spread: list | None, unit: str, seeds: int | None) -> str:
    """" (5 replays: lo-hi, every one above the measured figure)" for a median of replays, else ""."""
    if not spread or not seeds or seeds < 2:
        return ""
    lo, hi = spread
    where = ("every one above the measured figure" if lo > measured else
             "every one below the measured figure" if hi < measured else "the measured figure among them")
    return f" ({seeds} replays: {unit.format(lo)} to {unit.format(hi)}, {where})"


def compare(measured: dict, replay: dict, tolerance: float) -> dict:
    """Judge ``replay`` against ``measured`` (both :func:`figures`): CPST and p95 TTFT overall and the
    p95 TTFT of every task type with successful tasks on both sides. Returns ``{"errors": {figure:
    relative error}, "problems": [...], "why": [lines]}``: one problem per figure off by more than
    ``tolerance``, and under it the hours that contribute most and what differs in them."""
    errors, problems, why = {}, [], []
    checks = [("CPST", "", "cpst", measured.get("cpst_usd"), replay.get("cpst_usd"), replay.get("cpst_usd_range")),
              ("p95 TTFT", "", "ttft", measured.get("ttft_p95_s"), replay.get("ttft_p95_s"),
               replay.get("ttft_p95_s_range"))]
    for t in sorted(measured.get("types", {})):
        replayed = replay.get("types", {}).get(t, {})
        checks.append((f"p95 TTFT {t}", t, "ttft", measured["types"][t].get("ttft_p95_s"), replayed.get("ttft_p95_s"),
                       replayed.get("ttft_p95_s_range")))
    for label, task_type, figure, a, b, spread in checks:
        err = _rel(b, a)
        errors[label] = err
        if err is None:
            if a is not None or b is not None:
                problems.append(f"{label}: not measurable on both sides")
            continue
        if err <= tolerance:
            continue
        unit = "${:.4f}" if figure == "cpst" else "{:.2f} s"
        problems.append(f"{label} off by {err:.1%} (> {tolerance:.0%})")
        why.append(f"{label}: measured {unit.format(a)}, replayed {unit.format(b)}"
                   f"{_seeds(a, spread, unit, replay.get('seeds'))}; the hours that contribute most:")
        for _, hour, text, mh, rh in _hour_gaps(measured, replay, task_type, figure):
            why.append(f"  {hour[:13]}h {task_type or 'all types'}: {text}; " + "; ".join(drivers(mh, rh, task_type)))
    return {"errors": errors, "problems": problems, "why": why}
