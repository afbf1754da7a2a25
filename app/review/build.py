"""Build a :class:`WeeklyReview` for one ISO week from the cost job's named queries.

Every cost figure is read from ``schema.queries.cost`` (``period_summary``, ``cpst_trend``,
``waste_breakdown``), the alerts from ``schema.queries.alerts.alerts_in_period`` (when the alerts
module exists) and the levers' measurements from ``schema.queries.review``; nothing here
recomputes a figure those queries give, so the report equals the dashboard for the same week.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone

from app.review import levers as lv
from app.review.drivers import Factor, decompose, segment_factors
from app.review.model import (BudgetRow, Contributor, Coverage, DayPoint, Figure, Headline, Incident, Mover, SegmentRow,
                              TaskRow, WasteRow, WeeklyReview, comparable)
from app.review.weeks import IsoWeek, parse_week
from schema.queries import cost, num, review
from schema.store import StoreQueryError

log = logging.getLogger(__name__)

DIMENSIONS = ("task_type", "tenant", "model")
WASTE_LABELS = {
    "retry_waste": "Retry waste",
    "failed_task_waste": "Failed-task waste",
    "partial": "Partial streams",
    "unattributed": "Unattributed",
    "idle": "Idle",
    "pending": "Outcome not known yet",
}
DAY_SECONDS = 86400


class _Summaries:
    """``cost.period_summary`` memoised for one build: segments, waste and levers read the same
    groupings, and each call is a full scan of the week (chDB serialises them). The first call for a
    week fetches the ungrouped row and the three dimensions in one ``cost.period_summaries`` query
    (the same frames); ``replica`` (a join of the week's tasks with their calls) only when asked."""

    TOGETHER = ("",) + DIMENSIONS

    def __init__(self, store):
        self.store = store
        self._seen: dict[tuple, object] = {}

    def __call__(self, start, end, by=None):
        key = (start, end, by or "")
        if key not in self._seen:
            bys = self.TOGETHER if key[2] in self.TOGETHER else (key[2],)
            for grouping, frame in cost.period_summaries(self.store, start, end, bys).items():
                self._seen[(start, end, grouping)] = frame
        return self._seen[key]


def _row(df) -> dict:
    return df.iloc[0].to_dict() if df is not None and not df.empty else {}


def _fig(this: dict, last: dict, key: str, comparable: bool = True) -> Figure:
    return Figure(num(this.get(key)), num(last.get(key)), comparable)


def _headline(t: dict, l: dict, cov_t: Coverage | None = None, cov_l: Coverage | None = None,
              ok: bool = True) -> Headline:
    def slo(row):
        succ = num(row.get("successful_tasks")) or 0
        return (num(row.get("slo_met_tasks")) or 0) / succ if succ else None

    def goodput(row, cov):
        # Per hour WITH DATA: dividing by the week's 168 h made a 25-hour week look 7x worse.
        met = num(row.get("slo_met_tasks"))
        if cov is None:
            return num(row.get("goodput_per_hour"))
        return met / cov.hours_with_data if met is not None and cov.hours_with_data else None
    f = lambda key: _fig(t, l, key, ok)  # noqa: E731
    return Headline(
        cpst_usd=f("cpst_usd"), attributed_cpst_usd=f("attributed_cpst_usd"),
        spend_usd=f("spend_usd"), idle_usd=f("idle_usd"), tasks=f("tasks"),
        successful_tasks=f("successful_tasks"), goodput_per_hour=Figure(goodput(t, cov_t), goodput(l, cov_l), ok),
        slo_attainment=Figure(slo(t), slo(l), ok), requests=f("requests"), tokens=f("tokens"),
        cost_per_request_usd=f("cost_per_request_usd"),
        cost_per_1m_tokens_usd=f("cost_per_1m_tokens_usd"))


def week_coverage(store, week: IsoWeek, now: datetime) -> Coverage:
    """The :class:`Coverage` of ``week`` as of ``now`` (``review.coverage``)."""
    c = review.coverage(store, week.start, week.end)
    in_progress = now < week.end
    hours = (min(now, week.end) - week.start).total_seconds() / 3600.0
    aware = lambda v: v.replace(tzinfo=timezone.utc) if v is not None and v.tzinfo is None else v  # noqa: E731
    return Coverage(c["hours_with_data"], max(0.0, hours), aware(c["first_minute"]), aware(c["last_minute"]),
                    in_progress)


def _by_group(df) -> dict[str, dict]:
    return {} if df is None or df.empty else {str(r["grp"]): r for r in df.to_dict("records")}


def _factors(t: dict, l: dict, gh_t: dict, gh_l: dict) -> list[Factor]:
    def price(gh):
        hours = num(gh.get("gpu_hours")) or 0.0
        return (num(gh.get("priced_allocated_usd")) or 0.0) / hours if hours > 0 else None

    def idle_share(row):
        spend = num(row.get("spend_usd")) or 0.0
        return (num(row.get("idle_usd")) or 0.0) / spend if spend > 0 else None
    g = lambda row, k: num(row.get(k)) or 0.0  # noqa: E731
    return segment_factors(
        cost_this=g(t, "spend_usd"), cost_last=g(l, "spend_usd"),
        succ_this=g(t, "successful_tasks"), succ_last=g(l, "successful_tasks"),
        tasks_this=g(t, "tasks"), tasks_last=g(l, "tasks"),
        calls_this=g(t, "requests"), calls_last=g(l, "requests"),
        tokens_this=g(t, "tokens"), tokens_last=g(l, "tokens"),
        price_this=price(gh_t), price_last=price(gh_l),
        idle_share_this=idle_share(t), idle_share_last=idle_share(l))


def _segments_and_movers(store, summaries: _Summaries, week: IsoWeek, prev: IsoWeek, movers_n: int,
                         ok: bool = True):
    segments: dict[str, list[SegmentRow]] = {}
    candidates: list[Mover] = []
    for dim in DIMENSIONS:
        this = _by_group(summaries(week.start, week.end, by=dim))
        last = _by_group(summaries(prev.start, prev.end, by=dim))
        gh_this = _by_group(review.gpu_hours(store, week.start, week.end, by=dim))
        gh_last = _by_group(review.gpu_hours(store, prev.start, prev.end, by=dim))
        rows = []
        for key in sorted(set(this) | set(last), key=lambda k: -(num(this.get(k, {}).get("spend_usd")) or 0.0)):
            t, l = this.get(key, {}), last.get(key, {})
            if not any((num(r.get(k)) or 0) > 0 for r in (t, l) for k in ("spend_usd", "tasks")):
                continue  # e.g. client-only calls with no model and no cost: nothing to show
            row = SegmentRow(dim, key, _fig(t, l, "cpst_usd", ok), _fig(t, l, "spend_usd", ok),
                             _fig(t, l, "successful_tasks", ok), _fig(t, l, "tasks", ok))
            rows.append(row)
            cost_t, cost_l = row.cost_usd.this or 0.0, row.cost_usd.last or 0.0
            if cost_t == cost_l:
                continue
            drivers, residual = decompose(cost_t, cost_l, _factors(t, l, gh_this.get(key, {}), gh_last.get(key, {})),
                                          fallback="volume")
            candidates.append(Mover(dim, key, row.cost_usd, row.cpst_usd, drivers, residual))
        segments[dim] = rows
    candidates.sort(key=lambda m: -abs(m.cost_usd.delta or 0.0))
    return segments, candidates[:movers_n]


def _fleet_mover(t: dict, l: dict, gh_t: dict, gh_l: dict) -> Mover | None:
    """The fleet's CPST change split among its drivers (volume cancels out of a per-task figure)."""
    cpst = _fig(t, l, "cpst_usd")
    if cpst.this is None or cpst.last is None:
        return None
    factors = [f for f in _factors(t, l, gh_t, gh_l) if f.name != "volume"]
    drivers, residual = decompose(cpst.this, cpst.last, factors)
    return Mover("fleet", "", _fig(t, l, "spend_usd"), cpst, drivers, residual)


def _waste(store, summaries: _Summaries, week: IsoWeek, prev: IsoWeek) -> list[WasteRow]:
    this = {r["category"]: r for r in cost.waste_breakdown(store, week.start, week.end).to_dict("records")}
    last = {r["category"]: r for r in cost.waste_breakdown(store, prev.start, prev.end).to_dict("records")}
    by_type = summaries(week.start, week.end, by="task_type").to_dict("records")
    by_replica = summaries(week.start, week.end, by="replica").to_dict("records")
    column = {"retry_waste": "retry_waste_usd", "failed_task_waste": "failed_task_waste_usd", "partial": "partial_usd",
              "unattributed": "unattributed_usd", "idle": "idle_usd", "pending": "pending_usd"}

    def top(rows, col):
        found = [Contributor(str(r["grp"]), num(r[col]) or 0.0) for r in rows if (num(r[col]) or 0.0) > 0]
        return tuple(sorted(found, key=lambda c: (-c.usd, c.name))[:3])
    out = []
    for category in ("retry_waste", "failed_task_waste", "partial", "unattributed", "idle", "pending"):
        row = this.get(category, {})
        usd = num(row.get("usd")) or 0.0
        if category == "pending" and usd == 0:
            continue  # only shown when some outcomes are still unknown
        out.append(WasteRow(
            category="partial_streams" if category == "partial" else category,
            label=WASTE_LABELS[category], usd=usd, share_of_spend=num(row.get("share_of_spend")),
            last_usd=num(last.get(category, {}).get("usd")),
            by_task_type=() if category in ("idle", "unattributed") else top(by_type, column[category]),
            by_replica=top(by_replica, column[category]),
            count=int(num(row.get("calls")) or 0) if category == "partial" else None))
    return out


def _incidents(store, week: IsoWeek, now: datetime):
    from schema.queries import alerts

    try:
        df = alerts.alerts_in_period(store, week.start, week.end, now=min(now, week.end))
    except StoreQueryError as exc:
        log.warning("alerts not available for the review: %s", exc)
        return None, "Alerts not available (no alerts table in this store)."
    out = []
    for r in ([] if df.empty else df.to_dict("records")):
        out.append(Incident(
            rule=str(r["rule"]), severity=str(r["severity"]), replica=str(r["replica"] or ""),
            started_at=alerts.aware(_dt(r["fired_at"]) or _dt(r["started_at"])),
            resolved_at=alerts.aware(_dt(r["resolved_at"])), duration_s=num(r["duration_s"]),
            cost_usd=num(r["est_cost_usd"]), summary=str(r["summary"] or "")))
    return out, ""


def _dt(value) -> datetime | None:
    if value is None:
        return None
    try:
        import pandas as pd

        if pd.isna(value):
            return None
        return pd.Timestamp(value).to_pydatetime(warn=False)
    except (TypeError, ValueError):
        return None


def _tasks(df) -> list[TaskRow]:
    out = []
    for r in ([] if df.empty else df.to_dict("records")):
        end = _dt(r["end_time"])
        out.append(TaskRow(
            task_id=str(r["task_id"]), task_type=str(r["task_type"]), tenant=str(r["tenant_id"]),
            outcome=str(r["outcome"]), ended_at=end.replace(tzinfo=timezone.utc) if end and end.tzinfo is None else end,
            calls=int(r["calls"]), attempts=int(r["attempts"]),
            tokens=int(r["prompt_tokens"]) + int(r["output_tokens"]), cost_usd=num(r["cost_usd"]) or 0.0,
            waste_usd=(num(r["retry_waste_usd"]) or 0.0) + (num(r["failed_task_waste_usd"]) or 0.0)))
    return out


def _daily(store, week: IsoWeek) -> list[DayPoint]:
    df = cost.cpst_trend(store, week.start, week.end, DAY_SECONDS)
    by_day = {}
    for r in ([] if df.empty else df.to_dict("records")):
        day = _dt(r["bucket_start"])
        if day is not None:
            by_day[day.date()] = r
    out = []
    for day in week.days():
        r = by_day.get(day, {})
        out.append(DayPoint(day, num(r.get("spend_usd")) or 0.0, num(r.get("successful_tasks")) or 0.0,
                            num(r.get("cpst_usd"))))
    return out


def _notes(store, week: IsoWeek, headline: Headline, waste: list[WasteRow]) -> list[str]:
    notes = []
    dq = cost.data_quality(store, week.start, week.end)
    rows = [] if dq.empty else dq.to_dict("records")
    default = [r["replica"] for r in rows if (num(r["default_priced_minutes"]) or 0) > 0]
    if default:
        notes.append(f"Priced at the default GPU price (not in fleet.yaml): {', '.join(map(str, default))}.")
    unpriced = [r["replica"] for r in rows if (num(r["unpriced_minutes"]) or 0) > 0]
    if unpriced:
        notes.append(f"No GPU price configured for some minutes of: {', '.join(map(str, unpriced))} (spend 0 there).")
    gaps = [r for r in rows if (num(r["token_gap_ratio"]) or 0) > 0.05]
    for r in gaps:
        notes.append(f"Replica {r['replica']}: engine counters show {lv.fmt.pct(num(r['token_gap_ratio']))} more tokens "
                     f"than its spans (aborted requests or lost spans).")
    evidence = sum((num(r["gateway_evidence_calls"]) or 0) + (num(r["client_evidence_calls"]) or 0) for r in rows)
    if evidence:
        notes.append(f"{lv.fmt.count(evidence)} calls had no engine span: their gateway or client span was the only "
                     f"evidence of work (a replica that crashed mid-request, or a request refused before the engine).")
    pending = next((w for w in waste if w.category == "pending"), None)
    if pending is not None:
        notes.append(f"{lv.fmt.usd(pending.usd)} belongs to tasks whose outcome is not known yet; "
                     f"re-run the review once they end.")
    return notes


def build_review(store, week: IsoWeek | str, *, now: datetime | None = None, movers_n: int = 5,
                 top_n: int = 10) -> WeeklyReview:
    """The weekly review of ``week`` (an :class:`IsoWeek` or ``"2026-W48"``) against the week before.

    Args:
        store: a :class:`schema.store.Store` whose cost jobs have run over both weeks.
        now: the generation time (default: wall clock); also the end of incidents still firing.
        movers_n: how many top movers to explain. top_n: how many most expensive tasks to list.

    Returns:
        A :class:`WeeklyReview`; ``empty`` when the week holds no spend, task or request.

    Raises:
        app.review.weeks.BadWeek: a malformed week string. StoreError: the store failed.
    """
    week = parse_week(week) if isinstance(week, str) else week
    prev = week.previous()
    now = now or datetime.now(timezone.utc)
    summaries = _Summaries(store)
    t = _row(summaries(week.start, week.end))
    l = _row(summaries(prev.start, prev.end))
    cov_t, cov_l = week_coverage(store, week, now), week_coverage(store, prev, now)
    ok = comparable(cov_t, cov_l)
    headline = _headline(t, l, cov_t, cov_l, ok)
    empty = not any((num(t.get(k)) or 0) > 0 for k in ("spend_usd", "tasks", "requests"))
    review_ = WeeklyReview(week=week, previous=prev, generated_at=now, headline=headline, empty=empty,
                           coverage=cov_t, coverage_last=cov_l)
    if empty:
        return review_
    gh_t = _row(review.gpu_hours(store, week.start, week.end))
    gh_l = _row(review.gpu_hours(store, prev.start, prev.end))
    review_.segments, movers = _segments_and_movers(store, summaries, week, prev, movers_n, ok)
    fleet = _fleet_mover(t, l, gh_t, gh_l) if ok else None
    # Movers explain a change: with unlike coverage there is no change to explain.
    review_.movers = (([fleet] if fleet else []) + movers) if ok else []
    review_.waste = _waste(store, summaries, week, prev)
    review_.incidents, review_.incidents_note = _incidents(store, week, now)
    review_.top_tasks = _tasks(review.top_tasks(store, week.start, week.end, limit=top_n))
    review_.top_failed_tasks = _tasks(review.top_tasks(store, week.start, week.end, limit=top_n, failed_only=True))
    review_.daily_this = _daily(store, week)
    review_.daily_last = _daily(store, prev)
    review_.levers = _levers(store, summaries, week)
    review_.notes = _notes(store, week, headline, review_.waste)
    review_.budgets = _budgets(store, week)
    return review_


def _budgets(store, week: IsoWeek) -> list[BudgetRow]:
    """Each budget against the week, from the cost job's daily allocated spend per tenant / task type."""
    from schema.queries import budgets as bq

    listed = bq.budgets(store)
    if listed.empty:
        return []
    out = []
    for scope, by in (("tenant", "tenant"), ("task_type", "task_type")):
        wanted = listed[listed["scope"] == scope]
        if wanted.empty:
            continue
        daily = cost.cpst_trend(store, week.start, week.end, DAY_SECONDS, by=by)
        for r in wanted.to_dict("records"):
            days = daily[daily["grp"] == r["name"]]["allocated_usd"].astype(float) if len(daily) else []
            usd = float(r["usd"])
            if r["period"] == "day":
                spent = float(max(days, default=0.0)) if len(days) else 0.0
                over = int(sum(1 for d in days if d > usd))
            else:
                spent = float(sum(days)) if len(days) else 0.0
                over = int(spent > usd)
            out.append(BudgetRow(scope, str(r["name"]), str(r["period"]), usd, spent, over))
    return out


def _planner_run(store, start, end):
    """The newest planner run covering the week (``schema.queries.planner``), or None."""
    from schema.queries import planner

    try:
        run_id = planner.run_for_period(store, start, end)
        return planner.run(store, run_id) if run_id else None
    except StoreQueryError:  # the planner's tables do not exist in this store
        return None


def _levers(store, summaries: _Summaries, week: IsoWeek):
    start, end = week.start, week.end
    planned = lv.planner_levers(_planner_run(store, start, end))
    if planned:  # a planner run over this week: its levers are replayed, not rules of thumb
        return planned
    by_replica = summaries(start, end, by="replica")
    occupancy = review.batch_occupancy(store, start, end)
    load = review.engine_load(store, start, end)
    routing = review.routing(store, start, end)
    return [
        lv.avoid_lever(review.prefix_cache(store, start, end), review.prefill_cost(store, start, end)),
        lv.share_lever(occupancy, by_replica),
        lv.move_lever(by_replica, load, routing),
        lv.delay_lever(load, occupancy, review.waste_by_error(store, start, end), routing),
    ]
