"""The short demo end to end, as CI runs it: `infercost demo --duration 2m --backfill-days 1`.

Runs the real command in a subprocess (it owns its own embedded store), checks the dashboard
answers on its port while it runs, and reads the final summary it writes: every table has rows, a
cascading-degradation alert fired and names the slowed replica.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_short_demo_fills_every_table_and_catches_the_cascade(tmp_path):
    """Also issue 17: SIGTERM stops the demo with its summary (fault 7); while it runs, its query API
    answers and `infercost cost` reads through it instead of failing on the locked store (fault 3)."""
    dashboard_port, receiver_port, api_port = _free_port(), _free_port(), _free_port()
    summary_path = tmp_path / "summary.json"
    env = {**os.environ, "INFERCOST_DATA_DIR": str(tmp_path / "data"), "NO_PROXY": "127.0.0.1,localhost",
           "INFERCOST_API_PORT": str(api_port)}
    env.pop("INFERCOST_CLICKHOUSE_URL", None)
    cmd = [sys.executable, "-m", "infercost.cli", "demo", "--duration", "10m", "--backfill-days", "1",
           "--incident-after", "40s",
           "--port", str(dashboard_port), "--receiver-port", str(receiver_port), "--summary-json", str(summary_path)]
    log = (tmp_path / "demo.log").open("w")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    answered, cli_output, live_since = False, "", None
    try:
        deadline = time.monotonic() + 800
        while proc.poll() is None and time.monotonic() < deadline:
            if not answered:
                try:
                    answered = httpx.get(f"http://127.0.0.1:{dashboard_port}/_stcore/health", timeout=2).status_code == 200
                except httpx.HTTPError:
                    pass
                if answered:
                    live_since = time.monotonic()
            elif not cli_output:
                cli = subprocess.run([sys.executable, "-m", "infercost.cli", "cost", "--since", "2d"], cwd=tmp_path,
                                     env=env, capture_output=True, text=True, timeout=300)
                assert cli.returncode == 0, cli.stderr
                cli_output = cli.stderr + cli.stdout
            elif time.monotonic() - live_since > 120:
                proc.send_signal(signal.SIGTERM)  # a service manager stopping it
                break
            time.sleep(2)
        assert proc.wait(timeout=120) == 0, (tmp_path / "demo.log").read_text()[-4000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    output = (tmp_path / "demo.log").read_text()
    assert answered, "the dashboard never answered on its port"
    assert "reading through its query API" in cli_output and "CPST $/task" in cli_output
    text = summary_path.read_text()
    assert "NaN" not in text
    summary = json.loads(text)
    empty = [table for table, rows in summary["tables"].items() if rows == 0]
    assert not empty, f"tables without rows: {empty}"
    cascades = [a for a in summary["alerts"] if a["rule"] == "cascading_degradation"]
    assert cascades, f"no cascade alert; alerts: {[(a['rule'], a['replica']) for a in summary['alerts']]}"
    assert {a["replica"] for a in cascades} == {"replica-2"}
    assert "cost per successful task" in output and "alerts fired" in output
    assert not (tmp_path / "data" / "service.json").exists()  # the owner withdrew its announcement


def test_banner_promises_a_live_degradation_alert_only_after_the_baseline_warmup():
    """The live incident raises a replica-degradation alert only if replica-2 has its own baseline by
    then (infercost.demo.BASELINE_WARMUP_S): the default leaves it; an earlier incident says so."""
    from infercost.demo import BASELINE_WARMUP_S, DemoOptions, incident_expectation

    assert DemoOptions().incident_after_s >= BASELINE_WARMUP_S
    assert "expect a replica-degradation alert 2-4 min after it starts" in incident_expectation(DemoOptions())
    early = incident_expectation(DemoOptions(incident_after_s=180))
    assert "no degradation alert expected" in early and "expect a replica-degradation" not in early


def test_the_backfill_progress_bar_is_sized_by_the_tasks_it_will_simulate():
    """The demo's 1-day backfill plan (its base scale with the incident's peak on top): the estimate that
    sizes the progress bar is within 5 % of the tasks the hourly plans hold."""
    from datetime import datetime, timezone

    from infercost import demo
    from infercost.backfill import estimate_tasks, hourly_plans

    plan, _ = demo.backfill_plan(demo.DemoOptions(backfill_days=1), datetime(2026, 12, 3, 6, 0, tzinfo=timezone.utc))
    assert plan.surges  # 05:20 UTC is off-peak: the incident's extra load is part of the plan
    simulated = sum(1 for _ in hourly_plans(plan))
    assert simulated > 1000
    assert abs(estimate_tasks(plan) - simulated) <= 0.05 * simulated


def test_demo_runs_the_cost_schedule_of_infercost_up(tmp_path, monkeypatch):
    """`infercost demo` starts the cost jobs with the schedule `infercost up` runs (Service.start_jobs:
    the periodic chain and the late-data recompute every minute), so late spans reach the demo's
    figures too. The demo runs up to that point on stand-ins for its store, replicas, gateway and load."""
    from types import SimpleNamespace
    from unittest import mock

    from infercost import demo, service
    from infercost.settings import Settings

    class Started(Exception):
        pass

    def start_jobs(self):
        schedules.append(self)
        raise Started

    def not_started(self, *a, **k):
        raise AssertionError("the demo went on without starting the cost schedule")

    schedules: list = []
    monkeypatch.setattr(service.Service, "start_jobs", start_jobs)
    for later in ("start_alerts", "start_api"):
        monkeypatch.setattr(service.Service, later, not_started)
    monkeypatch.setattr("app.server.serve", not_started)
    monkeypatch.setattr(service.Service, "start_receiver", lambda self, *a, **k: mock.MagicMock(port=0))
    monkeypatch.setattr(demo, "open_store", lambda *a, **k: mock.MagicMock())
    monkeypatch.setattr(demo, "sync_fleet", lambda *a, **k: True)
    monkeypatch.setattr(demo, "live_plans", lambda *a, **k: [])
    monkeypatch.setattr(demo, "LoadThread", mock.MagicMock())
    monkeypatch.setattr("serving.emulator.live.start_replicas", lambda n, profile, ids=(), **k: [
        SimpleNamespace(replica_id=rid, url=f"http://{rid}") for rid in ids])
    for name in ("collectors.scraper.Scraper", "serving.gateway.Gateway", "serving.gateway.server.ServerThread",
                 "serving.sdk.telemetry.make_tracer_provider"):
        monkeypatch.setattr(name, mock.MagicMock())
    settings = Settings(data_dir=tmp_path / "data", _env_file=None)
    with pytest.raises(Started):
        demo.run_demo(settings, demo.DemoOptions(duration_s=1, backfill_days=0), echo=lambda *a: None)
    assert len(schedules) == 1


def test_the_service_schedule_is_the_chain_and_the_late_recompute(monkeypatch, tmp_path):
    """Service.start_jobs: the periodic chain started, and LateRecompute running until the service stops."""
    from unittest import mock

    from infercost.service import Service
    from infercost.settings import Settings
    from schema import jobs

    started = []
    monkeypatch.setattr(jobs, "start", lambda store: started.append(store))
    late = mock.MagicMock()
    monkeypatch.setattr(jobs, "LateRecompute", late)
    store = object()
    svc = Service(store, Settings(data_dir=tmp_path, retention_days=9, _env_file=None))
    assert svc.start_jobs() is late.return_value.start.return_value
    assert started == [store] and late.call_args == mock.call(store, retention_days=9)
    svc.stop()
    late.return_value.start.return_value.stop.assert_called_once()
