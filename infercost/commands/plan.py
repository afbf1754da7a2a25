"""``infercost plan``: the capacity and cost planner (``planner``) from the command line.

Wiring only: extracts the period's workload from the store, replays it on candidate fleets in
virtual time with the cost jobs, prints the backtest, the candidate table, the frontier, the
recommendation and the levers, and stores the run for the dashboard's Planner page.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone

import click

from infercost.commands.cost import parse_duration
from infercost.settings import load_settings


@click.command(name="plan")
@click.option("--since", default="7d", show_default=True, help="Period to replay: the last 24h, 7d, 2w ...")
@click.option("--until", "until", default=None,
              help="End of the period (ISO 8601, UTC; default: now, rounded down to the minute).")
@click.option("--candidates", "candidates_file", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Candidates file (plan.yaml): candidates, search bounds, current-fleet settings, GPU types.")
@click.option("--slo-from", "slo_file", type=click.Path(dir_okay=False, exists=True), default=None,
              help="fleet.yaml whose slos: the candidates must meet (default: the SLOs the tasks carried).")
@click.option("--workers", type=click.IntRange(min=0), default=None,
              help="Processes evaluating candidates, each with its own scratch store (default: the number of "
                   "cores; 0 = in this process, in a scratch database of the store).")
@click.option("--budget", default=None, help="Wall-clock budget of the search, e.g. 10m (default: the file's, 600 s).")
@click.option("--max-candidates", type=int, default=None, help="Most candidates to evaluate (default: 20).")
@click.option("--no-search", is_flag=True, help="Evaluate only the current fleet, the levers and the file's candidates.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the virtual-time replays.")
@click.option("--no-save", is_flag=True, help="Do not store the run (planner_runs) for the dashboard.")
@click.option("--clickhouse-url", default=None, help="Store URL (default: INFERCOST_CLICKHOUSE_URL or the embedded store).")
def command(since, until, candidates_file, slo_file, workers, budget, max_candidates, no_search, seed, no_save,
            clickhouse_url):
    """Replay the measured workload on candidate fleets and policies; recommend the cheapest that meets every SLO.

    The backtest comes first: the current fleet replayed on its own period, with the incidents the
    store knows (slowed and crashed replicas), must reproduce the measured cost per successful task
    and each task type's p95 TTFT within the tolerance (10 %), else nothing is recommended. A period
    longer than 1.5 days is searched on its busiest day, and the cheapest candidates meeting every SLO
    there are replayed over the whole period (search.screen_hours in the candidates file; 0 = never).
    The period starts where the store's telemetry does. Money in USD over the period; latencies in
    seconds. Needs the cost jobs to have run over the period (infercost cost --recompute --since ...).
    """
    from planner import report, results
    from planner.candidates import CandidateError
    from planner.config import PlanConfigError, load_plan_config, slos_from_fleet_file
    from planner.run import plan
    from planner.workload import WorkloadError
    from schema.fleet import FleetError
    from schema.migrate import MigrationError, migrate
    from schema.store import StoreError, connect

    period = parse_duration(since)
    try:
        end = (datetime.fromisoformat(until.replace("Z", "+00:00")) if until
               else datetime.now(timezone.utc).replace(second=0, microsecond=0))
    except ValueError as exc:
        raise click.BadParameter(f"{until!r} is not an ISO 8601 time", param_hint="--until") from exc
    if end.tzinfo is None:
        end = end.replace(tzinfo=timezone.utc)
    try:
        config = load_plan_config(candidates_file)
        slos = slos_from_fleet_file(slo_file) if slo_file else None
    except (PlanConfigError, FleetError) as exc:
        raise click.ClickException(str(exc)) from exc
    if budget:
        config.search.budget_s = parse_duration(budget).total_seconds()
    if max_candidates:
        config.search.max_candidates = max_candidates
    settings = load_settings(clickhouse_url=clickhouse_url)
    workers = workers if workers is not None else max(1, os.cpu_count() or 1)
    try:
        store = connect(settings.store_url, settings.database)
        migrate(store, settings.retention_days)
        run = plan(store, end - period, end, config, slos=slos, workers=workers, seed=seed,
                   search=False if no_search else None, echo=lambda m: click.echo(m, err=True),
                   scratch_dir=str(settings.data_dir) if settings.data_dir.exists() else None,
                   inprocess_url=settings.store_url)
        click.echo(report.render(run))
        if not no_save:
            results.save(store, run)
            click.echo(f"stored as planner run {run.run_id} (dashboard: Planner)", err=True)
    except (WorkloadError, CandidateError, PlanConfigError, MigrationError, StoreError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    if run.status == "backtest_failed":
        raise SystemExit(2)
