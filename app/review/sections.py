"""The review's content as renderer-neutral blocks: sections of paragraphs, KPI tiles, tables, charts.

Both renderers (HTML, Markdown) and the dashboard page walk the same blocks, so every figure is
formatted once (``app.review.fmt``) and appears identically in each output. Charts are SVG,
shown by the HTML renderer; Markdown shows the table that carries the same numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from app.review import charts, fmt
from app.review.model import MOVES, Figure, Mover, SegmentRow, TaskRow, WeeklyReview

DIMENSION_TITLES = {"task_type": "Task type", "tenant": "Tenant", "model": "Model"}
MOVE_TITLES = {"avoid": "Avoid work", "share": "Share work", "move": "Move work", "delay": "Delay work"}


@dataclass(frozen=True)
class Para:
    text: str
    tone: str = ""  # "", "muted", "warn"


@dataclass(frozen=True)
class Kpi:
    label: str
    value: str
    change: str  # WoW, e.g. "+4.2 %"
    previous: str  # last week's value
    good_when_down: bool = True
    wow: float | None = None


@dataclass(frozen=True)
class Kpis:
    items: tuple[Kpi, ...]


@dataclass(frozen=True)
class Table:
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    numeric: tuple[bool, ...] = ()  # right-align these columns
    caption: str = ""


@dataclass(frozen=True)
class Chart:
    svg: str
    alt: str


@dataclass
class Section:
    key: str
    title: str
    blocks: list = field(default_factory=list)


def _kpi(label: str, f: Figure, formatter, good_when_down: bool = True) -> Kpi:
    return Kpi(label, formatter(f.this), fmt.wow(f.wow), formatter(f.last), good_when_down, f.wow)


def _coverage_text(label: str, c) -> str:
    if c is None or c.hours_with_data == 0:
        return f"{label}: no data."
    state = "in progress" if c.in_progress else ("partial" if c.partial else "complete")
    return (f"{label}: data in {c.hours_with_data} of 168 hours ({fmt.pct(c.share)}, {state}), "
            f"first {fmt.when(c.first)}, last {fmt.when(c.last)}.")


def coverage_blocks(r: WeeklyReview) -> list:
    """How much of each week has data, and whether changes are stated."""
    if r.coverage is None:
        return []
    from app.review.model import comparable

    out = [Para(_coverage_text(r.week.label, r.coverage) + " " + _coverage_text(r.previous.label, r.coverage_last),
                "muted")]
    if not r.coverage.hours_with_data:
        return out  # nothing to compare: the headline says the week is empty
    if not comparable(r.coverage, r.coverage_last):
        why = ("the week is still in progress" if r.coverage.in_progress else
               "the two weeks have data for different lengths of time")
        out.append(Para(f"Week-over-week changes are withheld ({why}): totals of unlike periods do not compare. "
                        "Rates per hour use the hours with data.", "warn"))
    elif r.coverage.partial:
        out.append(Para("This week has data for part of its hours only: rates per hour use the hours with data.",
                        "warn"))
    return out


def headline_section(r: WeeklyReview) -> Section:
    h = r.headline
    s = Section("headline", "Headline")
    days = f"{r.week.monday:%a %d %b %Y} – {r.week.days()[-1]:%a %d %b %Y} (UTC)"
    s.blocks.append(Para(f"Week {r.week.label}: {days}. Compared with {r.previous.label}.", "muted"))
    for block in coverage_blocks(r):
        s.blocks.append(block)
    if r.empty:
        if (h.spend_usd.last or 0) > 0 or (h.tasks.last or 0) > 0:
            before = (f"The week before ({r.previous.label}) spent {fmt.usd(h.spend_usd.last)} for "
                      f"{fmt.count(h.successful_tasks.last)} successful tasks.")
        else:
            before = f"Nothing was recorded in {r.previous.label} either."
        s.blocks.append(Para(
            f"No spend and no tasks were recorded in {r.week.label}: there is nothing to review. {before}"))
        return s
    s.blocks.append(Kpis((
        _kpi("Cost per successful task", h.cpst_usd, fmt.usd),
        _kpi("Total spend", h.spend_usd, fmt.usd),
        _kpi("Successful tasks", h.successful_tasks, fmt.count, good_when_down=False),
        _kpi("Goodput (tasks/h in SLO)", h.goodput_per_hour, lambda v: fmt.number(v, 2), good_when_down=False),
        _kpi("SLO attainment", h.slo_attainment, fmt.pct, good_when_down=False),
        _kpi("Cost per request", h.cost_per_request_usd, fmt.usd),
        _kpi("Cost per 1M tokens", h.cost_per_1m_tokens_usd, fmt.usd),
        _kpi("Attributed CPST (no idle)", h.attributed_cpst_usd, fmt.usd),
    )))
    if h.cpst_usd.wow is not None:
        sentence = (f"Each successful task cost {fmt.usd(h.cpst_usd.this)} this week, "
                    f"{fmt.wow(h.cpst_usd.wow)} against {fmt.usd(h.cpst_usd.last)} in {r.previous.label}. "
                    f"Spend was {fmt.usd(h.spend_usd.this)} ({fmt.wow(h.spend_usd.wow)}) for "
                    f"{fmt.count(h.successful_tasks.this)} successful tasks of {fmt.count(h.tasks.this)} "
                    f"({fmt.wow(h.successful_tasks.wow)}).")
    else:  # no change stated (see the coverage lines): the figures alone, no "n/a against —"
        last = h.cpst_usd.last
        before = (f"{fmt.usd(last)} in {r.previous.label}" if last is not None and not math.isnan(last)
                  else f"no figure for {r.previous.label}")
        sentence = (f"Each successful task cost {fmt.usd(h.cpst_usd.this)} this week ({before}). "
                    f"Spend was {fmt.usd(h.spend_usd.this)} for {fmt.count(h.successful_tasks.this)} successful "
                    f"tasks of {fmt.count(h.tasks.this)}.")
    s.blocks.append(Para(sentence))
    fleet = next((m for m in r.movers if m.dimension == "fleet"), None)
    if fleet is not None and fleet.drivers:
        main = fleet.main_driver
        s.blocks.append(Para(
            f"Why it changed: the {fmt.usd_delta(h.cpst_usd.delta)} per successful task splits exactly into the "
            f"drivers below; the largest is {main.name} ({fmt.usd_delta(main.contribution_usd)})."))
        rows = [(d.name, fmt.measure(d.last, d.unit), fmt.measure(d.this, d.unit), fmt.usd_delta(d.contribution_usd))
                for d in sorted(fleet.drivers, key=lambda d: -abs(d.contribution_usd))]
        if fleet.residual_usd:
            rows.append(("not decomposable", "—", "—", fmt.usd_delta(fleet.residual_usd)))
        rows.append(("Cost per successful task", fmt.usd(h.cpst_usd.last), fmt.usd(h.cpst_usd.this),
                     fmt.usd_delta(h.cpst_usd.delta)))
        s.blocks.append(Table(("Driver", "Last week", "This week", "Effect on CPST"), tuple(rows),
                              numeric=(False, True, True, True)))
    s.blocks.append(Table(
        ("Measure", "This week", "Last week", "WoW"),
        tuple((label, f(fig.this), f(fig.last), fmt.wow(fig.wow)) for label, fig, f in (
            ("Cost per successful task", h.cpst_usd, fmt.usd),
            ("Attributed CPST (excl. idle)", h.attributed_cpst_usd, fmt.usd),
            ("Total spend", h.spend_usd, fmt.usd),
            ("Idle spend", h.idle_usd, fmt.usd),
            ("Tasks", h.tasks, fmt.count),
            ("Successful tasks", h.successful_tasks, fmt.count),
            ("Goodput (successful tasks in SLO per hour)", h.goodput_per_hour, lambda v: fmt.number(v, 2)),
            ("SLO attainment", h.slo_attainment, fmt.pct),
            ("Requests (LLM calls)", h.requests, fmt.count),
            ("Tokens (prompt + output)", h.tokens, fmt.tokens),
            ("Cost per request", h.cost_per_request_usd, fmt.usd),
            ("Cost per 1M tokens", h.cost_per_1m_tokens_usd, fmt.usd),
        )),
        numeric=(False, True, True, True)))
    if r.daily_this or r.daily_last:
        labels = [d.strftime("%a") for d in r.week.days()]
        this = [p.cpst_usd for p in r.daily_this] + [None] * (7 - len(r.daily_this))
        last = [p.cpst_usd for p in r.daily_last] + [None] * (7 - len(r.daily_last))
        s.blocks.append(Chart(charts.line_chart(
            "Cost per successful task by day (USD)", labels,
            [(r.week.label, charts.THIS_WEEK, this), (r.previous.label, charts.LAST_WEEK, last)], fmt.usd),
            "Daily cost per successful task, this week against last week"))
    return s


def driver_lines(m: Mover, per: str = "") -> list[str]:
    """One line per driver that moved, biggest USD effect first:
    ``price $2.00/GPU-hour → $2.50/GPU-hour (+$10.00)``."""
    parts = []
    for d in sorted(m.drivers, key=lambda d: -abs(d.contribution_usd)):
        if d.contribution_usd == 0 and d.this == d.last:
            continue
        parts.append(f"{d.name} {fmt.measure(d.last, d.unit)} → {fmt.measure(d.this, d.unit)} "
                     f"({fmt.usd_delta(d.contribution_usd)}{'/' + per if per else ''})")
    if m.residual_usd:
        parts.append(f"not decomposable ({fmt.usd_delta(m.residual_usd)})")
    return parts


def _segment_table(rows: list[SegmentRow], dimension: str) -> Table:
    return Table(
        (DIMENSION_TITLES.get(dimension, dimension), "CPST", "CPST last wk", "CPST WoW", "Cost", "Cost WoW",
         "Successful tasks", "Tasks"),
        tuple((row.key or "(none)", fmt.usd(row.cpst_usd.this), fmt.usd(row.cpst_usd.last), fmt.wow(row.cpst_usd.wow),
               fmt.usd(row.cost_usd.this), fmt.wow(row.cost_usd.wow), fmt.count(row.successful_tasks.this),
               fmt.count(row.tasks.this)) for row in rows),
        numeric=(False,) + (True,) * 7)


def changes_section(r: WeeklyReview) -> Section:
    s = Section("changes", "What changed")
    s.blocks.append(Para("Cost per successful task (CPST) by task type, tenant and model. A segment's cost is "
                         "the cost allocated to its tasks' calls (idle spend stays at fleet level).", "muted"))
    for dimension in ("task_type", "tenant", "model"):
        rows = r.segments.get(dimension) or []
        if not rows:
            continue
        s.blocks.append(Para(f"By {DIMENSION_TITLES[dimension].lower()}", "subhead"))
        if dimension == "task_type":
            labels = [row.key or "(none)" for row in rows]
            s.blocks.append(Chart(charts.bar_chart(
                "CPST by task type (USD)", labels,
                [(r.week.label, charts.THIS_WEEK, [row.cpst_usd.this for row in rows]),
                 (r.previous.label, charts.LAST_WEEK, [row.cpst_usd.last for row in rows])], fmt.usd),
                "CPST by task type, this week against last week"))
        s.blocks.append(_segment_table(rows, dimension))
    movers = [m for m in r.movers if m.dimension != "fleet"]
    s.blocks.append(Para("Top movers", "subhead"))
    if not movers:
        s.blocks.append(Para("No segment's cost moved between the two weeks.", "muted"))
    else:
        s.blocks.append(Para("Segments whose cost changed most. Each change is split exactly among its drivers "
                             "(log-mean Divisia decomposition: the contributions add up to the change).", "muted"))
        s.blocks.append(Table(
            ("Segment", "Cost", "Cost change", "CPST", "CPST WoW", "Main driver", "Drivers (last → this, USD effect)"),
            tuple((f"{DIMENSION_TITLES.get(m.dimension, m.dimension)}: {m.key or '(none)'}", fmt.usd(m.cost_usd.this),
                   fmt.usd_delta(m.cost_usd.delta), fmt.usd(m.cpst_usd.this), fmt.wow(m.cpst_usd.wow),
                   m.main_driver.name if m.main_driver and m.main_driver.contribution_usd else "—",
                   "\n".join(driver_lines(m)) or "no driver moved") for m in movers),
            numeric=(False, True, True, True, True, False, False)))
    return s


def waste_section(r: WeeklyReview) -> Section:
    s = Section("waste", "Waste")
    spend = r.headline.spend_usd.this or 0.0
    if not r.waste:
        s.blocks.append(Para("Waste breakdown not available.", "muted"))
        return s
    exclusive = [w for w in r.waste if w.category != "partial_streams"]
    wasted = sum(w.usd for w in exclusive)
    useful = max(spend - wasted, 0.0)
    s.blocks.append(Para(f"{fmt.usd(wasted)} of {fmt.usd(spend)} spend ({fmt.pct(wasted / spend if spend else None)}) "
                         f"bought no successful result. Partial streams are part of retry and failed-task waste, "
                         f"shown separately."))
    s.blocks.append(Chart(charts.stacked_bar("Where the spend went", [("useful", useful)] + [
        (w.label, w.usd) for w in exclusive], fmt.usd), "Spend split into useful work and waste categories"))

    def top(items):
        return ", ".join(f"{c.name} {fmt.usd(c.usd)}" for c in items[:3]) or "—"
    s.blocks.append(Table(
        ("Category", "USD", "Share of spend", "Last week", "Top task types", "Top replicas"),
        tuple((w.label + (f" ({fmt.count(w.count)})" if w.count is not None else ""), fmt.usd(w.usd),
               fmt.pct(w.share_of_spend), fmt.usd(w.last_usd), top(w.by_task_type), top(w.by_replica))
              for w in r.waste),
        numeric=(False, True, True, True, False, False)))
    return s


def budgets_section(r: WeeklyReview) -> Section | None:
    """Budgets (fleet.yaml) against the week: None when no budget is configured."""
    if not r.budgets:
        return None
    s = Section("budgets", "Budgets")
    s.blocks.append(Para("Spend allocated to each scope's calls (idle GPU time belongs to no tenant or task type); "
                         "day budgets show the week's most expensive day.", "muted"))
    rows = tuple((("Tenant" if b.scope == "tenant" else "Task type") + f" {b.name}", f"{fmt.usd(b.budget_usd)} / {b.period}",
                  fmt.usd(b.spent_usd), fmt.pct(b.spent_usd / b.budget_usd if b.budget_usd else None),
                  (f"{b.periods_over} day(s) over" if b.period == "day" else ("over" if b.periods_over else "within")))
                 for b in r.budgets)
    s.blocks.append(Table(("Budget", "Limit", "Spent (week, or worst day)", "Of the limit", "Verdict"), rows,
                          numeric=(False, True, True, True, False)))
    over = [b for b in r.budgets if b.periods_over]
    if over:
        s.blocks.append(Para("Over budget: " + ", ".join(f"{b.scope.replace('_', ' ')} {b.name}" for b in over) + ".",
                             "warn"))
    return s


def incidents_section(r: WeeklyReview) -> Section:
    s = Section("incidents", "Incidents")
    if r.incidents is None:
        s.blocks.append(Para(r.incidents_note or "Alerts not available.", "muted"))
        return s
    if not r.incidents:
        s.blocks.append(Para("No alert fired this week."))
        return s
    total = sum(i.cost_usd or 0.0 for i in r.incidents)
    s.blocks.append(Para(f"{len(r.incidents)} alert(s) fired, estimated cost {fmt.usd(total)}."))
    s.blocks.append(Table(
        ("Rule", "Severity", "Replica", "Started", "Resolved", "Duration", "Est. cost", "Summary"),
        tuple((i.rule, i.severity, i.replica or "—", fmt.when(i.started_at),
               fmt.when(i.resolved_at) if i.resolved_at else "still firing", fmt.seconds(i.duration_s),
               fmt.usd(i.cost_usd), i.summary) for i in r.incidents),
        numeric=(False, False, False, False, False, True, True, False)))
    return s


def _task_table(rows: list[TaskRow]) -> Table:
    return Table(
        ("Task id", "Type", "Tenant", "Outcome", "Ended", "Calls", "Tokens", "Cost", "Waste"),
        tuple((t.task_id, t.task_type, t.tenant, t.outcome, fmt.when(t.ended_at), fmt.count(t.calls),
               fmt.tokens(t.tokens), fmt.usd(t.cost_usd), fmt.usd(t.waste_usd)) for t in rows),
        numeric=(False, False, False, False, False, True, True, True, True))


def tasks_section(r: WeeklyReview) -> Section:
    s = Section("tasks", "Most expensive tasks")
    s.blocks.append(Para("Task ids open the task's calls in the dashboard (Tasks page) or with "
                         "`infercost cost --task <id>`.", "muted"))
    s.blocks.append(Para("The 10 most expensive tasks", "subhead"))
    s.blocks.append(_task_table(r.top_tasks) if r.top_tasks else Para("No task ended this week.", "muted"))
    s.blocks.append(Para("The 10 most expensive failed tasks", "subhead"))
    s.blocks.append(_task_table(r.top_failed_tasks) if r.top_failed_tasks
                    else Para("No task failed or was abandoned this week.", "muted"))
    return s


def levers_section(r: WeeklyReview) -> Section:
    s = Section("levers", "Levers")
    s.blocks.append(Para("Every optimisation is one of four moves: avoid work (caching), share it (batching), "
                         "move it (routing), delay it (admission control). Savings are per week, computed "
                         "from this week's measurements with the method stated.", "muted"))
    order = {m: i for i, m in enumerate(MOVES)}
    levers = sorted(r.levers, key=lambda lv: order.get(lv.move, 9))
    if not levers:
        s.blocks.append(Para("No lever could be measured this week.", "muted"))
        return s
    s.blocks.append(Table(
        ("Move", "Lever", "Measured", "Est. saving / week", "How the saving is computed"),
        tuple((MOVE_TITLES.get(lv.move, lv.move), lv.name,
               f"{lv.measured_label}: {fmt.measure(lv.measured, lv.measured_unit)}"
               + "".join(f"\n{k}: {v}" for k, v in lv.detail),
               fmt.usd(lv.saving_usd), lv.method) for lv in levers),
        numeric=(False, False, False, True, False)))
    return s


def notes_section(r: WeeklyReview) -> Section | None:
    if not r.notes:
        return None
    s = Section("notes", "Data quality")
    for note in r.notes:
        s.blocks.append(Para(note, "warn"))
    return s


def build_sections(r: WeeklyReview) -> list[Section]:
    """The report's sections in reading order (only the headline for an empty week)."""
    if r.empty:
        out = [headline_section(r)]
    else:
        out = [headline_section(r), changes_section(r), waste_section(r), incidents_section(r),
               tasks_section(r), levers_section(r)]
        budgets = budgets_section(r)
        if budgets is not None:
            out.insert(3, budgets)
    notes = notes_section(r)
    if notes is not None:
        out.append(notes)
    return out
