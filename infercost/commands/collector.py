"""``infercost collector``: serve the OTLP/HTTP receiver (and scrape vLLM ``/metrics``) until Ctrl-C.

Wiring only: settings -> :class:`collectors.receiver.ReceiverConfig`, the store, the scraper.
``infercost up`` reuses :func:`receiver_config`, :func:`parse_scrape` and :func:`start_collector`.

The store is connected lazily (:class:`schema.store.LazyStore`): when it is down at start (a server
restarting, the embedded store held by another process), the collector starts anyway, accepts
into its spool (answering 503 only once the spool is full), reports ``degraded`` on ``/health``,
and migrates and drains as soon as the store answers.
"""

from __future__ import annotations

import logging
import signal
import threading

import click

from infercost.settings import Settings, load_settings


def receiver_config(settings: Settings, **overrides):
    """The receiver's configuration from settings (``overrides`` win, e.g. ``port=0`` in tests)."""
    from collectors.receiver import ReceiverConfig

    values = dict(host=settings.receiver_host, port=settings.receiver_port, ingest_token=settings.ingest_token,
                  max_body_bytes=settings.max_body_bytes, max_attribute_bytes=settings.max_attribute_bytes,
                  keep_content=settings.keep_content,
                  batch_max_rows=settings.batch_max_rows, batch_cap_rows=settings.batch_cap_rows,
                  batch_cap_bytes=settings.batch_cap_bytes, inserts_in_flight=settings.inserts_in_flight,
                  batch_max_seconds=settings.batch_max_seconds, queue_max_rows=settings.queue_max_rows,
                  spool_dir=settings.spool_dir, spool_max_bytes=settings.spool_max_bytes,
                  max_future_skew_s=settings.max_future_skew_s)
    values.update({k: v for k, v in overrides.items() if v is not None})
    return ReceiverConfig(**values)


def parse_scrape(spec: str):
    """``URL=replica:gpu_type:gpu_count[:model]`` -> ScrapeTarget; raises click.BadParameter naming the problem."""
    from collectors.scraper import ScrapeTarget

    url, sep, rest = spec.rpartition("=")
    parts = rest.split(":", 3) if sep else []
    if not url.startswith(("http://", "https://")) or len(parts) < 3 or not parts[0]:
        raise click.BadParameter(f"{spec!r}: expected URL=replica:gpu_type:gpu_count[:model], "
                                 f"e.g. http://127.0.0.1:8000/metrics=replica-0:H100:1")
    try:
        gpu_count = int(parts[2])
    except ValueError:
        raise click.BadParameter(f"{spec!r}: gpu_count {parts[2]!r} is not an integer") from None
    return ScrapeTarget(url, replica=parts[0], gpu_type=parts[1], gpu_count=gpu_count,
                        model=parts[3] if len(parts) > 3 else "")


def start_collector(store, config, targets=(), scrape_interval_s: float = 5.0,
                    min_free_disk_bytes: int = 256 * 1024 * 1024, sink=None):
    """Start the receiver and (if targets) the scraper on ``store``; returns (receiver, scraper or None).

    Scraped rows go through the receiver's spool and batching writer (``Receiver.metrics_sink``).
    With the embedded store, a :class:`schema.disk_guard.DiskGuard` pauses the cost jobs while the
    store's disk has less than ``min_free_disk_bytes`` free (shown on ``/health``; stopped with the
    receiver).
    """
    from collectors.receiver import Receiver
    from collectors.scraper import Scraper
    from schema.disk_guard import DiskGuard

    receiver = Receiver(config, store, sink=sink).start()
    if getattr(store, "embedded", False) and store.url.path not in ("", ":memory:"):
        guard = DiskGuard(store, store.url.path, min_free_disk_bytes).start()
        receiver.health_hooks.append(lambda: (f"store disk nearly full ({guard.free_bytes} bytes free): cost jobs "
                                              f"paused") if guard.low else "")
        receiver.on_stop.append(guard.stop)
    scraper = None
    if targets:
        scraper = Scraper(list(targets), sink=receiver.metrics_sink, interval_s=scrape_interval_s).start()
    return receiver, scraper


@click.command(name="collector")
@click.option("--host", default=None, help="Bind address (default INFERCOST_RECEIVER_HOST or 127.0.0.1).")
@click.option("--port", type=click.IntRange(0, 65535), default=None,
              help="OTLP/HTTP port (default INFERCOST_RECEIVER_PORT or 4318; 0 = any free port).")
@click.option("--clickhouse-url", default=None, help="Store URL (default: INFERCOST_CLICKHOUSE_URL or the embedded store).")
@click.option("--scrape", "scrapes", multiple=True, metavar="URL=replica:gpu_type:gpu_count[:model]",
              help="A vLLM /metrics endpoint to scrape (repeatable).")
@click.option("--scrape-interval", type=float, default=5.0, show_default=True, help="Seconds between scrapes.")
def command(host, port, clickhouse_url, scrapes, scrape_interval):
    """Run the OTLP/HTTP receiver (POST /v1/traces, /v1/metrics; GET /health, /metrics) until Ctrl-C.

    Migrates the schema once the store answers. If the store is down at start, the receiver still
    starts and spools what it accepts, and drains it when the store comes back. Ctrl-C stops
    accepting and drains what is queued into the store; anything not yet stored stays in the
    on-disk spool and is replayed on the next start.
    """
    from infercost.service import check_ingest
    from schema.migrate import migrate
    from schema.redact import redact
    from schema.store import LazyStore, StoreError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    targets = [parse_scrape(s) for s in scrapes]
    try:
        settings = load_settings(clickhouse_url=clickhouse_url)
        config = receiver_config(settings, host=host, port=port)
        check_ingest(config.host, settings)
        store = LazyStore(settings.store_url, settings.database,
                          on_connect=lambda s: migrate(s, settings.retention_days))
        try:
            store.get()
        except StoreError as exc:
            click.echo(f"warning: store unavailable at start ({exc.reason or 'unknown'}): {exc}; accepting into "
                       f"the spool at {settings.spool_dir} and retrying every {store.retry_s:g} s", err=True)
        receiver, scraper = start_collector(store, config, targets, scrape_interval,
                                            min_free_disk_bytes=settings.min_free_disk_bytes)
    except (StoreError, ValueError, RuntimeError, OSError) as exc:  # pydantic errors are ValueErrors
        raise click.ClickException(redact(str(exc))) from exc
    click.echo(f"OTLP/HTTP receiver on {receiver.url} (POST /v1/traces, /v1/metrics; GET /health, /metrics); "
               f"store {redact(settings.store_url)}; {len(targets)} scrape target(s). Ctrl-C to stop.")
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    click.echo("stopping: draining the write queue ...")
    if scraper is not None:
        scraper.stop()
    receiver.stop()
    stats = receiver.stats
    click.echo(f"stopped: {stats.stored} spans stored, {stats.rejected} rejected, {stats.queue_rows} rows left in the spool")
    store.close()
