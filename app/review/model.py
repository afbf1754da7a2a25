"""The weekly review as plain data: what both renderers (HTML, Markdown) and the dashboard page show.

Built by :mod:`app.review.build` from the cost job's named queries; holds raw numbers (USD, tokens,
ratios 0..1, seconds), never formatted strings, so a test can compare every figure with the query
that produced it. Position: schema (queries) -> **app.review** (model, renderers).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime

from app.review.weeks import IsoWeek

# The four moves every inference optimisation is one of: avoid work (prefix caching), share it
# (batching), move it (to another replica or GPU), delay it (admission control, autoscaling).
MOVES = ("avoid", "share", "move", "delay")


@dataclass(frozen=True)
class Figure:
    """One measure this week and last week. ``None`` = not measurable (e.g. no successful task)."""

    this: float | None
    last: float | None
    comparable: bool = True  # False: the weeks' data coverage differs, so no change is stated

    @property
    def delta(self) -> float | None:
        """this - last, in the measure's unit; None if either side is missing or not comparable."""
        if self.this is None or self.last is None or not self.comparable:
            return None
        return self.this - self.last

    @property
    def wow(self) -> float | None:
        """Week-over-week relative change (this - last) / last as a ratio (0.1 = +10 %).

        None when last week is missing or zero (a change from zero has no percentage), or when the
        weeks' coverage differs (:class:`Coverage`): a 25-hour week against a full one says nothing.
        """
        if self.this is None or self.last is None or self.last == 0 or not self.comparable:
            return None
        return (self.this - self.last) / abs(self.last)


@dataclass(frozen=True)
class Coverage:
    """How much of a week has data. Hours: hours in which some replica was up."""

    hours_with_data: int
    week_hours: float  # 168 (less for the week in progress: the hours elapsed so far)
    first: datetime | None
    last: datetime | None
    in_progress: bool = False  # the week has not ended yet

    @property
    def share(self) -> float:
        """Hours with data / hours of the week (0..1)."""
        return self.hours_with_data / 168.0

    @property
    def partial(self) -> bool:
        """Fewer than 95 % of the week's 168 hours have data (or the week is still running)."""
        return self.in_progress or self.hours_with_data < 0.95 * 168


def comparable(a: "Coverage | None", b: "Coverage | None", tolerance: float = 0.1) -> bool:
    """True when two weeks' changes can be stated: both have data, neither is in progress, and their
    hours with data differ by at most ``tolerance`` (10 %) of the larger."""
    if a is None or b is None or a.in_progress or b.in_progress:
        return False
    hi = max(a.hours_with_data, b.hours_with_data)
    return hi > 0 and abs(a.hours_with_data - b.hours_with_data) <= tolerance * hi


@dataclass(frozen=True)
class Headline:
    """The answer to "what did we pay per successful task last week, and how did it change"."""

    cpst_usd: Figure  # all spend / successful tasks: idle GPUs included (schema/jobs/README.md)
    attributed_cpst_usd: Figure  # spend excluding idle / successful tasks
    spend_usd: Figure
    idle_usd: Figure
    tasks: Figure
    successful_tasks: Figure
    goodput_per_hour: Figure  # successful tasks that met their SLO, per hour WITH DATA (Coverage)
    slo_attainment: Figure  # ratio 0..1 of successful tasks meeting their SLO
    requests: Figure
    tokens: Figure
    cost_per_request_usd: Figure
    cost_per_1m_tokens_usd: Figure


@dataclass(frozen=True)
class SegmentRow:
    """CPST of one task type / tenant / model, this week vs last week."""

    dimension: str  # task_type | tenant | model
    key: str
    cpst_usd: Figure
    cost_usd: Figure
    successful_tasks: Figure
    tasks: Figure


@dataclass(frozen=True)
class Driver:
    """One factor of a segment's cost, its values both weeks and its share of the cost change.

    ``contribution_usd`` comes from an exact log-mean Divisia (LMDI-I) decomposition: the
    contributions of all drivers of a mover add up to its cost change (see app.review.drivers).
    """

    name: str
    unit: str
    this: float | None
    last: float | None
    contribution_usd: float

    @property
    def change(self) -> Figure:
        return Figure(self.this, self.last)


