"""The hourly gauge rollup (migration 0361) and the multi-day gauge series that reads it
(schema/queries/ops_gauge_series_hours.sql). Figures from tests/dashboard_seed.tiny_scenario's
docstring: gauges at 10:04 of 2026-11-02 (r1 waiting 1, running 2, KV 0.5; r2 waiting 3, running 1,
KV 0.25) and at 09:59 (r1 waiting 0, r2 waiting 1)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from conftest import drop_store, new_store
from dashboard_seed import stop_periodic_jobs, tiny_scenario
from schema.queries import ops

UTC = timezone.utc
H9, H10 = datetime(2026, 11, 2, 9), datetime(2026, 11, 2, 10)


@pytest.fixture(scope="module")
def tiny():
    store = new_store()
    stop_periodic_jobs(store)
    tiny_scenario(store)
    yield store
    drop_store(store)


def _waiting(store, end: datetime) -> dict:
    g = ops.gauge_series(store, end - timedelta(days=2), end, 3600)
    return g.set_index("bucket")["waiting"].to_dict()


def test_the_hours_hold_the_sums_of_their_minutes(tiny):
    store = tiny
    hours = store.query_df("SELECT hour, replica, metric, value_sum, points, scrapes FROM ops_gauge_hours "
                           "WHERE metric = 'vllm:num_requests_waiting' ORDER BY hour, replica", tag="test")
    minutes = store.query_df("SELECT toStartOfHour(minute) AS hour, replica, sum(value_sum) AS value_sum, "
                             "sum(points) AS points, sum(scrapes) AS scrapes FROM ops_gauge_minutes "
                             "WHERE metric = 'vllm:num_requests_waiting' GROUP BY hour, replica ORDER BY hour, replica",
                             tag="test")
    got = hours.groupby(["hour", "replica"])[["value_sum", "points", "scrapes"]].sum().reset_index()
    assert got.to_dict("list") == minutes.to_dict("list")
    ten = got[got["hour"] == H10].set_index("replica")["value_sum"].to_dict()
    assert ten == {"r1": 1.0, "r2": 3.0}  # one scrape each at 10:04
    assert got[got["hour"] == H9].set_index("replica")["value_sum"].to_dict() == {"r1": 0.0, "r2": 1.0}


def test_whole_hours_come_from_the_hour_rollup_and_cut_hours_from_minutes(tiny):
    store = tiny
    assert _waiting(store, datetime(2026, 11, 2, 11, tzinfo=UTC)) == {H9: 1.0, H10: 4.0}  # r1 1 + r2 3
    # a row only the hour rollup has (r1 waiting 5 in one more scrape at 10:00): r1's mean at 10:00 is
    # (1 + 5) / 2 = 3, so the bucket 3 + 3 = 6 wherever the series reads the hour 10:00 whole
    store.command("INSERT INTO ops_gauge_hours (hour, replica, model, metric, value_sum, points, scrapes) "
                  "SELECT hour, replica, model, metric, 5, 1, 1 FROM ops_gauge_hours "
                  "WHERE hour = {h:DateTime} AND replica = 'r1' AND metric = 'vllm:num_requests_waiting' LIMIT 1",
                  {"h": H10}, tag="test")
    assert _waiting(store, datetime(2026, 11, 2, 11, tzinfo=UTC))[H10] == 6.0
    assert _waiting(store, datetime(2026, 11, 2, 10, 59, 30, tzinfo=UTC))[H10] == 6.0  # minute 10:59 is in
    # the range cuts the hour 10:00 (minute 10:59, or 10:30.., is out): its minutes, r1 1 + r2 3
    assert _waiting(store, datetime(2026, 11, 2, 10, 59, tzinfo=UTC))[H10] == 4.0
    assert _waiting(store, datetime(2026, 11, 2, 10, 30, tzinfo=UTC))[H10] == 4.0
    # the same extra row in the hour 09:00: read whole, r1 (0 + 5) / 2 + r2 1 = 3.5; a start inside the
    # hour (09:59, 13 h range) reads its minutes from 09:59 on: r1 0 + r2 1
    store.command("INSERT INTO ops_gauge_hours (hour, replica, model, metric, value_sum, points, scrapes) "
                  "SELECT hour, replica, model, metric, 5, 1, 1 FROM ops_gauge_hours "
                  "WHERE hour = {h:DateTime} AND replica = 'r1' AND metric = 'vllm:num_requests_waiting' LIMIT 1",
                  {"h": H9}, tag="test")
    assert _waiting(store, datetime(2026, 11, 2, 11, tzinfo=UTC))[H9] == 3.5
    start = datetime(2026, 11, 2, 9, 59, tzinfo=UTC)
    g = ops.gauge_series(store, start, start + timedelta(hours=13), 3600).set_index("bucket")
    assert g.loc[H9, "waiting"] == 1.0 and g.loc[H10, "waiting"] == 6.0
    g = ops.gauge_series(store, start - timedelta(minutes=59), start + timedelta(hours=13), 3600).set_index("bucket")
    assert g.loc[H9, "waiting"] == 3.5  # from 09:00: whole
    # shorter ranges and minute buckets never read the hours
    assert ops.gauge_series(store, H10 - timedelta(hours=6), H10 + timedelta(hours=1), 3600).set_index(
        "bucket").loc[H10, "waiting"] == 4.0
