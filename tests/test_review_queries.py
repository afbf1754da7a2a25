"""The weekly review's own named queries (review_*.sql) on hand-computed fixtures."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from schema.queries import review

START = datetime(2026, 11, 23)
END = datetime(2026, 11, 30)
SUM_COLUMNS = ["ResourceAttributes", "ServiceName", "MetricName", "Attributes", "StartTimeUnix", "TimeUnix", "Value",
               "AggregationTemporality", "IsMonotonic"]
GAUGE_COLUMNS = ["ResourceAttributes", "ServiceName", "MetricName", "Attributes", "TimeUnix", "Value"]


def _sum_points(replica, metric, values, start_time, first=START + timedelta(hours=1)):
    return [[{"service.instance.id": replica}, "vllm", metric, {"model_name": "m"}, start_time,
             first + timedelta(minutes=i), float(v), 2, True] for i, v in enumerate(values)]


def test_prefix_cache_counter_increase_with_reset(store):
    old = datetime(2026, 11, 1)
    rows = (
        # r1 hits: 100 -> 150 -> 40 (restart) -> 90: increase 50 + 40 + 50 = 140
        _sum_points("r1", "vllm:prefix_cache_hits", [100, 150, 40, 90], old)
        # r1 queries: 1000 -> 1300 -> 200 -> 400: 300 + 200 + 200 = 700
        + _sum_points("r1", "vllm:prefix_cache_queries", [1000, 1300, 200, 400], old)
        # r2 started inside the week: its first value counts from zero: 30 + 20 = 50 hits, 100 + 100 queries
        + _sum_points("r2", "vllm:prefix_cache_hits_total", [30, 50], START + timedelta(minutes=30))
        + _sum_points("r2", "vllm:prefix_cache_queries", [100, 200], START + timedelta(minutes=30))
        # outside the week: ignored
        + _sum_points("r1", "vllm:prefix_cache_hits", [5000], old, first=END + timedelta(hours=1))
    )
    store.insert("otel_metrics_sum", rows, SUM_COLUMNS, tag="test.seed")
    df = review.prefix_cache(store, START, END).set_index("replica")
    assert df.loc["r1", "hit_tokens"] == 140 and df.loc["r1", "query_tokens"] == 700
    assert df.loc["r2", "hit_tokens"] == 50 and df.loc["r2", "query_tokens"] == 200


def test_prefix_cache_counts_a_restart_that_climbed_past_the_old_value(store):
    # r1's engine started inside the week (its first values count whole) and restarted between two
    # scrapes, its new series (a new start time) already past the old value at the next scrape:
    # queries 100 | restart | 200 -> 800: 100 + 200 + 600 = 900 (a drop-only reset rule: 800);
    # hits 50 | restart | 100 -> 400: 50 + 100 + 300 = 450 (400)
    t = START + timedelta(hours=1)
    first, restart = START + timedelta(minutes=30), t + timedelta(seconds=30)
    rows = (_sum_points("r1", "vllm:prefix_cache_queries", [100], first, first=t)
            + _sum_points("r1", "vllm:prefix_cache_queries", [200, 800], restart, first=t + timedelta(minutes=1))
            + _sum_points("r1", "vllm:prefix_cache_hits", [50], first, first=t)
            + _sum_points("r1", "vllm:prefix_cache_hits", [100, 400], restart, first=t + timedelta(minutes=1)))
    store.insert("otel_metrics_sum", rows, SUM_COLUMNS, tag="test.seed")
    row = review.prefix_cache(store, START, END).set_index("replica").loc["r1"]
    assert (row["query_tokens"], row["hit_tokens"]) == (900, 450)


def test_batch_occupancy_means(store):
    t = START + timedelta(days=2)
    rows = [[{"service.instance.id": "r1", "gpu.type": "H100"}, "vllm", "vllm:num_requests_running", {},
             t + timedelta(seconds=15 * i), float(v)] for i, v in enumerate([2, 4, 6, 8])]
    rows += [[{"service.instance.id": "r1", "gpu.type": "H100"}, "vllm", "vllm:num_requests_waiting", {},
              t + timedelta(seconds=15 * i), float(v)] for i, v in enumerate([0, 0, 3])]
    store.insert("otel_metrics_gauge", rows, GAUGE_COLUMNS, tag="test.seed")
    row = review.batch_occupancy(store, START, END).iloc[0]
    assert row["replica"] == "r1" and row["gpu_type"] == "H100"
    assert row["running_mean"] == pytest.approx(5.0) and row["running_max"] == 8 and row["running_points"] == 4
    assert row["waiting_mean"] == pytest.approx(1.0) and row["waiting_max"] == 3


def test_review_queries_on_an_empty_week(store):
    for fn in (review.prefix_cache, review.batch_occupancy, review.engine_load, review.routing):
        assert fn(store, START, END).empty
