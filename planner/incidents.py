"""The incidents of a measured period, as faults the simulator can replay (or minutes to leave out).

Position: planner. Reads the alert evaluator's history and the replica minutes through named
queries (``schema.queries.planner.incident_alerts`` / ``replica_speed``) and returns
``serving.emulator.faults.FaultEvent`` timelines in seconds from the period's start, so the
backtest replays what happened instead of a quiet day.

* **slowdown** (a degraded GPU): a replica named by a ``replica_degradation`` or
  ``cascading_degradation`` alert. Around the alert (``SEARCH_S`` either side) a minute is *slow*
  when the median inter-token latency of the calls that ended in it is at least ``SLOW_RATIO`` x the
  replica's own usual ITL (median over its minutes outside the search range), or, when no call
  ended, when it generated at most ``1 / SLOW_RATIO`` of its usual tokens per running request
  (vLLM's generation counter and running gauge). The fault covers the first to the last slow minute;
  its factor is the median ITL ratio of its slow minutes (ITL is one engine step while decoding: the
  emulator's and vLLM's step time scale with a slowed GPU). Calls that ended inside the fault had part
  of their decode before it, so the ratio errs low.
* **crash / down**: minutes a fleet replica was not up (no scrape, no span) between minutes it was
  up: a crash at the first such minute, restarted at the next up minute. Minutes when every replica
  was silent are a gap in the telemetry (or no fleet at all), not a crash: they are excluded.
* anything else an alert names on a replica that the emulator cannot model (telemetry loss, an error
  burst with no engine evidence of its rate, a degradation with no slow minute) is **excluded**: its
  minutes (alert start to resolution) leave the backtest's comparison, and the report says so.

Fleet-wide alerts (queue growth, saturation, retry amplification, SLO burn) describe load, which the
replay reproduces from the workload itself; they are not incidents of their own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pandas as pd

from serving.emulator.faults import FaultEvent

SLOW_RULES = ("replica_degradation", "cascading_degradation")
DOWN_RULES = ("replica_down",)
LOAD_RULES = ("saturation", "queue_growth", "retry_amplification", "slo_burn_rate", "budget_burn",
              "ingestion_health")
SEARCH_S = 900.0  # how far before an alert's start and after its resolution a slow minute may lie
SLOW_RATIO = 2.0  # ITL at least this multiple of the replica's usual (tokens per request at most its inverse)
MINUTE = timedelta(minutes=1)


@dataclass
class Incidents:
    """``faults``: the replayable timeline (seconds from ``start``); ``described``: one line per fault;
    ``excluded``: ``(from, to, why)`` UTC windows left out of the backtest's comparison."""

    start: datetime
    faults: list = field(default_factory=list)
    described: list = field(default_factory=list)
    excluded: list = field(default_factory=list)

    @property
    def windows(self) -> list[tuple[datetime, datetime]]:
        return [(a, b) for a, b, _ in self.excluded]

    def summary(self) -> dict:
        return {"replayed": list(self.described),
                "excluded": [f"{a:%Y-%m-%d %H:%M} .. {b:%H:%M} UTC: {why}" for a, b, why in self.excluded]}


def _naive(t) -> datetime | None:
    if t is None or t != t or pd.isna(t):
        return None
    t = pd.Timestamp(t)
    if t.tzinfo is not None:
        t = t.tz_convert(None)
    return t.to_pydatetime()


def _usual(rows: pd.DataFrame) -> tuple[float | None, float | None]:
    """The replica's usual ITL (s) and generated tokens per running request per minute."""
    itl = rows["itl_p50_s"].dropna()
    busy = rows[(rows["running_avg"].fillna(0) >= 1) & rows["generation_tokens"].notna()]
    per_req = (busy["generation_tokens"] / busy["running_avg"]) if len(busy) else pd.Series(dtype=float)
    return (float(itl.median()) if len(itl) else None, float(per_req.median()) if len(per_req) else None)


