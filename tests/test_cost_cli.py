"""``infercost cost``: argument parsing, the summary table, and one run in its own process/store."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import click
import pandas as pd
import pytest

from infercost.commands.cost import parse_duration, render_summary
from schema.queries.cost import COLUMNS

ROOT = Path(__file__).resolve().parents[1]


def test_parse_duration():
    assert parse_duration("24h") == timedelta(hours=24)
    assert parse_duration("30d") == timedelta(days=30)
    assert parse_duration("90m") == timedelta(minutes=90)
    assert parse_duration("1.5h") == timedelta(minutes=90)
    for bad in ("", "24", "h", "-1h", "0d", "3y"):
        with pytest.raises(click.BadParameter):
            parse_duration(bad)


def test_render_summary_has_units_and_dashes_for_undefined():
    row = {name: 0 for name in COLUMNS["cost_period_summary"]}
    row.update(grp="chat", spend_usd=0.18, cpst_usd=0.09, tokens=2400, cost_per_1m_tokens_usd=75.0)
    other = dict(row, grp="", cpst_usd=float("nan"))
    text = render_summary(pd.DataFrame([row, other]), "task_type")
    lines = text.splitlines()
    assert lines[0].split() == ["task_type", "chat", "(none)"]
    assert any(line.startswith("CPST $/task") and line.split()[-2:] == ["0.0900", "-"] for line in lines)
    assert any(line.startswith("$/1M tokens") and "75.0000" in line for line in lines)
    assert any(line.startswith("tokens") and "2,400" in line for line in lines)
    assert render_summary(pd.DataFrame(), None) == "(no data in the period)"


def _run(args, tmp_path):
    env = dict(os.environ, INFERCOST_DATA_DIR=str(tmp_path / "data"),
               INFERCOST_CLICKHOUSE_URL=f"chdb://{tmp_path / 'data' / 'clickhouse'}")
    return subprocess.run([sys.executable, "-m", "infercost.cli", "cost", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


def test_cost_command_end_to_end_in_its_own_store(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpu_types:\n  H100:\n    prices:\n      - {usd_per_gpu_hour: -3}\n")
    result = _run(["--fleet", str(bad)], tmp_path)
    assert result.returncode == 1
    assert "bad.yaml:4: gpu_types.H100.prices.0.usd_per_gpu_hour" in result.stderr
    # the budgets of the fleet file are checked (and synced) by this command too
    negative = tmp_path / "negative_budget.yaml"
    negative.write_text((ROOT / "fleet.example.yaml").read_text().replace("usd_per_day: 100", "usd_per_day: -100"))
    result = _run(["--fleet", str(negative)], tmp_path)
    assert result.returncode == 1
    assert result.stderr.strip() == (f"Error: {negative}: invalid budgets: budgets.tenant.acme.usd_per_day must be a "
                                     "number > 0, got -100")

    # A read command never creates an empty store by accident; it says what to run.
    result = _run(["--since", "2h"], tmp_path)
    assert result.returncode == 1 and "no store at" in result.stderr and "nothing was created" in result.stderr
    assert not (tmp_path / "data" / "clickhouse").exists()
    env = dict(os.environ, INFERCOST_DATA_DIR=str(tmp_path / "data"),
               INFERCOST_CLICKHOUSE_URL=f"chdb://{tmp_path / 'data' / 'clickhouse'}")
    subprocess.run([sys.executable, "-m", "infercost.cli", "migrate"], cwd=tmp_path, env=env, check=True,
                   capture_output=True, timeout=300)

    result = _run(["--since", "2h", "--recompute", "--fleet", str(ROOT / "fleet.example.yaml")], tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"store: {tmp_path / 'data' / 'clickhouse'}" in result.stderr
    assert "synced" in result.stderr and "recomputed" in result.stderr
    assert ", 2 budget(s)" in result.stderr  # acme 100/day, research_agent 1500/week
    assert result.stdout.splitlines()[0].startswith("cost summary ")
    assert "CPST $/task" in result.stdout and "spend $" in result.stdout
