"""``infercost cost``: sync fleet.yaml, run the cost jobs, print the period summary.

Wiring only: the cost model lives in SQL (``schema/migrations/0013``, ``0014``), the runner in
``schema.jobs``, the summary query in ``schema.queries.cost``.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta, timezone

import click

from infercost.settings import load_settings

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}

# (column of period_summary, header with its unit, format)
_TABLE = (
    ("spend_usd", "spend $", "money"),
    ("allocated_usd", "allocated $", "money"),
    ("idle_usd", "idle $", "money"),
    ("unattributed_usd", "unattributed $", "money"),
    ("useful_usd", "useful $", "money"),
    ("retry_waste_usd", "retry waste $", "money"),
    ("failed_task_waste_usd", "failed-task waste $", "money"),
    ("pending_usd", "pending $", "money"),
    ("partial_usd", "partial $", "money"),
    ("requests", "requests", "int"),
    ("tokens", "tokens", "int"),
    ("successful_tasks", "successful tasks", "int"),
    ("cpst_usd", "CPST $/task", "money"),
    ("attributed_cpst_usd", "attributed CPST $/task", "money"),
    ("cost_per_request_usd", "$/request", "money"),
    ("cost_per_1m_tokens_usd", "$/1M tokens", "money"),
    ("goodput_per_hour", "goodput tasks/h", "rate"),
    ("attempts_per_success", "attempts/success", "rate"),
)


def parse_duration(text: str) -> timedelta:
    """``30s``, ``15m``, ``24h``, ``7d``, ``2w`` -> timedelta; raises click.BadParameter otherwise."""
    match = _DURATION.match(text or "")
    if not match or float(match.group(1)) <= 0:
        raise click.BadParameter(f"{text!r} is not a duration like 30m, 24h, 7d or 2w")
    return timedelta(seconds=float(match.group(1)) * _UNIT_SECONDS[match.group(2)])


def _fmt(value, kind: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if kind == "int":
        return f"{int(value):,}"
    if kind == "rate":
        return f"{float(value):,.2f}"
    value = float(value)
    return f"{value:,.4f}" if abs(value) < 100 else f"{value:,.2f}"


def render_summary(df, by: str | None) -> str:
    """The period summary as a text table: one column per group (rows = measures, units in names)."""
    if df is None or len(df) == 0:
        return "(no data in the period)"
    groups = [("(all)" if not by else (str(g) if g != "" else "(none)")) for g in df["grp"]]
    header_width = max(len(h) for _, h, _ in _TABLE) + 2
    cells = [[_fmt(row[col], kind) for col, _, kind in _TABLE] for _, row in df.iterrows()]
    widths = [max(len(groups[i]), *(len(c) for c in cells[i])) + 2 for i in range(len(groups))]
    title = (by or "").ljust(header_width) + "".join(g.rjust(w) for g, w in zip(groups, widths))
    lines = [title, "-" * len(title)]
    for index, (_, header, _) in enumerate(_TABLE):
        lines.append(header.ljust(header_width) + "".join(cells[i][index].rjust(widths[i]) for i in range(len(groups))))
    return "\n".join(lines)


@click.command(name="cost")
@click.option("--since", "since", default="24h", show_default=True, help="Period: the last 30m, 24h, 7d, 30d ...")
@click.option("--by", "by", type=click.Choice(["task_type", "tenant", "model", "replica"]), default=None,
              help="Group the summary.")
@click.option("--recompute", is_flag=True,
              help="Recompute the whole period (backfill, e.g. after a price change) instead of the trailing window.")
@click.option("--fleet", "fleet_file", type=click.Path(dir_okay=False), default=None,
              help="fleet.yaml to validate and sync first (default: INFERCOST_FLEET_FILE, fleet.yaml if present).")
@click.option("--clickhouse-url", default=None, help="Store URL (default: INFERCOST_CLICKHOUSE_URL or the embedded store).")
def command(since, by, recompute, fleet_file, clickhouse_url):
    """Cost per successful task: sync fleet.yaml, run the cost jobs, print the period summary.

    Money in USD (unrounded in the store; 4 decimals here), tokens as counts, goodput in successful
    tasks within SLO per hour. Without --recompute the periodic jobs' trailing window is refreshed
    and older minutes are read as last computed.
    """
    from schema.fleet import FleetError, load_fleet, sync_fleet
    from schema.jobs import refresh, run_jobs, watermark
    from schema.migrate import MigrationError, migrate
    from schema.queries import cost
    from schema.store import StoreError, connect

    period = parse_duration(since)
    settings = load_settings(clickhouse_url=clickhouse_url)
    path = fleet_file or settings.fleet_file
    fleet = None
    try:
        if fleet_file or path.exists():
            fleet = load_fleet(path)
    except FleetError as exc:
        raise click.ClickException(str(exc)) from exc
    try:
        store = connect(settings.store_url, settings.database)
        migrate(store, settings.retention_days)
        if fleet is not None:
            sync_fleet(store, fleet)
            click.echo(f"synced {path}: {len(fleet.gpu_types)} GPU type(s), {len(fleet.replicas)} replica(s)", err=True)
        else:
            click.echo(f"no fleet file at {path}: using the prices already in the store", err=True)
        end = datetime.now(timezone.utc).replace(second=0, microsecond=0)
        start = end - period
        if recompute:
            run = run_jobs(store, start=start, end=end, progress=lambda text: click.echo(f"recomputed {text}", err=True))
            click.echo(f"recomputed {start:%Y-%m-%d %H:%M} .. {end:%Y-%m-%d %H:%M} UTC in {run.total_seconds:.1f} s "
                       f"({run.rows.get('call_costs', 0):,} call-minute rows)", err=True)
        else:
            refresh(store)
            # The periodic jobs catch up at most one day: with no history yet, a longer period is partial.
            if watermark(store) is None and period > timedelta(days=1):
                click.echo("note: minutes earlier than the last day may not be computed yet; "
                           f"run 'infercost cost --since {since} --recompute' to compute the whole period", err=True)
        summary = cost.period_summary(store, start, end, by=by)
    except (MigrationError, StoreError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"cost summary {start:%Y-%m-%d %H:%M} .. {end:%Y-%m-%d %H:%M} UTC ({since})")
    click.echo(render_summary(summary, by))
