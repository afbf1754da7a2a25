"""AlertService (background thread, idempotent stop) and the ``infercost alerts`` command."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta

from click.testing import CliRunner

from alerts.config import AlertConfig
from alerts.service import AlertService
from infercost.commands.alerts import build_notifiers, load_alert_config, parse_duration
from tests.alerts_helpers import T0, Receiver, seed_cascade_timeline

import pytest


def test_service_thread_steps_and_stops_idempotently(store):
    seed_cascade_timeline(store, T0)
    ticks = iter(T0 + timedelta(minutes=m) for m in range(1, 10_000))
    receiver = Receiver()
    config = AlertConfig(interval_s=0.01)
    service = AlertService(store, config, notifiers=build_notifiers(webhooks=[receiver.url]),
                           clock=lambda: next(ticks))
    try:
        service.start()
        service.start()  # a second start does nothing
        names = [t.name for t in threading.enumerate()]
        assert names.count("infercost-alerts") == 1
        deadline = time.monotonic() + 60
        while service.evaluator.stats.steps < 12 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        service.stop()
        service.stop()
        receiver.close()
    assert not service.running
    assert "infercost-alerts" not in [t.name for t in threading.enumerate()]
    # minutes 1..12 of the hand-made cascade: the cascade fired at minute 9 and was delivered
    assert service.evaluator.stats.steps >= 12
    rules = [a["rule"] for body in receiver.bodies() for a in body["alerts"]]
    assert "cascading_degradation" in rules


def test_receiver_stats_feed_the_ingestion_rule(store):
    class Stats:
        rejected, spooled_bytes, store_available = 0, 0, True

    stats = Stats()
    service = AlertService(store, AlertConfig(), receiver_stats=lambda: stats)
    assert service.step(T0) == []
    stats.rejected, stats.store_available = 5, False
    changes = {(t.alert.key, t.state.value) for t in service.step(T0 + timedelta(minutes=1))}
    # ingestion for_s is 60 s: both start pending, then fire a minute later
    assert changes == {("rejected", "pending"), ("store_unavailable", "pending")}
    changes = {(t.alert.key, t.state.value) for t in service.step(T0 + timedelta(minutes=2))}
    assert changes == {("rejected", "cancelled"), ("store_unavailable", "firing")}


def test_cli_once_and_config(tmp_path, monkeypatch):
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("alerts:\n  degradation:\n    ratio: 2.0\n  resolve_after_s: 240\n")
    config = load_alert_config(fleet, interval_s=5.0)
    assert (config.degradation.ratio, config.resolve_after_s, config.interval_s) == (2.0, 240, 5.0)
    fleet.write_text("alerts:\n  degradation:\n    ratoi: 2.0\n")
    with pytest.raises(ValueError, match="unknown setting 'degradation.ratoi'"):
        load_alert_config(fleet)
    assert parse_duration("15s") == 15 and parse_duration("2m") == 120 and parse_duration("500ms") == 0.5
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration("soon")

    monkeypatch.setenv("INFERCOST_FLEET_FILE", str(tmp_path / "absent.yaml"))
    database = f"t_cli_{uuid.uuid4().hex[:8]}"
    runner = CliRunner()
    result = runner.invoke(__import__("infercost.commands.alerts", fromlist=["command"]).command,
                           ["--once", "--at", "2026-11-02T12:00:00Z", "--clickhouse-url", "chdb://memory",
                            "--database", database])
    assert result.exit_code == 0, result.output
    assert "0 active alert(s)" in result.output
    bad = runner.invoke(__import__("infercost.commands.alerts", fromlist=["command"]).command,
                        ["--once", "--webhook", "ftp://x", "--clickhouse-url", "chdb://memory", "--database", database])
    assert bad.exit_code != 0 and "must start with http" in bad.output


def test_prometheus_metrics_of_the_service(store):
    from prometheus_client import generate_latest

    from alerts.metrics import register

    seed_cascade_timeline(store, T0)
    service = AlertService(store, AlertConfig())
    for minute in range(1, 10):
        service.step(T0 + timedelta(minutes=minute))
    text = generate_latest(register(service)).decode()
    assert "infercost_alert_evaluations_total 9.0" in text
    assert 'infercost_alerts_active{rule="cascading_degradation",state="firing"} 1.0' in text
    assert 'infercost_alert_notifications_total{result="sent"} 0.0' in text


def test_cli_once_replays_forward_and_dry_runs_the_past(store, tmp_path, monkeypatch):
    """``--once --at`` moving past the last evaluation is recorded (a replay); at a time already
    evaluated it is a dry run: the real history gets no second copy of its firings."""
    from infercost.commands.alerts import command

    monkeypatch.setenv("INFERCOST_FLEET_FILE", str(tmp_path / "absent.yaml"))
    seed_cascade_timeline(store, T0)
    args = ["--clickhouse-url", "chdb://memory", "--database", store.database, "--once", "--at"]
    runner = CliRunner()
    for minute in range(1, 10):
        result = runner.invoke(command, args + [(T0 + timedelta(minutes=minute)).isoformat()])
        assert result.exit_code == 0, result.output
    assert "FIRING    cascading_degradation [r2]" in result.output and "dry run" not in result.output
    from schema.queries import alerts as q

    rows = len(q.recent_alerts(store, T0, T0 + timedelta(hours=1)))
    again = runner.invoke(command, args + [(T0 + timedelta(minutes=9)).isoformat()])
    assert again.exit_code == 0 and "dry run at 2026-11-02T12:09:00+00:00 (already evaluated up to" in again.output
    assert "FIRING" not in again.output  # the cascade already fires: nothing changes, nothing written
    assert len(q.recent_alerts(store, T0, T0 + timedelta(hours=1))) == rows
    assert q.load_state(store, "infercost")[0] == T0 + timedelta(minutes=9)
    forced = runner.invoke(command, args + [(T0 + timedelta(minutes=10)).isoformat(), "--dry-run"])
    assert "--dry-run" in forced.output and len(q.recent_alerts(store, T0, T0 + timedelta(hours=1))) == rows
    bad = runner.invoke(command, ["--at", T0.isoformat(), "--clickhouse-url", "chdb://memory",
                                  "--database", store.database])
    assert bad.exit_code != 0 and "go with --once" in bad.output
