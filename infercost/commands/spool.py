"""``infercost spool status`` / ``infercost spool replay``: the receiver's spool and its quarantine.

Wiring only (collectors.spool, collectors.quarantine, collectors.writer). The quarantine holds
records the store refused as unparseable (docs/reliability.md); ``replay`` gives them another
try once the cause is fixed:

* a collector is running on the spool (its lock is held): the records move to ``<spool>/requeue/``
  and the running writer appends them to the spool within seconds;
* no collector is running: they are appended to the spool here and this command inserts
  everything pending, then reports what was stored and what the store refused again.
"""

from __future__ import annotations

from pathlib import Path

import click

from infercost.settings import load_settings


def _spool_dir(option: str | None) -> Path:
    return Path(option) if option else load_settings().spool_dir


@click.group(name="spool")
def command():
    """Inspect the receiver's on-disk spool; replay quarantined records."""


@command.command(name="status")
@click.option("--spool-dir", default=None, help="Spool directory (default: <INFERCOST_DATA_DIR>/spool).")
def status(spool_dir):
    """Records waiting for the store, records in quarantine (with the store's error)."""
    from collectors.quarantine import Quarantine
    from collectors.spool import Spool, SpoolLocked

    directory = _spool_dir(spool_dir)
    if not directory.is_dir():
        raise click.ClickException(f"no spool at {directory}")
    try:
        spool = Spool(directory, max_bytes=1 << 62)
    except SpoolLocked:
        click.echo(f"spool {directory}: in use by a running collector (its GET /health shows the queue)")
    else:
        click.echo(f"spool {directory}: {spool.pending_records} record(s), {spool.pending_rows} row(s), "
                   f"{spool.pending_bytes} bytes waiting for the store"
                   + (f"; {spool.skipped_bytes} invalid bytes skipped" if spool.skipped_bytes else ""))
        spool.close()
    quarantine = Quarantine(directory)
    entries = quarantine.entries()
    requeued = quarantine.entries(quarantine.requeue_folder)
    click.echo(f"quarantine: {len(entries)} record(s), {sum(e.rows for e in entries)} row(s)"
               + (f"; {len(requeued)} record(s) queued for replay" if requeued else ""))
    for entry in entries[:20]:
        click.echo(f"  {entry.payload_path.name}: {entry.rows} rows: {entry.error[:200]}")
    if len(entries) > 20:
        click.echo(f"  ... and {len(entries) - 20} more")


@command.command(name="replay")
@click.option("--spool-dir", default=None, help="Spool directory (default: <INFERCOST_DATA_DIR>/spool).")
@click.option("--clickhouse-url", default=None, help="Store URL (default: INFERCOST_CLICKHOUSE_URL or the embedded store).")
@click.option("--timeout", type=float, default=300.0, show_default=True,
              help="Seconds to wait for the store to take everything (when no collector is running).")
def replay(spool_dir, clickhouse_url, timeout):
    """Give quarantined records another try (after fixing what made the store refuse them)."""
    from collectors.quarantine import Quarantine
    from collectors.spool import Spool, SpoolLocked
    from collectors.stats import ReceiverStats
    from collectors.writer import BatchWriter
    from schema.migrate import migrate
    from schema.redact import redact
    from schema.store import StoreError, connect

    settings = load_settings(clickhouse_url=clickhouse_url)
    directory = _spool_dir(spool_dir)
    quarantine = Quarantine(directory)
    rows, records = quarantine.count()
    if not records and not quarantine.entries(quarantine.requeue_folder):
        click.echo(f"nothing to replay: the quarantine of {directory} is empty")
        return
    try:
        spool = Spool(directory, settings.spool_max_bytes)
    except SpoolLocked:
        moved = quarantine.requeue()
        click.echo(f"a collector is running on {directory}: {moved} record(s) ({rows} rows) moved to requeue/; "
                   f"it inserts them within seconds (watch its GET /health and infercost_receiver_* metrics)")
        return
    try:
        quarantine.requeue()
        moved = quarantine.drain_requeue(spool)
        click.echo(f"re-queued {moved} record(s) ({rows} rows); inserting into {redact(settings.store_url)} ...")
        try:
            store = connect(settings.store_url, settings.database)
            migrate(store, settings.retention_days)
        except StoreError as exc:
            raise click.ClickException(f"store unavailable ({exc.reason or 'unknown'}): {exc}; the records stay "
                                       f"in the spool and are inserted by the next collector start") from exc
        stats = ReceiverStats()
        writer = BatchWriter(spool, store, stats, batch_max_seconds=0.05)
        writer.start()
        drained = writer.flush(timeout)
        writer.stop(0)
        store.close()
    finally:
        spool.close()
    again = stats.quarantined_rows
    click.echo(f"stored {stats.stored} span(s) and {stats.metric_points_stored} metric point(s); "
               f"{again} row(s) refused again and back in quarantine"
               + ("" if drained else f"; the store did not take everything within {timeout:g} s (still spooled: "
                                     f"{redact(stats.last_error)})"))
    if not drained or again:
        raise SystemExit(1)
