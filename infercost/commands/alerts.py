"""``infercost alerts``: run the alert evaluator (cascading degradation, SLO burn rates, ingestion).

Evaluates every ``--interval`` (default 15 s) at the wall clock, records every state change in the
``alerts`` table and delivers firing/resolved alerts to the given notifiers. ``--once`` runs one
evaluation and exits: it resumes the lifecycle state the previous evaluation saved (``alerts_state``:
clear countdowns, no-data times, frozen baselines) and saves it again, so cron-style or replayed
``--once`` runs give the same lifecycle as the service. ``--at`` picks its time: moving forward
from the last evaluation it is a replay and is recorded; at or before a time already evaluated (the
live service's history) it is a dry run that writes and notifies nothing, so the real history never
gets a second copy of its firings (``--dry-run`` forces one at any time). Thresholds come from
the ``alerts:`` section of the fleet file (``INFERCOST_FLEET_FILE``, default ``fleet.yaml``) when it
exists; see alerts/config.py for every setting and its default.

``infercost up`` reuses :func:`load_alert_config` and :func:`build_notifiers`.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path

import click

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")


def parse_duration(text: str) -> float:
    """``"15s"``, ``"500ms"``, ``"2m"``, ``"1h"`` or a number of seconds -> seconds (> 0); ValueError otherwise."""
    match = _DURATION.match(str(text))
    if not match:
        raise ValueError(f"not a duration: {text!r} (use e.g. 15s, 500ms, 2m, 1h)")
    value = float(match.group(1)) * {"ms": 0.001, "s": 1, None: 1, "m": 60, "h": 3600}[match.group(2)]
    if value <= 0:
        raise ValueError(f"duration must be > 0, got {text!r}")
    return value


def load_alert_config(fleet_file: Path | None, **overrides):
    """AlertConfig from the ``alerts:`` section of ``fleet_file`` (if it exists) plus top-level overrides.

    Raises ValueError naming every bad setting.
    """
    from alerts.config import AlertConfig

    data: dict = {}
    if fleet_file is not None and Path(fleet_file).is_file():
        import yaml

        loaded = yaml.safe_load(Path(fleet_file).read_text()) or {}
        if not isinstance(loaded, dict):
            raise ValueError(f"{fleet_file}: expected a mapping at the top level")
        data = dict(loaded.get("alerts") or {})
    data.update({k: v for k, v in overrides.items() if v is not None})
    return AlertConfig.from_dict(data)


def build_notifiers(webhooks=(), slacks=(), alertmanagers=(), resend_s: float = 60.0):
    """Notifier list from URLs; raises ValueError for a bad URL."""
    from alerts.notifiers import Notifier

    return ([Notifier("webhook", u, resend_s) for u in webhooks] + [Notifier("slack", u, resend_s) for u in slacks]
            + [Notifier("alertmanager", u, resend_s) for u in alertmanagers])


def _echo_transitions(transitions) -> None:
    for t in transitions:
        a = t.alert
        cost = f" est. ${a.est_cost_usd:,.2f} ({a.cost_source})" if a.est_cost_usd is not None else ""
        replica = f" [{a.replica}]" if a.replica else ""
        click.echo(f"{t.at.isoformat(timespec='seconds')} {t.state.value.upper():9} {a.rule}{replica} "
                   f"({a.severity}): {a.summary}{cost}")


def _once(service, store, config, when: datetime | None, dry_run: bool) -> None:
    """One evaluation at ``when`` (now if None): recorded when it moves past the last evaluation,
    else (or with ``dry_run``) evaluated without writing or notifying anything."""
    from schema.queries import alerts as q
    from schema.store import StoreError

    when = when or datetime.now(timezone.utc)
    evaluator = service.evaluator
    done = [t for t in (evaluator.evaluated_at,) if t is not None]
    try:
        last = q.last_event_time(store, config.evaluator_id)
    except StoreError:
        last = None
    done += [last] if last is not None else []
    reached = max(done) if done else None
    if dry_run or (reached is not None and when <= reached):
        evaluator.record = False
        evaluator.dispatcher = None
        why = "--dry-run" if dry_run else f"already evaluated up to {reached.isoformat(timespec='seconds')}"
        click.echo(f"dry run at {when.isoformat(timespec='seconds')} ({why}): nothing is written or notified")
    _echo_transitions(service.step(when))
    active = list(evaluator.lifecycle.active.values())
    firing = sum(a.state.value == "firing" for a in active)
    click.echo(f"{len(active)} active alert(s), {firing} firing")
    for a in active:
        data = " [no data]" if a.no_data_since else ""
        click.echo(f"  {a.state.value:7} {a.rule}{' [' + a.replica + ']' if a.replica else ''}{data}: {a.summary}")


@click.command(name="alerts")
@click.option("--once", is_flag=True, help="Run one evaluation and exit.")
@click.option("--at", "at", default=None, help="With --once: evaluate at this UTC time (ISO 8601) instead of now; "
              "a time already evaluated is a dry run.")
@click.option("--dry-run", is_flag=True, help="With --once: evaluate and print, write and notify nothing.")
@click.option("--interval", default="15s", show_default=True, help="Evaluation period (e.g. 15s, 1m).")
@click.option("--webhook", multiple=True, help="Generic JSON webhook URL (repeatable).")
@click.option("--slack", multiple=True, help="Slack-compatible incoming webhook URL (repeatable).")
@click.option("--alertmanager", multiple=True, help="Alertmanager base URL; alerts go to /api/v2/alerts (repeatable).")
@click.option("--clickhouse-url", default=None, help="Store URL (default: INFERCOST_CLICKHOUSE_URL or the embedded store).")
@click.option("--database", default=None, help="ClickHouse database (default infercost).")
def command(once, at, dry_run, interval, webhook, slack, alertmanager, clickhouse_url, database):
    """Run the alert evaluator: record state changes in the alerts table and notify."""
    from alerts.service import AlertService
    from infercost.settings import load_settings
    from schema.migrate import MigrationError, migrate
    from schema.store import StoreError, connect

    try:
        settings = load_settings(clickhouse_url=clickhouse_url, database=database)
        interval_s = parse_duration(interval)
        config = load_alert_config(settings.fleet_file, interval_s=interval_s)
        notifiers = build_notifiers(webhook, slack, alertmanager, config.resend_s)
        when = None
        if at is not None:
            try:
                when = datetime.fromisoformat(at.replace("Z", "+00:00"))
            except ValueError:
                raise click.BadParameter(f"{at!r} is not an ISO 8601 time (e.g. 2026-12-01T12:00:00Z)",
                                         param_hint="'--at'") from None
            when = when if when.tzinfo else when.replace(tzinfo=timezone.utc)
        if (at is not None or dry_run) and not once:
            raise ValueError("--at and --dry-run go with --once")
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    try:
        store = connect(settings.store_url, settings.database)
        migrate(store, retention_days=settings.retention_days)
    except (StoreError, MigrationError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc

    service = AlertService(store, config, notifiers=notifiers)
    try:
        restored = service.restore()
        if restored:
            click.echo(f"resumed {restored} open alert(s)")
        if once:
            _once(service, store, config, when, dry_run)
            return
        click.echo(f"infercost alerts: evaluating every {interval_s:g}s; {len(notifiers)} notifier(s); Ctrl-C to stop")
        import time

        while True:
            started = time.monotonic()
            try:
                _echo_transitions(service.step())
            except StoreError as exc:
                click.echo(f"evaluation failed: {exc}", err=True)
            time.sleep(max(0.0, interval_s - (time.monotonic() - started)))
    except KeyboardInterrupt:
        pass
    finally:
        service.stop()
        store.close()
