"""The live page's named queries run at once on extra clients (``app.ui.prefetch``) and land in the
cache its own ``ui.query`` calls read: no statement twice, the same frames, errors left to the panel."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pandas as pd
import pytest
import streamlit as st

from app import store_provider, ui
from collectors.ingest import insert_metric_rows, insert_trace_payloads
from collectors.scraper import ScrapeTarget, parse_metrics_text
from schema.store import StoreError
from vllm_captured import captured_metrics_text, captured_spans

FAILED = []


def failing_query(store, label: str):
    """A named query whose statement fails (a column that does not exist), counted per call."""
    FAILED.append(label)
    return store.query("SELECT no_such_column FROM otel_traces", tag="test.failing")


@pytest.fixture
def served(store):
    """The captured vLLM 0.32 spans (started 2 min ago) and /metrics page in the store the dashboard reads."""
    now_ns = time.time_ns()
    req = captured_spans()
    for rs in req.resource_spans:
        for span in rs.scope_spans[0].spans:
            length = span.end_time_unix_nano - span.start_time_unix_nano
            span.start_time_unix_nano = now_ns - 120 * 10**9
            span.end_time_unix_nano = span.start_time_unix_nano + length
    insert_trace_payloads(store, [req.SerializeToString()])
    target = ScrapeTarget(url="http://replica-1:8000/metrics", replica="replica-1")
    insert_metric_rows(store, parse_metrics_text(captured_metrics_text(), target, now_ns - 60 * 10**9))
    st.cache_data.clear()
    store_provider.set_store(store)
    yield store
    store_provider.clear()
    st.cache_data.clear()


def test_prefetched_results_are_the_page_calls_results_without_a_second_statement(served):
    end = datetime.now(timezone.utc).replace(tzinfo=None, microsecond=0)
    start, since = end - timedelta(minutes=5), end - timedelta(hours=1)
    calls = [("schema.queries.ops:finish_reasons", (start, end, {}), {}),
             ("schema.queries.ops:fleet_tiles", (start, end, {}), {}),
             ("schema.queries.ops:latency_series", (since, end, 60, {}), {}),
             ("schema.queries.ops:gauge_series", (since, end, 60, {}), {})]
    ui.prefetch(calls, live=True)
    before = served.stats.calls
    got = [ui.ask(call, live=True) for call in calls]
    assert served.stats.calls == before  # every result came from the cache the prefetch filled
    assert store_provider._readers_made <= store_provider.READERS
    # the same values the functions give on the page's own client
    from schema.queries import ops

    finish = ops.finish_reasons(served, start, end, {})
    pd.testing.assert_frame_equal(got[0], finish)
    # the four captured llm_request spans (vLLM's spans carry no finish reason)
    assert got[0][["finish_reason", "requests"]].values.tolist() == [["unknown", 4]]
    assert got[1].current.requests == 4 and got[1].current == ops.fleet_tiles(served, start, end, {}).current
    pd.testing.assert_frame_equal(got[2], ops.latency_series(served, since, end, 60, {}))
    pd.testing.assert_frame_equal(got[3], ops.gauge_series(served, since, end, 60, {}))
    assert got[3]["running"].notna().any()  # the /metrics page's vllm:num_requests_running


def test_a_failed_prefetch_is_not_cached_and_the_page_call_raises_it(served):
    FAILED.clear()
    call = (f"{__name__}:failing_query", ("x",), {})
    ui.prefetch([call], live=True)  # raises nothing
    assert FAILED == ["x"]
    with pytest.raises(StoreError, match="no_such_column"):
        ui.ask(call, live=True)
    assert FAILED == ["x", "x"]  # run again by the page's call: a failure is never served from the cache


def test_the_readers_are_closed_when_the_store_is_replaced(served, store):
    ui.prefetch([("schema.queries.ops:ingest_status", (), {}), ("schema.queries.ops_engine:replicas",
                 (datetime(2026, 1, 1), datetime(2026, 1, 2)), {})], live=True)
    pooled = list(store_provider._readers.queue)
    assert 1 <= len(pooled) <= store_provider.READERS
    store_provider.set_store(store)  # the same store again: the pool stays
    assert list(store_provider._readers.queue) == pooled
    store_provider.clear()
    assert store_provider._readers.empty() and store_provider._readers_made == 0
    with pytest.raises(store_provider.NoStore):
        with store_provider.reader():
            pass


def test_the_cost_queries_prefetched_share_the_pages_rollup_spans(served):
    """The cost page prefetches inside its shared_spans block (app/main.py): the pool's threads run in a
    copy of the page's context, so the spans they read are the page's, keyed by store, not by client."""
    from schema.queries import cost

    end = datetime.now(timezone.utc).replace(tzinfo=None, minute=0, second=0, microsecond=0)
    start = end - timedelta(hours=2)
    calls = [("schema.queries.cost:period_summaries", (start, end, ("", "tenant"), {}), {"previous": True}),
             ("schema.queries.cost:cpst_trend", (start, end, 3600), {}),
             ("schema.queries.cost:data_quality", (start, end), {})]
    with cost.shared_spans():
        ui.prefetch(calls)
        shared = cost._SPANS.get()
        # the threads' span reads landed in the page's block: one window read for the store (its clients
        # are one store), the ranges answered from it
        assert [k for k in shared if k[0] == "windows"] == [("windows", (served.url, served.database))]
        assert len(shared[("windows", (served.url, served.database))]) == 1  # read once, not by each thread
        assert (((served.url, served.database), start, end, 0)) in shared
        before = served.stats.calls
        got = [ui.ask(call) for call in calls]
        assert served.stats.calls == before  # from the cache the prefetch filled
    pd.testing.assert_frame_equal(got[1], cost.cpst_trend(served, start, end, 3600))
    pd.testing.assert_frame_equal(got[2], cost.data_quality(served, start, end))
    alone = cost.period_summaries(served, start, end, ("", "tenant"), {}, previous=True)
    assert got[0].keys() == alone.keys()
    for key in alone:
        pd.testing.assert_frame_equal(got[0][key], alone[key])
