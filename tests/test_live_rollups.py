"""The live page's multi-day rollups.

* The live series' blocks (migration 1006, schema/jobs/run_series_blocks.sql): the multi-day series takes
  a bucket's t-digest quantiles from its block while the bucket's rows of ops_engine_hours have the
  block's fingerprint, and merges the hours otherwise.
* The hourly gauge rollup (migration 1006) and the multi-day gauge series that reads it
  (schema/queries/ops_gauge_series.sql, hours = 1).

Figures from tests/dashboard_seed.tiny_scenario's docstring: hour 10:00 of 2026-11-02 holds the current
window's four engine requests (r1: a, b; r2: c, d), hour 09:00 the previous window's one (r1, TTFT
0.05 s); gauges at 10:04 (r1 waiting 1, running 2, KV 0.5; r2 waiting 3, running 1, KV 0.25) and at
09:59 (r1 waiting 0, r2 waiting 1)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pandas as pd
import pytest

from app.charts import series_bucket
from conftest import drop_store, new_store
from dashboard_seed import stop_periodic_jobs, tiny_scenario
from schema import jobs
from schema.jobs import series
from schema.queries import ops

UTC = timezone.utc
END = datetime(2026, 11, 2, 12, 30, tzinfo=UTC)  # 7 days ending here: buckets 08:00 and 10:00 wholly inside
B8, B10 = datetime(2026, 11, 2, 8), datetime(2026, 11, 2, 10)
H9, H10 = datetime(2026, 11, 2, 9), B10


def _tiny_store():
    store = new_store()
    stop_periodic_jobs(store)
    tiny_scenario(store)
    yield store
    drop_store(store)


tiny = pytest.fixture(scope="module", name="tiny")(_tiny_store)


def _series(store, start=None, end=END, filters=None) -> pd.DataFrame:
    s = ops.latency_series(store, start or end - timedelta(days=7), end, 7200, filters)
    return s.set_index(["bucket", "replica"]).sort_index()


def _blocks(store) -> pd.DataFrame:
    return store.query_df("SELECT block_start, replica, version, fp_rows, fp_requests, fp_output_tokens, ttft_q, itl_p95_s, e2e_p95_s "
                          "FROM ops_series_blocks WHERE block_seconds = 7200 ORDER BY block_start, version, replica",
                          tag="test")


def _tamper(store, block: datetime, version_step: int, ttft: float, fp_requests_step: int = 0) -> None:
    """A newer version of ``block``'s rows with every TTFT quantile ``ttft`` (and a fingerprint off by
    ``fp_requests_step``): which version the reader takes shows in the series."""
    store.command("INSERT INTO ops_series_blocks SELECT block_start, block_seconds, version + {step:UInt64}, fp_rows, "
                  "toUInt64(toInt64(fp_requests) + {fp:Int64}), fp_output_tokens, replica, "
                  "[{q:Float32}, {q:Float32}, {q:Float32}], itl_p95_s, e2e_p95_s "
                  "FROM ops_series_blocks WHERE block_seconds = 7200 AND block_start = {b:DateTime} "
                  "AND version = (SELECT max(version) FROM ops_series_blocks WHERE block_seconds = 7200 "
                  "AND block_start = {b:DateTime})",
                  {"step": version_step, "fp": fp_requests_step, "q": ttft, "b": block}, tag="test")


def test_block_sizes_are_the_pages_series_buckets():
    assert jobs.SERIES_BLOCKS_S == (series_bucket(7 * 86400), series_bucket(30 * 86400)) == (7200, 43200)


def test_blocks_hold_the_pages_merge_and_the_series_reads_them(tiny):
    store = tiny
    merged = _series(store)  # no block yet: every bucket merges its hours
    raw = ops.latency_series(store, END - timedelta(days=7), END, 7200)
    # the hour 11:00 is not over at 11:30: its bucket (10:00-12:00) is not written yet
    jobs.roll_up_series(store, start=datetime(2026, 10, 20), end=datetime(2026, 11, 2, 11, 30))
    written = _blocks(store)
    assert list(written["block_start"].unique()) == [B8]
    jobs.roll_up_series(store, start=datetime(2026, 10, 20), end=datetime(2026, 11, 2, 13))
    written = _blocks(store)
    ten = written[written["block_start"] == B10].set_index("replica")
    assert sorted(ten.index) == ["", "r1", "r2"]
    rows = store.scalar("SELECT count() FROM ops_engine_hours WHERE hour = {h:DateTime}", {"h": B10}, tag="test")
    assert (ten["fp_requests"] == 4).all() and (ten["fp_rows"] == rows).all()  # a, b, c, d; every row of the hour
    # t-digest quantiles of <= 4 values are the values: TTFT [0.1, 0.2, 0.4, 0.8], e2e [1, 2, 3, 0.8],
    # ITL a 0.10, b 0.09, c 0.26 (d has no tokens)
    assert ten.loc["", "ttft_q"][1] == pytest.approx(0.8) and ten.loc["", "e2e_p95_s"] == pytest.approx(3.0)
    assert ten.loc["", "itl_p95_s"] == pytest.approx(0.26) and ten.loc["r1", "e2e_p95_s"] == pytest.approx(2.0)
    eight = written[written["block_start"] == B8].set_index("replica")
    assert list(eight["fp_requests"]) == [1, 1] and eight.loc["r1", "ttft_q"][0] == pytest.approx(0.05)
    # a second run writes nothing: every block is current
    jobs.roll_up_series(store, start=datetime(2026, 10, 20), end=datetime(2026, 11, 2, 13))
    assert len(_blocks(store)) == len(written)
    # the series from the blocks is the merge, to the bit, columns, types and row order too
    pd.testing.assert_frame_equal(ops.latency_series(store, END - timedelta(days=7), END, 7200), raw,
                                  check_exact=True)
    pd.testing.assert_frame_equal(_series(store), merged, check_exact=True)
    # it reads them: a newer version of the 10:00 block with TTFT 9 s shows
    _tamper(store, B10, 1, 9.0)
    s = _series(store)
    assert list(s.loc[(B10, ""), "ttft_p50_s":"ttft_p99_s"]) == [9.0, 9.0, 9.0]
    assert s.loc[(B10, "r2"), "ttft_p95_s"] == 9.0 and s.loc[(B10, ""), "requests"] == 4  # sums from the hours
    # a newer version whose fingerprint does not match the rows is never taken (one request fewer: the
    # sums only grow, so these rows never have it)
    _tamper(store, B10, 2, 7.0, fp_requests_step=-1)
    assert _series(store).loc[(B10, ""), "ttft_p95_s"] == 9.0
    # a bucket cut by the range is merged (7 days ending 10:30: the hour 11:00 of 10:00-12:00 is out),
    # and so is every bucket under a model filter
    _tamper(store, B8, 1, 5.0)
    assert _series(store).loc[(B8, ""), "ttft_p50_s"] == 5.0
    cut = _series(store, end=datetime(2026, 11, 2, 10, 30, tzinfo=UTC))
    assert cut.loc[(B8, ""), "ttft_p50_s"] == 5.0 and cut.loc[(B10, ""), "ttft_p95_s"] == pytest.approx(0.8)
    model = store.scalar("SELECT any(model) FROM ops_engine_hours WHERE requests > 0", tag="test")
    filtered = _series(store, filters={"model": model})
    assert filtered.loc[(B10, ""), "ttft_p95_s"] == pytest.approx(0.8)
    assert filtered.loc[(B8, ""), "ttft_p50_s"] == pytest.approx(0.05)


def test_a_late_call_makes_the_block_stale_until_rewritten(tiny):
    store = tiny
    before = _series(store).loc[(B10, "")]
    # one more engine row in the hour 11:00 (bucket 10:00): TTFT 2.0 s
    store.command("INSERT INTO ops_engine_hours (hour, replica, model, requests, output_tokens, errors, ttft_q, itl_q, "
                  "e2e_q) SELECT toDateTime('2026-11-02 11:00:00', 'UTC'), 'r1', any(model), 1, 0, 0, "
                  "quantilesTDigestState(0.5, 0.95, 0.99)(toFloat64(2.0)), quantileTDigestState(0.95)(toFloat64(0.1)), "
                  "quantileTDigestState(0.95)(toFloat64(4.0)) FROM ops_engine_hours WHERE requests > 0", tag="test")
    merged = _series(store).loc[(B10, "")]
    # the block (tampered: 9 s) no longer matches the rows: the hours are merged, the late call in them
    assert merged["requests"] == before["requests"] + 1 == 5
    assert merged["ttft_p99_s"] == pytest.approx(2.0) and merged["e2e_p95_s"] == pytest.approx(4.0)
    jobs.roll_up_series(store, start=datetime(2026, 10, 20), end=datetime(2026, 11, 2, 13))
    ten = _blocks(store)
    newest = ten[(ten["block_start"] == B10) & (ten["replica"] == "")].iloc[-1]
    assert newest["fp_requests"] == 5 and newest["ttft_q"][2] == pytest.approx(2.0)
    pd.testing.assert_series_equal(_series(store).loc[(B10, "")], merged, check_exact=True)


def _late_row(store, hour: datetime, ttft: float, tokens: int) -> None:
    """One more engine request of r1 in ``hour`` straight into ops_engine_hours (the key of the hour's r1
    row: a second part a merge folds into it), TTFT ``ttft`` s, ``tokens`` output tokens."""
    store.command("INSERT INTO ops_engine_hours (hour, replica, model, requests, output_tokens, errors, ttft_q, itl_q, "
                  "e2e_q) SELECT {h:DateTime}, 'r1', any(model), 1, {t:UInt64}, 0, "
                  "quantilesTDigestState(0.5, 0.95, 0.99)(toFloat64({q:Float64})), "
                  "quantileTDigestState(0.95)(toFloat64(0.1)), quantileTDigestState(0.95)(toFloat64(4.0)) "
                  "FROM ops_engine_hours WHERE requests > 0 AND replica = 'r1'", {"h": hour, "q": ttft, "t": tokens},
                  tag="test")


fresh = pytest.fixture(name="fresh")(_tiny_store)  # a store of its own: these tests merge and delete

def test_a_merge_of_the_hours_keeps_the_block_and_new_rows_do_not(fresh, monkeypatch):
    """The fingerprint (summed requests and output tokens, migration 1006) survives OPTIMIZE FINAL of
    ops_engine_hours, which folds rows; a new row in the bucket does not."""
    store = fresh
    monkeypatch.setattr(series, "SERIES_MARKS_MARGIN", timedelta(0))
    _late_row(store, H10, 2.0, 3)  # hour 10:00 of r1 in two parts now
    jobs.roll_up_series(store, start=datetime(2026, 10, 20), end=datetime(2026, 11, 2, 13))
    _tamper(store, B10, 1, 9.0)  # a current version the series shows when it reads the block
    count = "SELECT count() FROM ops_engine_hours WHERE hour = {h:DateTime}"
    rows = store.scalar(count, {"h": H10}, tag="test")
    written = len(_blocks(store))
    assert _series(store).loc[(B10, ""), "ttft_p50_s"] == 9.0
    store.command("OPTIMIZE TABLE ops_engine_hours FINAL", tag="test")
    assert store.scalar(count, {"h": H10}, tag="test") == rows - 1  # the two r1 parts folded into one row
    assert _series(store).loc[(B10, ""), "ttft_p50_s"] == 9.0  # still the block
    jobs.roll_up_series(store, start=datetime(2026, 10, 20), end=datetime(2026, 11, 2, 13))
    assert len(_blocks(store)) == written  # not written again
    # one more request in the bucket: the block is stale (the hours merged: 6 TTFTs, none 9 s) until rewritten
    _late_row(store, H10, 2.0, 0)
    s = _series(store).loc[(B10, "")]
    assert s["requests"] == 6 and s["ttft_p99_s"] == pytest.approx(2.0)
    jobs.roll_up_series(store, start=datetime(2026, 10, 20), end=datetime(2026, 11, 2, 13))
    ten = _blocks(store)
    newest = ten[(ten["block_start"] == B10) & (ten["replica"] == "")].iloc[-1]
    assert (newest["fp_requests"], newest["ttft_q"][2]) == (6, pytest.approx(2.0))
    pd.testing.assert_series_equal(_series(store).loc[(B10, "")], s, check_exact=True)


def test_the_rollup_reads_only_buckets_that_can_have_changed(fresh, monkeypatch):
    """After a first run over the whole range, a run reads the buckets with hours marked by inserts since
    the previous run (a late row for an old hour rewrites its block) and those that became complete; a
    block with neither is not looked at (a deleted one stays missing) until a run covers an earlier start."""
    store = fresh
    monkeypatch.setattr(series, "SERIES_MARKS_MARGIN", timedelta(0))
    since, later = datetime(2026, 10, 20), datetime(2026, 11, 5)
    jobs.roll_up_series(store, start=since, end=datetime(2026, 11, 2, 11, 30))  # the first: every bucket
    assert list(_blocks(store)["block_start"].unique()) == [B8]
    jobs.roll_up_series(store, start=since, end=later)  # 10:00-12:00 became complete
    assert list(_blocks(store)["block_start"].unique()) == [B8, B10]
    twelve = "SELECT count() FROM ops_series_blocks WHERE block_seconds = 43200"
    assert store.scalar(twelve, tag="test") == 3  # 00:00-12:00: fleet, r1, r2
    store.command("DELETE FROM ops_series_blocks WHERE block_start = {b:DateTime}", {"b": B10}, tag="test")
    # a late row for the hour 09:00, days after its bucket was complete: its blocks are written again
    _late_row(store, H9, 2.0, 7)
    late = _series(store).loc[(B8, "")]
    jobs.roll_up_series(store, start=since, end=later)
    blocks = _blocks(store)
    assert list(blocks["block_start"].unique()) == [B8]  # B10: no insert since, not newly complete
    eight = blocks[(blocks["block_start"] == B8) & (blocks["replica"] == "")]
    assert list(eight["fp_requests"]) == [1, 2] and list(eight["fp_output_tokens"]) == [10, 17]
    assert store.scalar(twelve, tag="test") == 6  # 00:00-12:00 again
    pd.testing.assert_series_equal(_series(store).loc[(B8, "")], late, check_exact=True)
    # a run reaching back further than any before reads every bucket
    jobs.roll_up_series(store, start=since - timedelta(days=1), end=later)
    assert list(_blocks(store)["block_start"].unique()) == [B8, B10]


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
