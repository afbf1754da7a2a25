"""The one-process service: receiver, scraper, cost jobs, alerts and dashboard over one store.

``infercost up`` and ``infercost demo`` build a :class:`Service` from settings. In embedded mode
(chDB) this process must own the store, so every part runs here: the receiver, scraper and alert
evaluator on named background threads, the cost jobs as refreshable materialized views inside the
engine, and the Streamlit dashboard in the main thread (it installs the signal handlers). With a
ClickHouse server each part can also run alone (``infercost collector``, ``alerts``, ``dashboard``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from infercost.settings import Settings

log = logging.getLogger(__name__)


def open_store(settings: Settings, echo=print):
    """Connect to the store named by the settings and apply pending migrations. Returns the Store."""
    from schema.migrate import migrate
    from schema.store import connect

    store = connect(settings.store_url, settings.database)
    applied = migrate(store, settings.retention_days)
    if applied:
        from schema.redact import redact

        echo(f"schema: applied {len(applied)} migration(s) in {redact(settings.store_url)}")
    return store


def sync_fleet(store, fleet_file: Path, echo=print) -> bool:
    """Load ``fleet_file`` and sync prices and replicas into the store; False (with a warning) if absent.

    Raises click-friendly ValueError (from the fleet model) when the file is invalid.
    """
    from schema import fleet

    if not Path(fleet_file).is_file():
        echo(f"warning: no fleet file at {fleet_file}: replicas are priced at the default GPU price "
             f"(copy fleet.example.yaml to fleet.yaml and edit it)")
        return False
    config = fleet.load_fleet(Path(fleet_file))
    fleet.sync_fleet(store, config)
    echo(f"fleet: {len(config.replicas)} replica(s), {len(config.gpu_types)} GPU type(s) from {fleet_file}")
    return True


@dataclass
class Service:
    """The parts running in this process; :meth:`stop` stops them in reverse order, idempotently."""

    store: object
    settings: Settings
    receiver: object | None = None
    scraper: object | None = None
    alerts: object | None = None
    extra: list = field(default_factory=list)  # objects with .stop(), stopped first (demo: load, replicas)
    _stopped: bool = False

    def start_receiver(self, scrape_targets=()):
        """Start the OTLP/HTTP receiver (and a scraper of ``scrape_targets`` feeding its writer)."""
        from infercost.commands.collector import receiver_config, start_collector

        self.receiver, self.scraper = start_collector(self.store, receiver_config(self.settings), scrape_targets,
                                                      min_free_disk_bytes=self.settings.min_free_disk_bytes)
        return self.receiver

    def start_review_schedule(self):
        """Start the weekly review schedule when ``INFERCOST_REVIEW_SCHEDULE`` is on; returns it or None."""
        from infercost.commands.review import scheduler_from_settings

        scheduler = scheduler_from_settings(self.store, self.settings)
        if scheduler is not None:
            scheduler.start()
            self.extra.append(scheduler)
        return scheduler

    def start_jobs(self):
        from schema import jobs

        jobs.start(self.store)

    def start_alerts(self, notifiers=None, config=None):
        from alerts.service import AlertService

        stats = (lambda: self.receiver.stats) if self.receiver is not None else None
        self.alerts = AlertService(self.store, config, receiver_stats=stats, notifiers=notifiers).start()
        return self.alerts

    def serve_dashboard(self, block: bool = True):
        from app.server import serve

        otlp = f"http://{self.settings.receiver_host}:{self.settings.receiver_port}/v1/traces"
        return serve(self.store, self.settings.dashboard_host, self.settings.dashboard_port, block=block,
                     otlp_endpoint=otlp)

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        # The scraper first (it polls the replicas in extra), the receiver last (it drains what came in).
        for part in [self.scraper, *reversed(self.extra), self.alerts, self.receiver]:
            if part is None:
                continue
            try:
                part.stop()
            except Exception:  # one part failing to stop must not keep the others running
                log.exception("stopping %r failed", part)
