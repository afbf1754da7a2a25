"""``infercost cost``: sync fleet.yaml, run the cost jobs, print the period summary.

Wiring only: the cost model lives in SQL (``schema/migrations/1004_baseline_cost_jobs.sql``; the
periodic chain, ``1005_baseline_cost_chain.sql``, runs it every minute), the runner in
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


def render_task(task: dict | None, calls) -> str:
    """One task as text: its row (outcome, attempts, cost by category) and its calls in start order."""
    import pandas as pd

    calls = calls if isinstance(calls, pd.DataFrame) else pd.DataFrame(calls)
    lines = []
    if task:
        lines.append(f"task {task['task_id']}  type {task['task_type']}  tenant {task['tenant_id']}  "
                     f"outcome {task['outcome']}  ended {task.get('end_time')}")
        lines.append(f"  calls {_fmt(task.get('calls'), 'int')}  attempts {_fmt(task.get('attempts'), 'int')}  "
                     f"steps {_fmt(task.get('steps'), 'int')}  tokens "
                     f"{_fmt((task.get('prompt_tokens') or 0) + (task.get('output_tokens') or 0), 'int')}")
        lines.append("  cost $ " + "  ".join(f"{label} {_fmt(task.get(col), 'money')}" for col, label in (
            ("cost_usd", "total"), ("useful_usd", "useful"), ("retry_waste_usd", "retry waste"),
            ("failed_task_waste_usd", "failed-task waste"), ("pending_usd", "pending"), ("partial_usd", "partial"))))
    else:
        lines.append("task row: not computed yet (the task has not ended, or the cost job has not run since)")
    if len(calls):
        cols = [("task_step", "step", 16), ("task_attempt", "attempt", 8), ("call_source", "evidence", 9),
                ("replica", "replica", 11), ("status", "status", 7), ("error_type", "error", 16),
                ("prompt_tokens", "prompt", 8), ("output_tokens", "output", 8), ("cost_usd", "cost $", 10),
                ("category", "category", 18)]
        lines.append("")
        lines.append("".join(h.ljust(w) for _, h, w in cols))
        for _, r in calls.iterrows():
            cells = []
            for col, _, w in cols:
                v = r.get(col)
                text = _fmt(v, "money") if col == "cost_usd" else ("-" if v is None or (isinstance(v, float) and
                                                                                         math.isnan(v)) else str(v))
                cells.append(text[: w - 1].ljust(w))
            lines.append("".join(cells))
        lines.append("")
        by_cat = calls.groupby("category")["cost_usd"].sum() if "category" in calls else {}
        lines.append("calls by category $: " + ", ".join(f"{k} {_fmt(v, 'money')}" for k, v in by_cat.items()))
    else:
        lines.append("no calls of this task in the store")
    return "\n".join(lines)


@click.command(name="cost")
@click.option("--since", "since", default="24h", show_default=True, help="Period: the last 30m, 24h, 7d, 30d ...")
@click.option("--by", "by", type=click.Choice(["task_type", "tenant", "model", "replica"]), default=None,
              help="Group the summary.")
@click.option("--recompute", is_flag=True,
              help="Recompute the whole period (backfill, e.g. after a price change) instead of the trailing window: "
                   "in day chunks, a day of more than 2M calls cut at whole hours to bound memory; progress per chunk.")
@click.option("--fleet", "fleet_file", type=click.Path(dir_okay=False), default=None,
              help="fleet.yaml to validate and sync first (default: INFERCOST_FLEET_FILE, fleet.yaml if present).")
@click.option("--clickhouse-url", default=None, help="Store URL (default: INFERCOST_CLICKHOUSE_URL or the embedded store).")
@click.option("--task", "task_id", default=None, metavar="TASK_ID",
              help="Show one task instead: its calls, attempts and cost by category.")
def command(since, by, recompute, fleet_file, clickhouse_url, task_id):
    """Cost per successful task: sync fleet.yaml, run the cost jobs, print the period summary.

    Money in USD (unrounded in the store; 4 decimals here), tokens as counts, goodput in successful
    tasks within SLO per hour. Without --recompute the periodic jobs' trailing window is refreshed
    and older minutes are read as last computed.
    """
    from infercost.locate import APIClient, NoStoreHere, open_for_reading
    from schema.budgets import parse_budgets, sync_budgets
    from schema.fleet import FleetError, load_fleet, sync_fleet
    from schema.jobs import refresh, run_jobs, watermark
    from schema.migrate import MigrationError
    from schema.queries import cost
    from schema.store import StoreError

    period = parse_duration(since)
    settings = load_settings(clickhouse_url=clickhouse_url)
    path = fleet_file or settings.fleet_file
    fleet, budgets = None, []
    try:
        if fleet_file or path.exists():
            fleet = load_fleet(path)
            budgets = parse_budgets(fleet.budgets)
    except FleetError as exc:
        raise click.ClickException(str(exc)) from exc
    except ValueError as exc:  # the budgets: section
        raise click.ClickException(f"{path}: {exc}") from exc
    end = datetime.now(timezone.utc).replace(second=0, microsecond=0)
    start = end - period
    try:
        store = open_for_reading(settings, lambda text: click.echo(text, err=True))
    except (NoStoreHere, MigrationError, StoreError) as exc:
        raise click.ClickException(str(exc)) from exc
    if isinstance(store, APIClient):
        _through_api(store, start, end, since, by, recompute, task_id)
        return
    try:
        if task_id:
            from schema.queries.tasks import task_detail

            row, calls = task_detail(store, task_id)
            if row is None and not len(calls):
                raise click.ClickException(f"no task {task_id!r} in the store")
            click.echo(render_task(row, calls))
            return
        if fleet is not None:
            sync_fleet(store, fleet)
            sync_budgets(store, budgets)  # the fleet file is the budgets' source too (as `infercost up`)
            click.echo(f"synced {path}: {len(fleet.gpu_types)} GPU type(s), {len(fleet.replicas)} replica(s)"
                       + (f", {len(budgets)} budget(s)" if budgets else ""), err=True)
        else:
            click.echo(f"no fleet file at {path}: using the prices already in the store", err=True)
        if recompute:
            run = run_jobs(store, start=start, end=end, progress=lambda text: click.echo(f"recomputed {text}", err=True))
            click.echo(f"recomputed {start:%Y-%m-%d %H:%M} .. {end:%Y-%m-%d %H:%M} UTC in {run.elapsed_s:.1f} s "
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
    finally:
        store.close()
    click.echo(f"cost summary {start:%Y-%m-%d %H:%M} .. {end:%Y-%m-%d %H:%M} UTC ({since})")
    click.echo(render_summary(summary, by))


def _through_api(api, start, end, since, by, recompute, task_id) -> None:
    """The read-only part of ``cost`` through the owning service's query API (its jobs run themselves)."""
    import pandas as pd

    if recompute:
        raise click.ClickException("--recompute needs the store itself: stop the service that owns it first")
    try:
        if task_id:
            from urllib.parse import quote

            body = api.get("/tasks/" + quote(task_id, safe=""))
            click.echo(render_task(body["task"], body["calls"]))
            return
        body = api.get("/summary", start=start.isoformat(), end=end.isoformat(), by=by)
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"cost summary {start:%Y-%m-%d %H:%M} .. {end:%Y-%m-%d %H:%M} UTC ({since})")
    click.echo(render_summary(pd.DataFrame(body["rows"]), by))
