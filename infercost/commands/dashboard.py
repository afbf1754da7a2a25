"""``infercost dashboard``: serve the Streamlit dashboard over the configured store.

The dashboard runs in this process (``app.server.serve`` in the main thread: Streamlit installs
its SIGINT/SIGTERM handlers there). With the embedded store (``chdb://…``) this process owns the
data directory, so it cannot run beside ``infercost up`` on the same directory (``up`` serves the
dashboard itself); with a ClickHouse server URL any number of dashboards can run.
"""

from __future__ import annotations

import click


@click.command(name="dashboard")
@click.option("--host", default=None, help="Bind address (settings: dashboard_host, default 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Port (settings: dashboard_port, default 8501).")
@click.option("--clickhouse-url", default=None,
              help="Store URL (settings: clickhouse_url; default the embedded store under the data dir).")
@click.option("--database", default=None, help="ClickHouse database (settings: database, default infercost).")
def command(host, port, clickhouse_url, database):
    """Serve the dashboard (live operations, cost per successful task, triangle, tasks, alerts, review)."""
    from infercost.settings import load_settings
    from schema.migrate import MigrationError, migrate
    from schema.store import StoreError, connect

    try:
        settings = load_settings(dashboard_host=host, dashboard_port=port, clickhouse_url=clickhouse_url,
                                 database=database)
    except ValueError as exc:
        raise click.ClickException(f"bad setting: {exc}") from exc
    from infercost.locate import embedded_path, service_api, store_exists
    from infercost.service import check_exposure, dashboard_auth

    try:
        check_exposure(settings.dashboard_host, settings, "dashboard")
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    path = embedded_path(settings)
    if path is not None:
        owner = service_api(settings)
        if owner is not None:
            raise click.ClickException(f"the store at {path} is owned by a running `infercost up` / `demo`, which "
                                       f"serves the dashboard itself (its query API: {owner.base_url})")
        if not store_exists(settings):
            raise click.ClickException(f"no store at {path} (INFERCOST_DATA_DIR={settings.data_dir}): nothing was "
                                       "created. Run `infercost demo` or `infercost up` first.")
    try:
        store = connect(settings.store_url, settings.database)
        if store.embedded:
            # This process owns the embedded store: make sure the tables the pages read exist.
            migrate(store, retention_days=settings.retention_days)
    except (StoreError, MigrationError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc

    from app.server import serve

    from schema.redact import redact

    click.echo(f"infercost dashboard on http://{settings.dashboard_host}:{settings.dashboard_port} "
               f"(store {redact(settings.store_url)})")
    endpoint = f"http://{settings.receiver_host}:{settings.receiver_port}/v1/traces"
    try:
        serve(store, settings.dashboard_host, settings.dashboard_port, block=True, otlp_endpoint=endpoint,
              auth=dashboard_auth(settings))
    finally:
        store.close()
