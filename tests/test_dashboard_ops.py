"""Live-operations named queries (schema/queries/ops.py) on a hand-checkable store.

The figures are computed by hand from tests/dashboard_seed.tiny_scenario's docstring.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pandas as pd
import pytest

from collectors.ingest import insert_metric_rows, insert_trace_payloads
from collectors.scraper import ScrapeTarget, parse_metrics_text
from conftest import drop_store, new_store
from dashboard_seed import MODEL, stop_periodic_jobs, tiny_scenario
from schema.queries import ops
from vllm_captured import captured_metrics_text, captured_spans

UTC = timezone.utc


@pytest.fixture(scope="module")
def tiny():
    store = new_store()  # migrating costs seconds: one store for the module; the tests only read it
    stop_periodic_jobs(store)
    window = tiny_scenario(store)
    yield store, window
    drop_store(store)


def test_fleet_tiles_hand_computed(tiny):
    store, w = tiny
    t = ops.fleet_tiles(store, w["start"], w["end"])
    c = t.current
    assert c.requests == 4
    assert c.requests_per_s == pytest.approx(4 / 300)
    assert c.output_tokens_per_s == pytest.approx(42 / 300)
    # nearest-rank quantiles of TTFT [0.1, 0.2, 0.4, 0.8]
    assert (c.ttft_p50_s, c.ttft_p95_s, c.ttft_p99_s) == (0.4, 0.8, 0.8)
    # per-request ITL: a 0.9/9 = 0.1, b 1.8/20 = 0.09, c 2.6/10 = 0.26 (d has no tokens)
    assert c.itl_p95_s == pytest.approx(0.26)
    assert c.e2e_p95_s == pytest.approx(3.0)
    # gateway attempts: 5, two failed (503 and the aborted stream)
    assert (c.error_rate, c.error_source) == (pytest.approx(0.4), "gateway")
    # 1 client retry + 1 hidden gateway retry over 4 client attempts + 1 hidden retry
    assert c.retry_ratio == pytest.approx(2 / 5)
    assert c.queue_depth == 4.0 and c.running == 3.0
    assert c.kv_cache_usage == pytest.approx(0.375)
    # t1 (1.5 s <= 5 s) within SLO, t2 (9 s) succeeded late, t3 failed: 1 task in 300 s = 12 / h
    assert (c.tasks_ended, c.tasks_succeeded, c.tasks_within_slo) == (3, 2, 1)
    assert c.goodput_per_h == pytest.approx(12.0)
    p = t.previous
    assert p.requests == 1 and p.ttft_p50_s == 0.05 and p.error_source == "engine" and p.error_rate == 0.0
    assert p.queue_depth == 1.0 and p.running is None and p.goodput_per_h is None
    assert t.delta("ttft_p50_s") == pytest.approx(0.35)
    assert t.delta("running") is None


def test_tenant_filter_reaches_engine_rows_through_parents(tiny):
    store, w = tiny
    acme = ops.fleet_tiles(store, w["start"], w["end"], {"tenant": "acme"}).current
    assert acme.requests == 4  # every engine row's parent gateway attempt is acme's
    other = ops.fleet_tiles(store, w["start"], w["end"], {"tenant": "globex"}).current
    assert other.requests == 0 and other.requests_per_s is None and other.error_rate is None
    assert ops.fleet_tiles(store, w["start"], w["end"], {"model": "nope"}).current.requests == 0


def test_replica_health_flags_the_erroring_replica(tiny):
    store, w = tiny
    h = ops.replica_health(store, w["start"], w["end"]).set_index("replica")
    assert list(h.index) == ["r1", "r2"]
    assert h.loc["r1", "requests"] == 2 and h.loc["r1", "output_tokens"] == 31
    assert h.loc["r1", "ttft_p95_s"] == pytest.approx(0.2) and h.loc["r2", "ttft_p95_s"] == pytest.approx(0.8)
    # r2: 3 gateway attempts, 2 failed
    assert h.loc["r2", "error_rate"] == pytest.approx(2 / 3) and h.loc["r1", "error_rate"] == 0.0
    # fleet median of TTFT p95s = (0.2 + 0.8) / 2 = 0.5
    assert h.loc["r2", "ttft_vs_fleet"] == pytest.approx(1.6)
    assert (h.loc["r1", "running"], h.loc["r1", "waiting"], h.loc["r1", "kv_cache_usage"]) == (2.0, 1.0, 0.5)
    assert bool(h.loc["r2", "degraded"]) and "error rate 67%" in h.loc["r2", "reason"]
    assert not bool(h.loc["r1", "degraded"])
    # the live page hands the tiles' gauge rows over (one read of the gauges, not two): the same table,
    # with and without a model filter; r1's gauges (2, 1, 0.5 at 10:04) come from those rows
    for f in ({}, {"model": "m"}, {"model": MODEL}):
        tiles = ops.fleet_tiles(store, w["start"], w["end"], f)
        shared = ops.replica_health(store, w["start"], w["end"], f, gauges=tiles.raw["gauges"])
        pd.testing.assert_frame_equal(shared, ops.replica_health(store, w["start"], w["end"], f), check_exact=True)
    rows = ops.fleet_tiles(store, w["start"], w["end"]).raw["gauges"]
    rows = rows.assign(running=rows["running"] * 10)
    assert ops.replica_health(store, w["start"], w["end"], gauges=rows).set_index("replica").loc["r1", "running"] == 20.0


def test_series_finish_reasons_status_and_filter_values(tiny):
    store, w = tiny
    s = ops.latency_series(store, w["start"], w["end"], 60)
    fleet = s[s["replica"] == ""]
    # errors where the gateway routed: 2 of its 5 attempts failed (the 503 and d), as the tiles say
    assert len(fleet) == 1 and fleet.iloc[0]["requests"] == 4 and fleet.iloc[0]["errors"] == 2
    assert fleet.iloc[0]["attempts"] == 5 and fleet.iloc[0]["error_rate"] == pytest.approx(0.4)
    assert fleet.iloc[0]["requests_per_s"] == pytest.approx(4 / 60)
    assert sorted(s[s["replica"] != ""]["replica"]) == ["r1", "r2"]
    fr = ops.finish_reasons(store, w["start"], w["end"])
    assert dict(zip(fr["finish_reason"], fr["requests"])) == {"stop": 3, "abort": 1}
    assert fr["share"].sum() == pytest.approx(1.0)
    g = ops.gauge_series(store, w["start"], w["end"], 300)
    assert len(g) == 1 and g.iloc[0]["waiting"] == 4.0 and g.iloc[0]["kv_usage"] == pytest.approx(0.375)
    st = ops.ingest_status(store)
    assert (st.engine_calls, st.calls, st.spans, st.gauge_points) == (1, 14, 17, 8)
    assert st.last_gauge is None and st.last_span is None  # nothing in the last 24 h of the wall clock
    assert ops.filter_values(store, w["start"], w["end"])["tenants"] == ["acme"]


def _utc_us(ns: int) -> datetime:
    """A Unix time in ns as a UTC datetime, truncated to µs without passing through a float."""
    return datetime.fromtimestamp(ns // 10**9, UTC) + timedelta(microseconds=ns // 1000 % 10**6)


def test_ingest_status_newest_span_and_gauge_of_the_last_day(store):
    """The captured vLLM span and /metrics page, stored twice each: once 23 h ago (yesterday's or
    today's partition, by the hour this runs) and once 3 days ago. The newest span is the recent
    copy's start; a gauge scraped 25 h ago is older than a day: None."""
    now_ns = time.time_ns()
    recent_ns, old_ns = now_ns - 23 * 3600 * 10**9, now_ns - 3 * 86400 * 10**9
    payloads = []
    for shift, start_ns in (("aa", recent_ns), ("bb", old_ns)):
        req = captured_spans()
        for rs in req.resource_spans:
            for span in rs.scope_spans[0].spans:
                length = span.end_time_unix_nano - span.start_time_unix_nano
                span.trace_id = bytes.fromhex(shift) + span.trace_id[1:]
                span.start_time_unix_nano, span.end_time_unix_nano = start_ns, start_ns + length
        payloads.append(req.SerializeToString())
    insert_trace_payloads(store, payloads)
    target = ScrapeTarget(url="http://replica-1:8000/metrics", replica="replica-1")
    insert_metric_rows(store, parse_metrics_text(captured_metrics_text(), target, now_ns - 25 * 3600 * 10**9))
    st = ops.ingest_status(store)
    assert st.last_span == _utc_us(recent_ns)
    assert st.gauge_points > 0 and st.last_gauge is None
    insert_metric_rows(store, parse_metrics_text(captured_metrics_text(), target, recent_ns))
    assert ops.ingest_status(store).last_gauge == _utc_us(recent_ns)


def test_engine_counters_count_a_restart_that_climbed_past_the_old_value(store):
    """Prompt tokens of one series in a 5-minute bucket: 100 -> 300, a restart (new start time) already
    at 400 at the next scrape, then 450: 200 + 400 + 50 = 650 (a drop-only reset rule: 350)."""
    from schema.queries import ops_engine

    t0 = datetime(2026, 11, 2, 10)  # naive = UTC
    old, new = t0 - timedelta(hours=1), t0 + timedelta(seconds=100)
    rows = [[{"service.instance.id": "r1"}, "vllm", "vllm:prompt_tokens", {"model_name": "m"}, start,
             t0 + timedelta(seconds=s), float(v), 2, True]
            for s, v, start in ((30, 100, old), (60, 300, old), (120, 400, new), (150, 450, new))]
    store.insert("otel_metrics_sum", rows, ["ResourceAttributes", "ServiceName", "MetricName", "Attributes",
                                            "StartTimeUnix", "TimeUnix", "Value", "AggregationTemporality",
                                            "IsMonotonic"], tag="test.seed")
    df = ops_engine.engine_counters(store, t0.replace(tzinfo=UTC), t0.replace(tzinfo=UTC) + timedelta(minutes=5), 300)
    assert df["prompt_tokens"].tolist() == [650]


def test_empty_store_and_bad_input(store):
    now = datetime(2026, 11, 2, 10, tzinfo=UTC)
    t = ops.fleet_tiles(store, now - timedelta(minutes=5), now)
    assert t.current.requests == 0 and t.current.ttft_p50_s is None and t.current.queue_depth is None
    assert ops.ingest_status(store).spans == 0 and ops.ingest_status(store).last_span is None
    assert len(ops.replica_health(store, now - timedelta(minutes=5), now)) == 0
    with pytest.raises(ValueError, match="time range is empty"):
        ops.fleet_tiles(store, now, now)
    with pytest.raises(ValueError, match="unknown filter"):
        ops.fleet_tiles(store, now - timedelta(minutes=5), now, {"region": "eu"})
    with pytest.raises(ValueError, match="bucket_s"):
        ops.latency_series(store, now - timedelta(minutes=5), now, 0)


def test_filter_values_are_bound_not_formatted(tiny):
    store, w = tiny
    evil = "acme' OR 1=1 --"
    assert ops.fleet_tiles(store, w["start"], w["end"], {"tenant": evil}).current.requests == 0


def test_wide_ranges_read_the_minute_rollups(tiny):
    store, w = tiny
    a, b = w["start"] - timedelta(hours=3), w["start"] + timedelta(hours=3)
    assert ops.use_rollup(a, b, 3600)
    assert not ops.use_rollup(a, b, 3600, {"tenant": "acme"})  # tenants need the raw rows' parents
    assert not ops.use_rollup(w["start"], w["end"], 60) and not ops.use_rollup(a, b, 90)
    s = ops.latency_series(store, a, b, 3600)
    fleet = s[s["replica"] == ""].set_index("bucket")
    ten = fleet.loc[datetime(2026, 11, 2, 10)]
    # the same counts as the raw rows of the current window; t-digest quantiles on 4 values are exact;
    # errors / attempts from the gateway's columns (2 of 5 attempts failed)
    assert (ten["requests"], ten["output_tokens_sum"], ten["errors"], ten["attempts"]) == (4, 42, 2, 5)
    assert ten["ttft_p95_s"] == pytest.approx(0.8) and ten["itl_p95_s"] == pytest.approx(0.26)
    assert fleet.loc[datetime(2026, 11, 2, 9), "requests"] == 1
    g = ops.gauge_series(store, a, b, 3600).set_index("bucket")
    assert g.loc[datetime(2026, 11, 2, 10), "waiting"] == 4.0  # r1 1 + r2 3
    assert g.loc[datetime(2026, 11, 2, 10), "kv_usage"] == pytest.approx(0.375)
    assert g.loc[datetime(2026, 11, 2, 9), "waiting"] == 1.0  # r1 0 + r2 1 at 09:59


def test_multi_day_ranges_read_the_hour_rollup(tiny):
    store, w = tiny
    a, b = w["start"] - timedelta(days=2), w["start"] + timedelta(hours=2)
    s = ops.latency_series(store, a, b, 3600)
    fleet = s[s["replica"] == ""].set_index("bucket")
    ten = fleet.loc[datetime(2026, 11, 2, 10)]
    assert (ten["requests"], ten["output_tokens_sum"], ten["errors"], ten["attempts"]) == (4, 42, 2, 5)
    assert ten["ttft_p95_s"] == pytest.approx(0.8)
    per = s[s["replica"] != ""]
    assert per.groupby("replica")["requests"].sum().to_dict() == {"r1": 3, "r2": 2}  # r1: 1 at 09:57, 2 at 10:01


def test_client_caused_errors_are_not_replica_errors():
    """Issue 17 fault 7: calls the client cancelled (a shutdown, a user leaving) are labelled by the
    gateway `client_disconnect` / the SDK `cancelled` and must not make a replica look degraded."""
    from datetime import timedelta

    from dashboard_seed import _insert_spans, _Span

    store = new_store()
    try:
        stop_periodic_jobs(store)
        w = tiny_scenario(store)
        before = ops.replica_health(store, w["start"], w["end"]).set_index("replica")
        at = w["start"] + timedelta(seconds=30)
        extra = []
        for i, error_type in enumerate(("client_disconnect", "cancelled", "shutdown")):
            attrs = {"gateway.attempt": 1, "gateway.replica": "r1", "task.id": f"s{i}", "task.type": "chat",
                     "tenant.id": "acme", "task.attempt": 1, "error.type": error_type}
            extra.append(_Span(at, 0.5, "s" * 32, f"{i:016x}", f"{i + 10:016x}", "gateway.attempt", "Client",
                               "gateway", {"service.name": "gateway"}, attrs, "Error"))
        _insert_spans(store, extra)
        after = ops.replica_health(store, w["start"], w["end"]).set_index("replica")
        assert after.loc["r1", "error_rate"] == before.loc["r1", "error_rate"] == 0.0
        assert after.loc["r2", "error_rate"] == pytest.approx(2 / 3)
        assert not bool(after.loc["r1", "degraded"])
        tiles = ops.fleet_tiles(store, w["start"], w["end"])
        assert tiles.current.error_source == "gateway"
        # 5 gateway attempts of the scenario + 3 client-caused ones, 2 replica errors: 2 / 8
        assert tiles.current.error_rate == pytest.approx(2 / 8)
    finally:
        drop_store(store)


def test_replica_latency_flag_needs_a_minimum_sample(store):
    """TTFT p95 > 2x the fleet median flags a replica only over >= ops.MIN_LATENCY_REQUESTS (21) requests:
    quantileExact(0.95) of n <= 20 is the slowest request (index floor(0.95 n)), so one slow call on 9
    requests flagged a replica "degraded". vLLM llm_request spans as the engine exports them."""
    import random

    from dashboard_seed import _Span, _insert_spans

    rng = random.Random(3)
    spans = []

    def engine(replica, start, ttft):
        attrs = {"gen_ai.usage.prompt_tokens": 100, "gen_ai.usage.completion_tokens": 11,
                 "gen_ai.latency.time_to_first_token": ttft, "gen_ai.latency.e2e": ttft + 1.0,
                 "gen_ai.latency.time_in_model_decode": 1.0, "gen_ai.latency.time_in_queue": 0.01,
                 "gen_ai.response.finish_reasons": '["stop"]', "gen_ai.request.model": MODEL}
        res = {"service.name": "vllm", "service.instance.id": replica, "gpu.type": "H100"}
        spans.append(_Span(start, ttft + 1.0, f"{len(spans):032x}", f"{rng.getrandbits(64):016x}", "", "llm_request",
                           "Server", "vllm", res, attrs))

    # 11:00-11:05: 9 requests each, TTFT 0.3 s; r3's last one 0.9 s (its p95 = its slowest)
    # 12:00-12:05: 21 requests each, r3's last two 0.9 s (its p95 = its second slowest, 0.9)
    for hour, n, slow in ((11, 9, 1), (12, 21, 2)):
        for replica in ("r1", "r2", "r3"):
            for k in range(n):
                ttft = 0.9 if replica == "r3" and k >= n - slow else 0.3
                engine(replica, datetime(2026, 11, 2, hour, 1, tzinfo=UTC) + timedelta(seconds=5 * k), ttft)
    _insert_spans(store, spans)

    few = ops.replica_health(store, datetime(2026, 11, 2, 11, tzinfo=UTC), datetime(2026, 11, 2, 11, 5, tzinfo=UTC))
    few = few.set_index("replica")
    # p95s 0.3, 0.3, 0.9 -> fleet median 0.3 -> r3 3.0x, shown but not flagged on 9 requests
    assert few.loc["r3", "requests"] == 9 and few.loc["r3", "ttft_vs_fleet"] == pytest.approx(3.0)
    assert not few["degraded"].any() and list(few["reason"]) == ["", "", ""]
    # with the minimum lifted, the old flag
    lifted = ops.replica_health(store, datetime(2026, 11, 2, 11, tzinfo=UTC), datetime(2026, 11, 2, 11, 5, tzinfo=UTC),
                                min_requests=1).set_index("replica")
    assert lifted.loc["r3", "reason"] == "TTFT p95 3.0x fleet median"
    enough = ops.replica_health(store, datetime(2026, 11, 2, 12, tzinfo=UTC),
                                datetime(2026, 11, 2, 12, 5, tzinfo=UTC)).set_index("replica")
    assert enough.loc["r3", "requests"] == 21 and enough.loc["r3", "ttft_p95_s"] == pytest.approx(0.9)
    assert bool(enough.loc["r3", "degraded"]) and enough.loc["r3", "reason"] == "TTFT p95 3.0x fleet median"
    assert not enough.loc["r1", "degraded"] and not enough.loc["r2", "degraded"]
