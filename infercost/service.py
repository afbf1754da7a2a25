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
    """Connect to the store named by the settings and apply pending migrations. Returns the Store.

    A retention setting that differs from the stored tables' is reported, not applied: a process
    started without the setting must not shorten what ``infercost migrate`` set (it would drop data).
    """
    from schema.migrate import migrate, table_retention_days
    from schema.redact import redact
    from schema.store import connect

    store = connect(settings.store_url, settings.database)
    applied = migrate(store, settings.retention_days)
    if applied:
        echo(f"schema: applied {len(applied)} migration(s) in {redact(settings.store_url)}")
    stored = table_retention_days(store)
    if stored and stored != settings.retention_days:
        echo(f"warning: the store keeps raw spans and metrics {stored} days, the setting says "
             f"{settings.retention_days} (INFERCOST_RETENTION_DAYS): `infercost migrate` applies the setting")
    return store


def sync_fleet(store, fleet_file: Path, echo=print) -> bool:
    """Load ``fleet_file`` and sync prices and replicas into the store; False (with a warning) if absent.

    Raises click-friendly ValueError (from the fleet model) when the file is invalid.
    """
    from schema import fleet
    from schema.budgets import parse_budgets, sync_budgets

    if not Path(fleet_file).is_file():
        echo(f"warning: no fleet file at {fleet_file}: replicas are priced at the default GPU price "
             f"(copy fleet.example.yaml to fleet.yaml and edit it)")
        return False
    config = fleet.load_fleet(Path(fleet_file))
    budgets = parse_budgets(config.budgets)
    fleet.sync_fleet(store, config)
    sync_budgets(store, budgets)
    echo(f"fleet: {len(config.replicas)} replica(s), {len(config.gpu_types)} GPU type(s)"
         + (f", {len(budgets)} budget(s)" if budgets else "") + f" from {fleet_file}")
    return True


@dataclass
class Service:
    """The parts running in this process; :meth:`stop` stops them in reverse order, idempotently."""

    store: object
    settings: Settings
    receiver: object | None = None
    scraper: object | None = None
    alerts: object | None = None
    api: object | None = None
    extra: list = field(default_factory=list)  # objects with .stop(), stopped first (demo: load, replicas)
    _stopped: bool = False

    def start_receiver(self, scrape_targets=()):
        """Start the OTLP/HTTP receiver (and a scraper of ``scrape_targets`` feeding its writer)."""
        from infercost.commands.collector import receiver_config, start_collector

        check_ingest(self.settings.receiver_host, self.settings)
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
        """The cost jobs' schedule, one for ``infercost up`` and ``infercost demo``: the periodic chain
        (refreshable materialized views, every minute) and, on a background thread, the recompute of
        minutes whose data arrived after the live window plus the hourly rollups
        (:class:`schema.jobs.LateRecompute`, every minute; stopped with the service). Returns it."""
        from schema import jobs

        jobs.start(self.store)
        late = jobs.LateRecompute(self.store, retention_days=self.settings.retention_days).start()
        self.extra.append(late)
        return late

    def start_alerts(self, notifiers=None, config=None):
        from alerts.service import AlertService

        stats = (lambda: self.receiver.stats) if self.receiver is not None else None
        self.alerts = AlertService(self.store, config, receiver_stats=stats, notifiers=notifiers).start()
        return self.alerts

    def start_api(self):
        """Serve the read-only query API and the cost /metrics (``infercost.api``) and announce it in
        ``<data dir>/service.json`` so CLI commands read through it while this process owns the store."""
        from infercost.api import APIServer, QueryAPI
        from infercost.costmetrics import CostCollector, exposition

        check_exposure(self.settings.api_host, self.settings, "query API", token_only=True)
        from schema.redact import register_secret

        register_secret(self.settings.auth_token)
        collector = CostCollector(self.store)
        api = QueryAPI(self.store, token=self.settings.auth_token, metrics=lambda: exposition(collector))
        self.api = APIServer(api, self.settings.api_host, self.settings.api_port).start()
        write_service_file(self.settings, self.api.url)
        return self.api

    def serve_dashboard(self, block: bool = True):
        from app.server import serve

        otlp = f"http://{self.settings.receiver_host}:{self.settings.receiver_port}/v1/traces"
        check_exposure(self.settings.dashboard_host, self.settings, "dashboard")
        return serve(self.store, self.settings.dashboard_host, self.settings.dashboard_port, block=block,
                     otlp_endpoint=otlp, auth=dashboard_auth(self.settings))

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        # The scraper first (it polls the replicas in extra), the receiver last (it drains what came in).
        remove_service_file(self.settings)
        for part in [self.scraper, *reversed(self.extra), self.alerts, self.api, self.receiver]:
            if part is None:
                continue
            try:
                part.stop()
            except Exception:  # one part failing to stop must not keep the others running
                log.exception("stopping %r failed", part)


def write_service_file(settings: Settings, api_url: str) -> None:
    """Announce this process as the store's owner: ``{"pid", "api_url", "store", "started_at"}``."""
    import json
    import os
    from datetime import datetime, timezone

    from schema.redact import redact

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    settings.service_file.write_text(json.dumps({
        "pid": os.getpid(), "api_url": api_url, "store": redact(settings.store_url),
        "started_at": datetime.now(timezone.utc).isoformat()}, indent=2))


def remove_service_file(settings: Settings) -> None:
    import json
    import os

    try:
        if json.loads(settings.service_file.read_text()).get("pid") == os.getpid():
            settings.service_file.unlink()
    except (OSError, ValueError):
        pass


def is_loopback(host: str) -> bool:
    import ipaddress

    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, settings: Settings, what: str, token_only: bool = False) -> None:
    """Refuse to serve ``what`` on a non-loopback ``host`` without authentication (issue 14 item 7),
    unless ``allow_unauthenticated`` says so. Raises ValueError with what to set."""
    protected = bool(settings.auth_token) or (not token_only and (bool(settings.auth_basic) or oidc_configured()))
    if is_loopback(host) or protected or settings.allow_unauthenticated:
        return
    raise ValueError(
        f"refusing to serve the {what} on {host} (not loopback) without authentication: set INFERCOST_AUTH_TOKEN"
        + ("" if token_only else ", INFERCOST_AUTH_BASIC=user:password or Streamlit's [auth] OIDC settings")
        + ", or INFERCOST_ALLOW_UNAUTHENTICATED=true if a proxy in front authenticates")


def check_ingest(host: str, settings: Settings) -> None:
    """Refuse to receive spans on a non-loopback ``host`` without an ingest token (anyone who can send
    spans sets the names the dashboard shows and the work it charges), unless ``allow_unauthenticated``
    says a proxy in front authenticates. Raises ValueError with what to set."""
    if is_loopback(host) or settings.ingest_token or settings.allow_unauthenticated:
        return
    raise ValueError(f"refusing to receive spans on {host} (not loopback) without a token: set INFERCOST_INGEST_TOKEN "
                     "(producers send 'Authorization: Bearer <token>'), or INFERCOST_ALLOW_UNAUTHENTICATED=true if "
                     "a proxy in front authenticates")


def oidc_configured() -> bool:
    """True when Streamlit's OIDC login is configured (an ``[auth]`` section in ``.streamlit/secrets.toml``)."""
    from app.auth import oidc_configured as configured

    return configured()


def dashboard_auth(settings: Settings):
    """The dashboard's :class:`app.auth.AuthConfig` from the settings."""
    from app.auth import AuthConfig

    return AuthConfig(token=settings.auth_token, basic=settings.auth_basic)
