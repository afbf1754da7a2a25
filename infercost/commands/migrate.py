"""``infercost migrate``: apply the numbered schema migrations."""

from __future__ import annotations

import click

from infercost.settings import load_settings


@click.command(name="migrate")
@click.option("--clickhouse-url", default=None, help="Store URL (default: INFERCOST_CLICKHOUSE_URL or the embedded store).")
@click.option("--retention-days", type=int, default=None, help="Retention in days (TTL of raw spans, metric points and the cost tables); applied to existing tables too.")
def command(clickhouse_url, retention_days):
    """Create or upgrade the ClickHouse schema and apply the retention setting to the stored tables
    (their TTL: a shorter one drops the rows now older). Running it twice changes nothing."""
    from schema.migrate import MigrationError, apply_retention, migrate
    from schema.redact import redact
    from schema.store import StoreError, connect

    settings = load_settings(clickhouse_url=clickhouse_url, retention_days=retention_days)
    try:
        store = connect(settings.store_url, settings.database)
        applied = migrate(store, settings.retention_days, progress=lambda name: click.echo(f"applied {name}"))
        retained = apply_retention(store, settings.retention_days, progress=click.echo)
    except (MigrationError, StoreError, ValueError) as exc:
        raise click.ClickException(redact(str(exc))) from exc
    click.echo(f"schema up to date in {redact(settings.store_url)} database {settings.database} "
               f"({len(applied)} migration(s) applied; retention {settings.retention_days} days"
               + (f", changed on {len(retained)} table(s))" if retained else ")"))