def slow_minutes(rows: pd.DataFrame, usual_itl: float | None, usual_tokens: float | None) -> list[tuple]:
    """(minute, ITL ratio or None) of the slow minutes of ``rows`` (module docstring)."""
    out = []
    for r in rows.itertuples(index=False):
        itl = r.itl_p50_s
        if itl == itl and itl is not None and usual_itl:
            if itl >= SLOW_RATIO * usual_itl:
                out.append((_naive(r.minute), itl / usual_itl))
            continue
        running = r.running_avg if r.running_avg == r.running_avg and r.running_avg is not None else 0.0
        tokens = r.generation_tokens if r.generation_tokens == r.generation_tokens else None
        if running >= 1 and tokens is not None and usual_tokens and tokens / running <= usual_tokens / SLOW_RATIO:
            out.append((_naive(r.minute), None))
    return out


def infer_incidents(alerts: pd.DataFrame, speed: pd.DataFrame, start: datetime, end: datetime,
                    replicas: list[str]) -> Incidents:
    """The period's incidents (module docstring). ``alerts``: ``planner.incident_alerts``; ``speed``:
    ``planner.replica_speed``; ``replicas``: the current fleet's replica ids (faults name only these)."""
    out = Incidents(start=start)
    at = lambda t: max(0.0, (t - start).total_seconds())  # noqa: E731 - seconds from the period's start
    by_replica = {rid: g.sort_values("minute") for rid, g in speed.groupby("replica")} if len(speed) else {}
    # crashes: minutes down between minutes up (a minute every replica was silent is a gap in the
    # telemetry or a fleet that was not running, not a crash: excluded below)
    downs: dict[str, list[tuple[datetime, datetime]]] = {}
    for rid in replicas:
        rows = by_replica.get(rid)
        if rows is None or not len(rows):
            continue
        up = [(_naive(m), bool(u)) for m, u in zip(rows["minute"], rows["up"])]
        ups = [m for m, u in up if u]
        if not ups:
            continue
        first, last = ups[0], ups[-1]
        expected = first
        down_from = None
        seen = {m: u for m, u in up}
        while expected <= last:
            is_up = seen.get(expected, False)
            if not is_up and down_from is None:
                down_from = expected
            elif is_up and down_from is not None:
                downs.setdefault(rid, []).append((down_from, expected))
                down_from = None
            expected += MINUTE
    silent = _all_silent(downs, replicas)
    for rid, windows in downs.items():
        for a, b in windows:
            if any(sa <= a and b <= sb for sa, sb in silent):
                continue
            out.faults.append(FaultEvent(at(a), rid, "crash", None, at(b)))
            out.described.append(f"{rid} down {a:%Y-%m-%d %H:%M} .. {b:%H:%M} UTC (no scrape nor span): replayed "
                                 f"as a crash and restart")
    for a, b in silent:
        out.excluded.append((a, b, "no replica of the fleet reported (a gap in the telemetry, or the fleet was not "
                                   "running): not a crash"))
    handled = set()
    for a in alerts.itertuples(index=False):
        rid, rule = str(a.replica), str(a.rule)
        began, resolved = _naive(a.began), _naive(a.resolved) or end
        if rule in LOAD_RULES:
            continue
        if rule in DOWN_RULES and any(f.kind == "crash" and f.replica == rid for f in out.faults):
            continue  # already replayed from the replica minutes
        if rule in SLOW_RULES and rid in replicas:
            if rid in handled:
                continue
            lo, hi = began - timedelta(seconds=SEARCH_S), resolved + timedelta(seconds=SEARCH_S)
            related = alerts[(alerts["replica"] == rid) & alerts["rule"].isin(SLOW_RULES)]
            for b in related.itertuples(index=False):
                lo = min(lo, _naive(b.began) - timedelta(seconds=SEARCH_S))
                hi = max(hi, (_naive(b.resolved) or end) + timedelta(seconds=SEARCH_S))
            rows = by_replica.get(rid, pd.DataFrame(columns=speed.columns))
            minutes = rows["minute"].map(_naive)
            near = rows[(minutes >= lo) & (minutes < hi)]
            usual_itl, usual_tokens = _usual(rows[(minutes < lo) | (minutes >= hi)])
            slow = slow_minutes(near, usual_itl, usual_tokens)
            handled.add(rid)
            if slow:
                ratios = sorted(r for _, r in slow if r is not None)
                if ratios:
                    factor = ratios[len(ratios) // 2]
                    how = f"median ITL {factor:.2f}x its usual {usual_itl * 1e3:.0f} ms over {len(ratios)} minute(s)"
                else:
                    factor = SLOW_RATIO
                    how = f"no call ended inside it: factor {SLOW_RATIO:g} assumed from its generated tokens"
                f_from, f_to = slow[0][0], slow[-1][0] + MINUTE
                out.faults.append(FaultEvent(at(f_from), rid, "slowdown", round(float(factor), 2), at(f_to)))
                out.described.append(f"{rid} slowed {factor:.2f}x {f_from:%Y-%m-%d %H:%M} .. {f_to:%H:%M} UTC "
                                     f"({len(slow)} slow minute(s); {how}; alert {rule})")
                continue
            out.excluded.append((began, resolved, f"{rule} on {rid} with no slow minute in the replica minutes: "
                                                  f"not modelled"))
            continue
        out.excluded.append((began, resolved, f"{rule} on {rid}: the emulator cannot model it"))
    out.excluded = _merged(out.excluded)
    return out


def _all_silent(downs: dict, replicas: list[str]) -> list[tuple[datetime, datetime]]:
    """The minutes every replica of ``replicas`` was down at once (intersection of their down windows)."""
    if len(replicas) < 2 or any(r not in downs for r in replicas):
        return []
    common = downs[replicas[0]]
    for rid in replicas[1:]:
        common = [(max(a, c), min(b, d)) for a, b in common for c, d in downs[rid] if max(a, c) < min(b, d)]
    return common


def _merged(windows: list[tuple]) -> list[tuple]:
    out = []
    for a, b, why in sorted(windows, key=lambda w: w[0]):
        a, b = a.replace(second=0, microsecond=0), (b + MINUTE - timedelta(microseconds=1)).replace(second=0,
                                                                                                    microsecond=0)
        if out and a <= out[-1][1]:
            pa, pb, pwhy = out[-1]
            out[-1] = (pa, max(pb, b), pwhy if why == pwhy else f"{pwhy}; {why}")
        else:
            out.append((a, b, why))
    return out


def extract_incidents(store, start: datetime, end: datetime, replicas: list[str]) -> Incidents:
    """:func:`infer_incidents` over the store's alert history and replica minutes of ``[start, end)``."""
    from schema.queries import planner as pq

    return infer_incidents(pq.incident_alerts(store, start, end), pq.replica_speed(store, start, end), start, end,
                           replicas)


def for_candidate(faults: list, current_ids: list[str], current_types: dict[str, str], candidate) -> list:
    """The measured incidents on a candidate fleet: a fault of the current fleet's k-th replica of a GPU
    type lands on the candidate's k-th replica of that type (else its last replica of any type), so a
    candidate is judged under the same kind of day."""
    reps = candidate.replicas()
    by_type: dict[str, list[str]] = {}
    for r in reps:
        by_type.setdefault(r.gpu_type, []).append(r.id)
    out = []
    for f in faults:
        gtype = current_types.get(f.replica)
        same = [r for r in current_ids if current_types.get(r) == gtype]
        k = same.index(f.replica) if f.replica in same else 0
        pool = by_type.get(gtype) or []
        target = pool[min(k, len(pool) - 1)] if pool else reps[-1].id
        out.append(FaultEvent(f.at_s, target, f.kind, f.value, f.until_s))
    return out
