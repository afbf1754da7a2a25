"""``infercost load`` and ``infercost gateway`` command lines: argument checks, dry run, virtual time."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from infercost.cli import main


def test_load_dry_run_summarises_plans(traces_dir):
    result = CliRunner().invoke(main, ["load", "--dry-run", "--traces-dir", str(traces_dir), "--duration", "60",
                                       "--mix", "chat=1"])
    assert result.exit_code == 0, result.output
    # chat only: one task per trace row in the first 60 s of the Azure trace
    import numpy as np

    from serving.workloads import load_trace

    n = int(np.sum(load_trace("azure", traces_dir).arrival_s < 60))
    assert f"{n} tasks (chat {n}), {n} calls from the azure trace over 60 s" in result.output


def test_load_rejects_bad_mix(traces_dir):
    result = CliRunner().invoke(main, ["load", "--dry-run", "--mix", "chat=lots"])
    assert result.exit_code != 0 and "expected TYPE=SHARE" in result.output
    result = CliRunner().invoke(main, ["load", "--dry-run", "--mix", "poetry=1", "--data-dir", str(traces_dir)])
    assert result.exit_code != 0 and "unknown task type 'poetry'" in result.output


def test_load_virtual_time_runs_the_emulator_simulator(traces_dir):
    pytest.importorskip("serving.emulator.fleet_sim", reason="the virtual-time simulator is not in the tree yet")
    result = CliRunner().invoke(main, ["load", "--virtual", "--no-telemetry", "--data-dir", str(traces_dir),
                                       "--duration", "30", "--mix", "chat=1", "--replicas", "2"])
    assert result.exit_code == 0, result.output
    assert "virtual run: tasks {'success': " in result.output


def test_gateway_rejects_bad_upstreams_and_caps():
    result = CliRunner().invoke(main, ["gateway", "--upstream", "localhost:8000"])
    assert result.exit_code != 0 and "expected [replica_id=]http(s)://host:port" in result.output
    result = CliRunner().invoke(main, ["gateway", "--upstream", "http://127.0.0.1:1", "--queue-cap", "interactive"])
    assert result.exit_code != 0 and "expected PRIORITY=N" in result.output
    result = CliRunner().invoke(main, ["gateway", "--upstream", "a=http://127.0.0.1:1", "--upstream", "a=http://127.0.0.1:2"])
    assert result.exit_code != 0 and "replica ids must be unique" in result.output
