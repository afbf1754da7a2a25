"""``infercost emulate``: argument parsing and a virtual-time dry run."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from infercost.commands.emulate import command, parse_duration, parse_mix


def test_parse_duration_and_mix():
    assert parse_duration("90") == 90 and parse_duration("15m") == 900 and parse_duration("7d") == 7 * 86400
    with pytest.raises(click.BadParameter, match="duration"):
        parse_duration("soon")
    assert parse_mix("chat=0.5,copilot=0.5") == {"chat": 0.5, "copilot": 0.5}
    with pytest.raises(click.BadParameter, match="expected TYPE=SHARE"):
        parse_mix("chat")


def test_virtual_dry_run_prints_the_summary():
    res = CliRunner().invoke(command, ["--virtual", "--duration", "1m", "--replicas", "2", "--to", "none",
                                       "--mix", "chat=1"])
    assert res.exit_code == 0, res.output
    assert "simulating 60 s of 2 x h100-llama-3.1-8b on the azure trace" in res.output
    assert "tasks {'success':" in res.output and "engine requests" in res.output


def test_bad_fault_timeline_is_reported(tmp_path):
    bad = tmp_path / "faults.json"
    bad.write_text('[{"at_s": 1, "replica": "replica-0", "kind": "slowdown", "value": 0}]')
    res = CliRunner().invoke(command, ["--virtual", "--duration", "1m", "--to", "none", "--faults", str(bad)])
    assert res.exit_code != 0
    assert "slowdown needs a factor > 0" in res.output
