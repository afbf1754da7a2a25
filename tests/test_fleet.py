"""fleet.yaml: validation with line numbers, defaults, sync into the store."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from schema.fleet import Fleet, FleetError, load_fleet, parse_fleet, sync_fleet
from tests.test_cost_support import _module_store, cstore  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]


def test_example_file_is_valid_and_documents_two_gpu_profiles():
    fleet = load_fleet(ROOT / "fleet.example.yaml")
    assert set(fleet.gpu_types) == {"H100", "A100"}
    h100 = fleet.gpu_types["H100"].prices
    assert [p.valid_from for p in h100] == [datetime(2025, 1, 1), datetime(2026, 6, 1)]
    assert fleet.replicas["a100-0"].gpu_count == 2
    assert (fleet.allocation.w_prefill, fleet.allocation.w_decode) == (0.25, 1.0)
    assert fleet.slos["chat"].ttft_ms == 2000
    # every field of the model is present in the example (it documents all of them)
    text = (ROOT / "fleet.example.yaml").read_text()
    for name in ("gpu_types", "prices", "usd_per_gpu_hour", "valid_from", "replicas", "gpu_type", "gpu_count",
                 "unknown_replica", "allocation", "w_prefill", "w_decode", "slos", "ttft_ms", "e2e_ms",
                 "abandon_timeout_s", "jobs", "window_s", "max_call_s", "task_lookback_s"):
        assert f"{name}:" in text, name


def test_every_problem_is_reported_with_its_line():
    text = """gpu_types:
  H100:
    prices:
      - {usd_per_gpu_hour: -1, valid_from: 2025-01-01}
replicas:
  r1: {gpu_type: B200, gpu_count: 1}
  r2: {gpu_type: H100, gpu_count: 0}
allocation: {w_prefill: 0.25, w_decode: 1.0, w_other: 3}
abandon_timeout_s: 7000
"""
    with pytest.raises(FleetError) as info:
        parse_fleet(text, "fleet.yaml")
    message = str(info.value)
    assert "fleet.yaml:4: gpu_types.H100.prices.0.usd_per_gpu_hour: Input should be greater than or equal to 0" \
        in message
    assert "fleet.yaml:7: replicas.r2.gpu_count:" in message
    assert "fleet.yaml:8: allocation.w_other: Extra inputs are not permitted" in message
    # cross-field problems are checked once the fields themselves are valid
    fixed = text.replace("-1,", "3.6,").replace("gpu_count: 0", "gpu_count: 1").replace(", w_other: 3", "")
    with pytest.raises(FleetError) as info:
        parse_fleet(fixed, "fleet.yaml")
    # each on the line of its own key, not the document's first line
    assert "fleet.yaml:6: replicas.r1.gpu_type: 'B200' is not one of gpu_types ['H100']" in str(info.value)
    assert "fleet.yaml:9: abandon_timeout_s: 7000 must be at most jobs.window_s - 600 (6600)" in str(info.value)


def test_yaml_syntax_and_shape_errors():
    with pytest.raises(FleetError, match=r"fleet.yaml:2: not valid YAML: mapping values are not allowed"):
        parse_fleet("gpu_types:\n  H100: a: b\n", "fleet.yaml")
    with pytest.raises(FleetError, match="empty"):
        parse_fleet("", "fleet.yaml")
    with pytest.raises(FleetError, match="top level must be a mapping"):
        parse_fleet("- a\n- b\n", "fleet.yaml")
    with pytest.raises(FleetError, match="cannot read fleet config"):
        load_fleet("/nonexistent/fleet.yaml")
    with pytest.raises(FleetError, match="same valid_from"):
        parse_fleet("gpu_types:\n  H100:\n    prices:\n      - {usd_per_gpu_hour: 1, valid_from: 2025-01-01}\n"
                    "      - {usd_per_gpu_hour: 2, valid_from: 2025-01-01}\n")


def test_defaults_match_the_migration_defaults(cstore):
    fleet = parse_fleet("gpu_types:\n  H100:\n    prices:\n      - {usd_per_gpu_hour: 3}\n")
    assert fleet.unknown_replica.gpu_type == "H100" and fleet.abandon_timeout_s == 1800
    migration_row = cstore.query(
        "SELECT w_prefill, w_decode, abandon_timeout_s, default_gpu_type, default_gpu_count, job_window_s, "
        "max_call_s, task_lookback_s FROM cost_settings ORDER BY synced_at LIMIT 1", tag="test").result_rows[0]
    assert tuple(migration_row) == (fleet.allocation.w_prefill, fleet.allocation.w_decode, fleet.abandon_timeout_s,
                                    fleet.unknown_replica.gpu_type, fleet.unknown_replica.gpu_count,
                                    fleet.jobs.window_s, fleet.jobs.max_call_s, fleet.jobs.task_lookback_s)


def test_sync_replaces_the_fleet_tables(cstore):
    fleet = load_fleet(ROOT / "fleet.example.yaml")
    written = sync_fleet(cstore, fleet)
    assert written == {"gpu_prices": 3, "replicas": 3, "task_slos": 3, "cost_settings": 1}
    smaller = Fleet.model_validate({"gpu_types": {"A100": {"prices": [{"usd_per_gpu_hour": 2.0}]}},
                                    "replicas": {"x": {"gpu_type": "A100"}},
                                    "allocation": {"w_prefill": 0.5, "w_decode": 2.0}})
    sync_fleet(cstore, smaller)
    prices = cstore.query("SELECT gpu_type, valid_from, usd_per_gpu_hour FROM gpu_prices", tag="test").result_rows
    assert prices == [("A100", datetime(1970, 1, 1), 2.0)]
    assert cstore.query("SELECT replica, gpu_type, gpu_count FROM replicas", tag="test").result_rows == [("x", "A100", 1)]
    assert cstore.scalar("SELECT count() FROM task_slos", tag="test") == 0
    weights = cstore.query("SELECT argMax(w_prefill, synced_at), argMax(w_decode, synced_at) FROM cost_settings",
                           tag="test").result_rows[0]
    assert tuple(weights) == (0.5, 2.0)


def test_fleet_file_carries_the_alert_settings(tmp_path):
    """One fleet.yaml for prices and alert rules: the cost model accepts the `alerts:` section and
    the alert service reads it."""
    from infercost.commands.alerts import load_alert_config
    from schema.fleet import load_fleet

    path = tmp_path / "fleet.yaml"
    path.write_text("gpu_types: {H100: {prices: [{usd_per_gpu_hour: 3.0}]}}\n"
                    "alerts: {saturation: {max_running: 16}}\n")
    assert load_fleet(path).alerts == {"saturation": {"max_running": 16}}
    assert load_alert_config(path).saturation.max_running == 16


def test_example_fleet_file_is_valid():
    from pathlib import Path

    from infercost.commands.alerts import load_alert_config
    from schema.fleet import load_fleet

    example = Path(__file__).resolve().parents[1] / "fleet.example.yaml"
    fleet = load_fleet(example)
    assert fleet.gpu_types["H100"].prices[0].usd_per_gpu_hour == 3.60
    assert load_alert_config(example).saturation.max_running == 256
