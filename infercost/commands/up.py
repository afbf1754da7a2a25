"""``infercost up``: receiver, cost jobs, alerts and dashboard in one process, against any store URL."""

from __future__ import annotations

import logging

import click

from infercost.settings import load_settings


@click.command(name="up")
@click.option("--clickhouse-url", default=None, help="Store URL (default: INFERCOST_CLICKHOUSE_URL or the embedded store).")
@click.option("--fleet", "fleet_file", default=None, help="fleet.yaml (default INFERCOST_FLEET_FILE, ./fleet.yaml).")
@click.option("--no-receiver", is_flag=True, help="Do not run the OTLP receiver (an OTel Collector writes the tables).")
@click.option("--scrape", multiple=True, help="A vLLM /metrics URL=replica:gpu_type:gpu_count[:model] to scrape (repeat).")
@click.option("--no-alerts", is_flag=True, help="Do not run the alert evaluator.")
def command(clickhouse_url, fleet_file, no_receiver, scrape, no_alerts):
    """Run the service: OTLP receiver (+ scraper), cost jobs, alert evaluator and the dashboard (main thread).

    In embedded mode (chDB) this process owns the store, so every part must run here. With a
    ClickHouse server the parts can also run alone: `infercost collector`, `alerts`, `dashboard`;
    the cost jobs are refreshable materialized views that the server runs by itself.
    """
    from infercost.commands.alerts import load_alert_config
    from infercost.commands.collector import parse_scrape
    from infercost.service import Service, open_store, sync_fleet
    from schema.store import StoreError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = load_settings(clickhouse_url=clickhouse_url, fleet_file=fleet_file)
    targets = [parse_scrape(s) for s in scrape]
    from infercost.service import check_exposure, check_ingest

    try:  # before the store is opened: a refused start creates nothing
        check_exposure(settings.dashboard_host, settings, "dashboard")
        check_exposure(settings.api_host, settings, "query API", token_only=True)
        if not no_receiver:
            check_ingest(settings.receiver_host, settings)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    try:
        store = open_store(settings, echo=click.echo)
        sync_fleet(store, settings.fleet_file, echo=click.echo)
        alert_config = None if no_alerts else load_alert_config(settings.fleet_file)
    except (StoreError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    service = Service(store, settings)
    if no_receiver and targets:
        raise click.UsageError("--scrape needs the receiver (drop --no-receiver)")
    try:
        if not no_receiver:
            receiver = service.start_receiver(targets)
            click.echo(f"OTLP/HTTP receiver on http://{settings.receiver_host}:{receiver.port}/v1/traces")
        service.start_jobs()
        api = service.start_api()
        click.echo(f"query API on {api.url} (cost metrics: {api.url.rsplit('/api/', 1)[0]}/metrics)")
        if not no_alerts:
            service.start_alerts(config=alert_config)
        if service.start_review_schedule() is not None:
            click.echo("weekly review: scheduled (INFERCOST_REVIEW_SCHEDULE)")
        click.echo(f"dashboard on http://{settings.dashboard_host}:{settings.dashboard_port}  (Ctrl-C stops)")
        service.serve_dashboard(block=True)
    finally:
        service.stop()
        store.close()
