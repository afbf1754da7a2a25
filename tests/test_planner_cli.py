"""``infercost plan`` end to end in its own process and store: bad input, an empty store, a real run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SEED = """
import sys
sys.path[:0] = [{root!r}, {tests!r}]
from planner_helpers import measured_store
from schema.migrate import migrate
from schema.store import connect
from serving.emulator.fleet_sim import ReplicaSpec
from serving.plans import CallPlan, StepPlan, TaskPlan
store = connect({url!r}, "infercost")
migrate(store, retention_days=3650)
plans = [TaskPlan(f"t{{i}}", "chat", "acme", 20.0 * i + 1, (StepPlan("respond", (CallPlan(500 + 13 * i, 60 + 7 * i),)),),
                  slo_ttft_ms=2000, slo_e2e_ms=60000) for i in range(60)]
measured_store(store, plans, [ReplicaSpec("r0"), ReplicaSpec("r1")])
"""


def _env(tmp_path):
    # The seeded period is fixed (2026-11-02): a default 30-day TTL would drop it once that is a month ago.
    return dict(os.environ, INFERCOST_DATA_DIR=str(tmp_path / "data"), INFERCOST_RETENTION_DAYS="3650",
                INFERCOST_CLICKHOUSE_URL=f"chdb://{tmp_path / 'data' / 'clickhouse'}")


def _plan(args, tmp_path):
    return subprocess.run([sys.executable, "-m", "infercost.cli", "plan", *args], cwd=tmp_path, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=600)


def test_plan_command_errors_and_a_run(tmp_path):
    bad = tmp_path / "plan.yaml"
    bad.write_text("search:\n  max_candidates: 0\n")
    result = _plan(["--candidates", str(bad)], tmp_path)
    assert result.returncode == 1 and "plan.yaml:2: search.max_candidates" in result.stderr

    result = _plan(["--since", "1h"], tmp_path)
    assert result.returncode == 1 and "no task started" in result.stderr

    seed = SEED.format(root=str(ROOT), tests=str(ROOT / "tests"), url=f"chdb://{tmp_path / 'data' / 'clickhouse'}")
    done = subprocess.run([sys.executable, "-c", seed], cwd=tmp_path, env=_env(tmp_path), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    result = _plan(["--since", "1h", "--until", "2026-11-02T11:00:00Z", "--no-search", "--max-candidates", "2",
                    "--workers", "1"], tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.index("Backtest") < out.index("Recommendation:")  # the backtest is printed first
    assert "=> PASSED" in out and "CPST      measured $" in out
    assert "current" in out and "lever-avoid-affinity" in out and "Assumptions:" in out
    assert "Search: search disabled; 2 candidates in" in out
    assert "stored as planner run" in result.stderr and "planning" in result.stderr  # the progress bar