@dataclass(frozen=True)
class Mover:
    """A segment whose cost moved most week over week, explained by its drivers."""

    dimension: str
    key: str
    cost_usd: Figure
    cpst_usd: Figure
    drivers: tuple[Driver, ...]
    residual_usd: float = 0.0  # cost change the drivers could not explain (0 when decomposable)

    @property
    def main_driver(self) -> Driver | None:
        if not self.drivers:
            return None
        return max(self.drivers, key=lambda d: abs(d.contribution_usd))


@dataclass(frozen=True)
class Contributor:
    """A task type or replica and the USD it contributed to a waste category."""

    name: str
    usd: float


@dataclass(frozen=True)
class WasteRow:
    """One waste category of the week: USD, share of spend, and who caused most of it."""

    category: str  # retry_waste | failed_task_waste | partial_streams | unattributed | idle
    label: str
    usd: float
    share_of_spend: float | None  # ratio 0..1
    last_usd: float | None = None
    by_task_type: tuple[Contributor, ...] = ()
    by_replica: tuple[Contributor, ...] = ()
    count: int | None = None  # e.g. number of partial streams


@dataclass(frozen=True)
class Incident:
    """An alert that fired in the week (from the alerts engineer's ``alerts_in_period``)."""

    rule: str
    severity: str
    replica: str
    started_at: datetime | None
    resolved_at: datetime | None
    duration_s: float | None
    cost_usd: float | None
    summary: str


@dataclass(frozen=True)
class TaskRow:
    """One task of the week (most expensive lists); ``task_id`` is the drill-down id."""

    task_id: str
    task_type: str
    tenant: str
    outcome: str
    ended_at: datetime | None
    calls: int | None
    attempts: int | None
    tokens: int | None
    cost_usd: float
    waste_usd: float | None
    trace_id: str = ""


@dataclass(frozen=True)
class Lever:
    """One of the four moves: the measured figure and the saving it would bring, with its method."""

    move: str  # avoid | share | move | delay
    name: str
    measured: float | None
    measured_unit: str  # "%", "requests", "s", ...
    measured_label: str
    saving_usd: float | None
    method: str  # how the saving was computed, in one sentence
    detail: tuple[tuple[str, str], ...] = ()  # extra (label, formatted value) pairs


@dataclass(frozen=True)
class BudgetRow:
    """A budget (fleet.yaml) against the week: ``spent_usd`` is the week's allocated spend of the scope
    (week budgets) or its most expensive day (day budgets); ``periods_over`` counts days (or the week)
    over budget."""

    scope: str  # tenant | task_type
    name: str
    period: str  # day | week
    budget_usd: float
    spent_usd: float
    periods_over: int


@dataclass(frozen=True)
class DayPoint:
    """A day of the week: spend and CPST (for the trend chart)."""

    day: date
    spend_usd: float
    successful_tasks: float
    cpst_usd: float | None


@dataclass
class WeeklyReview:
    """Everything the weekly review shows for ``week`` against ``previous``."""

    week: IsoWeek
    previous: IsoWeek
    generated_at: datetime
    headline: Headline
    empty: bool = False  # no spend and no tasks this week: the report says so and stops
    coverage: Coverage | None = None
    coverage_last: Coverage | None = None
    budgets: list[BudgetRow] = field(default_factory=list)
    segments: dict[str, list[SegmentRow]] = field(default_factory=dict)
    movers: list[Mover] = field(default_factory=list)
    waste: list[WasteRow] = field(default_factory=list)
    incidents: list[Incident] | None = None  # None = the alerts module is not available
    incidents_note: str = ""
    top_tasks: list[TaskRow] = field(default_factory=list)
    top_failed_tasks: list[TaskRow] = field(default_factory=list)
    levers: list[Lever] = field(default_factory=list)
    daily_this: list[DayPoint] = field(default_factory=list)
    daily_last: list[DayPoint] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # data-quality caveats shown at the end

    @property
    def title(self) -> str:
        return f"Weekly cost review {self.week.label}"
