"""The hourly cost rollups (migration 1003, schema/jobs/run_cost_rollup.sql) behind the cost page and
the triangle: whole hours from the rollups, partial edge hours and hours not rolled up from the raw
tables, the triangle's 6-hour blocks (migration 1003) whole while their mark is current. Every figure
is checked against a recompute in pandas from the raw rows (call_costs, replica_minutes, tasks,
llm_calls) and the hand-computed spend; the tests fail if an hour edge is read twice or missed, or a
recompute's rows are counted twice.

Scenario (``_scenario``): H100 at $3.60/GPU-hour = $0.06 per replica-minute; r1 up minutes 0-199
(10:00-13:19), r2 up minutes 50-129 (10:50-12:09); capacity ~0, so a minute with work allocates all
its spend to its calls. Six tasks of two tenants, one call each; T1's call runs 10:59:30-11:00:30
(half in hour 10, half in hour 11).
"""

from __future__ import annotations

from datetime import timedelta

import pandas as pd
import pytest

from schema import jobs
from schema.queries import cost, review
from tests.test_cost_support import (  # noqa: F401
    _module_store, cstore, Spans, at, fleet_yaml, metrics_up, one, record_statements, sync, waste_both)

REL = dict(rel=1e-9, abs=1e-12)
# (task, tenant, outcome, replica, call start s, call end s, prompt, output)
TASKS = [
    ("T0", "acme", "success", "r1", 100, 150, 1000, 100),
    ("T1", "acme", "success", "r1", 3570, 3630, 2000, 200),   # across the 11:00 edge
    ("T2", "zeta", "failure", "r2", 3590, 3640, 500, 50),
    ("T3", "zeta", "success", "r2", 5000, 5100, 800, 80),
    ("T4", "acme", "success", "r1", 7300, 7350, 1200, 120),
    ("T5", "zeta", "success", "r1", 11000, 11050, 300, 30),   # 13:03, the hour cut by the last run
]


def _scenario(store):
    sync(store, fleet_yaml(price=3.60, replicas=("r1", "r2")))
    metrics_up(store, "r1", range(0, 200))
    metrics_up(store, "r2", range(50, 130))
    sp = Spans()
    for task, tenant, outcome, replica, start, end, prompt, output in TASKS:
        sp.task(f"tr{task}", task, start - 1, end + 5, outcome=outcome, tenant=tenant)
        sp.call(task_id=task, tenant=tenant, replica=replica, start=start, end=end, prompt=prompt, output=output,
                trace=f"tr{task}", ttft=0.01 * (1 + int(task[1])))
    sp.flush(store)


def _raw(store, table):
    return store.query_df(f"SELECT * FROM {table}", tag="test.raw")


def _in(df, column, start, end):
    t = pd.to_datetime(df[column]).dt.tz_localize(None) if len(df) else df[column]
    return df[(t >= start) & (t < end)] if len(df) else df


def _expected_summary(store, start, end):
    """The fleet row and the per-tenant allocated cost / tasks, recomputed in pandas from raw rows."""
    cc, rm, tk = _in(_raw(store, "call_costs"), "minute", start, end), _in(_raw(store, "replica_minutes"), "minute",
                                                                            start, end), \
        _in(_raw(store, "tasks"), "minute", start, end)
    fleet = {
        "spend_usd": rm["spend_usd"].sum(), "idle_usd": rm["idle_usd"].sum(), "allocated_usd": cc["cost_usd"].sum(),
        "useful_usd": cc.loc[cc["category"] == "useful", "cost_usd"].sum(),
        "failed_task_waste_usd": cc.loc[cc["category"] == "failed_task_waste", "cost_usd"].sum(),
        "useful_calls": int(cc.loc[cc["category"] == "useful", "requests"].sum()),
        "requests": int(cc["requests"].sum()), "prompt_tokens": int(cc["prompt_tokens"].sum()),
        "output_tokens": int(cc["output_tokens"].sum()), "tasks": len(tk),
        "successful_tasks": int((tk["outcome"] == "success").sum()) if len(tk) else 0,
    }
    tenants = {}
    for tenant in ("acme", "zeta"):
        c = cc[cc["tenant_id"] == tenant]
        t = tk[tk["tenant_id"] == tenant] if len(tk) else tk
        if len(c) or len(t):
            tenants[tenant] = (c["cost_usd"].sum(), len(t))
    return fleet, tenants


def _check_summary(store, start, end):
    got = cost.period_summaries(store, start, end, ("", "tenant", "replica"))
    fleet, tenants = _expected_summary(store, start, end)
    row = got[""].iloc[0]
    for key, value in fleet.items():
        if key == "useful_calls":
            continue
        assert row[key] == pytest.approx(value, **REL), (key, start, end)
    by_tenant = got["tenant"].set_index("grp")
    assert sorted(by_tenant.index) == sorted(tenants)
    for tenant, (allocated, n) in tenants.items():
        assert by_tenant.loc[tenant, "allocated_usd"] == pytest.approx(allocated, **REL)
        assert by_tenant.loc[tenant, "tasks"] == n
    rm = _in(_raw(store, "replica_minutes"), "minute", start, end)
    by_replica = got["replica"].set_index("grp")
    for replica, spend in rm.groupby("replica")["spend_usd"].sum().items():
        assert by_replica.loc[replica, "spend_usd"] == pytest.approx(spend, **REL)
    waste = waste_both(store, start, end).set_index("category")
    assert waste.loc["idle", "usd"] == pytest.approx(fleet["idle_usd"], **REL)
    assert waste.loc["useful", "usd"] == pytest.approx(fleet["useful_usd"], **REL)
    assert waste.loc["useful", "calls"] == fleet["useful_calls"]
    dq = cost.data_quality(store, start, end).set_index("replica")
    for replica, n in rm.groupby("replica").size().items():
        assert dq.loc[replica, "up_minutes"] == n
    return row


def _frames_equal(a, b):
    pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True), check_exact=False, rtol=1e-9)


def _all_queries(store, start, end):
    out = dict(cost.period_summaries(store, start, end, ("", "task_type", "tenant", "model", "replica")))
    both = cost.period_summaries(store, start, end, ("", "tenant"), {"tenant": "acme"}, previous=True)
    out |= {"acme": both[""], "acme_by_tenant": both["tenant"], "acme_previous": both["previous"]}
    out |= {"waste": cost.waste_breakdown(store, start, end), "dq": cost.data_quality(store, start, end),
            "trend_h": cost.cpst_trend(store, start, end, 3600), "trend_2h": cost.cpst_trend(store, start, end, 7200, "tenant"),
            "trend_5m": cost.cpst_trend(store, start, end, 300),
            "tri_h": cost.replica_windows(store, start, end, 3600), "tri_5m": cost.replica_windows(store, start, end, 300)}
    return out


def test_whole_hours_from_the_rollup_edges_from_raw_rows(cstore):
    _scenario(cstore)
    jobs.run_jobs(cstore, start=at(0), end=at(11400))  # 10:00 .. 13:10: hours 10, 11, 12 complete, 13 cut
    marks = cstore.query_df("SELECT hour, complete FROM cost_rollup_hours ORDER BY hour", tag="test")
    assert [(h.hour, c) for h, c in zip(marks["hour"], marks["complete"])] == [(10, 1), (11, 1), (12, 1), (13, 0)]
    # 10:30 .. 13:05: hours 11 and 12 from the rollup, 10:30-11:00 and 13:00-13:05 (not complete) raw
    span = cost.rollup_span(cstore, at(1800), at(11100))
    assert (span["rollup_start"], span["rollup_end"]) == (at(3600), at(10800))
    assert len(span["rollup_versions"]) == 2
    row = _check_summary(cstore, at(1800), at(11100))
    # spend by hand: r1 10:30-13:05 = 155 min, r2 10:50-12:10 = 80 min; $0.06 each
    assert row["spend_usd"] == pytest.approx(0.06 * (155 + 80), **REL)
    # every task's call is inside the range but T0's (10:01): five calls, T1 counted once across the edge
    assert row["requests"] == 5
    assert row["prompt_tokens"] == 2000 + 500 + 800 + 1200 + 300
    for start, end in [(at(0), at(11400)), (at(3600), at(7200)), (at(3590), at(3650)), (at(3000), at(7260)),
                       (at(0), at(10800))]:
        _check_summary(cstore, start, end)


def test_rollup_and_raw_rows_give_the_same_results(cstore):
    _scenario(cstore)
    jobs.run_jobs(cstore, start=at(0), end=at(11400))
    ranges = [(at(0), at(11400)), (at(1800), at(9000)), (at(3600), at(7200)), (at(100), at(200)), (at(0), at(10800))]
    with_rollup = {r: _all_queries(cstore, *r) for r in ranges}
    assert any(len(cost.rollup_span(cstore, *r)["rollup_versions"]) for r in ranges)
    cstore.command("TRUNCATE TABLE cost_rollup_hours", tag="test")  # no hour complete: all raw
    assert all(not cost.rollup_span(cstore, *r)["rollup_versions"] for r in ranges)
    for r in ranges:
        raw = _all_queries(cstore, *r)
        for key, frame in raw.items():
            _frames_equal(with_rollup[r][key], frame)


def test_recompute_does_not_double_count(cstore):
    _scenario(cstore)
    jobs.run_jobs(cstore, start=at(0), end=at(11400))
    once = _all_queries(cstore, at(1800), at(11100))
    # recompute overlapping windows, one ending mid-hour, one in 20-minute chunks across the edges
    jobs.run_jobs(cstore, start=at(3000), end=at(6000))
    jobs.run_jobs(cstore, start=at(1200), end=at(8400), chunk=timedelta(minutes=20))
    versions = cstore.scalar("SELECT count(DISTINCT version) FROM cost_hours WHERE hour = {h:DateTime}",
                             {"h": at(3600)}, tag="test")
    assert versions >= 3  # the hour was written three times; only its newest version is read
    again = _all_queries(cstore, at(1800), at(11100))
    for key, frame in once.items():
        _frames_equal(frame, again[key])
    _check_summary(cstore, at(1800), at(11100))


def test_the_rollup_is_read_for_whole_hours_only(cstore):
    _scenario(cstore)
    jobs.run_jobs(cstore, start=at(0), end=at(11400))
    before = cost.period_summary(cstore, at(1800), at(11100)).iloc[0]
    span = cost.rollup_span(cstore, at(1800), at(11100))
    current, old = span["rollup_versions"][0], min(span["rollup_versions"]) - 1
    row = ("INSERT INTO cost_hours (hour, version, replica, model, task_type, tenant_id, category, cost_usd, requests) "
           "VALUES ({h:DateTime}, {v:UInt64}, 'r1', 'llama', 'chat', 'acme', 'useful', 1000, 7)")
    cstore.command(row, {"h": at(3600), "v": old}, tag="test")  # an older version of hour 11: never read
    cstore.command(row, {"h": at(0), "v": current}, tag="test")  # hour 10 is a partial edge of the range: raw
    assert cost.period_summary(cstore, at(1800), at(11100)).iloc[0]["useful_usd"] == pytest.approx(
        before["useful_usd"], **REL)
    cstore.command(row, {"h": at(3600), "v": current}, tag="test")  # the current version of hour 11: read
    after = cost.period_summary(cstore, at(1800), at(11100)).iloc[0]
    assert after["useful_usd"] == pytest.approx(before["useful_usd"] + 1000, **REL)
    assert after["requests"] == before["requests"] + 7


def test_cost_queries_omit_the_rollup_reads_only_for_an_empty_span(cstore, monkeypatch):
    """Section ``rollup`` (the reads of the hourly rollups) is cut out of the statement when the span is
    empty (5-minute buckets, a range holding no whole hour; for the summary both periods' spans), kept
    otherwise; the cut path's figures are the raw rows' (test_rollup_and_raw_rows_give_the_same_results)."""
    _scenario(cstore)
    jobs.run_jobs(cstore, start=at(0), end=at(11400))
    sent = record_statements(cstore, monkeypatch)
    trend_5m = cost.cpst_trend(cstore, at(0), at(10800), 300)
    trend_h = cost.cpst_trend(cstore, at(0), at(10800), 3600)
    dq_edge = cost.data_quality(cstore, at(100), at(200))
    dq = cost.data_quality(cstore, at(0), at(10800))
    # 10:50-10:58 and the period before it (10:42-10:50) hold no whole hour; 12:00-13:00 and 11:00-12:00 one each
    edge = cost.period_summaries(cstore, at(3000), at(3480), ("", "tenant"), previous=True)
    both = cost.period_summaries(cstore, at(7200), at(10800), ("", "tenant"), previous=True)
    reads_rollup = [("FROM cost_hours" in text) for tag, text in sent
                    if tag in ("query.cost_cpst_trend", "query.cost_data_quality", "query.cost_period_summary")]
    assert reads_rollup == [False, True, False, True, False, True]
    # spend by hand, $0.06 a replica-minute: r1 and r2 8 min each; before it r1 alone (r2 from 10:50)
    assert one(edge[""])["spend_usd"] == pytest.approx(0.06 * (8 + 8), **REL)
    assert one(edge["previous"])["spend_usd"] == pytest.approx(0.06 * 8, **REL)
    assert one(both[""])["spend_usd"] == pytest.approx(0.06 * (60 + 10), **REL)  # r2 until 12:10
    assert one(both["previous"])["spend_usd"] == pytest.approx(0.06 * (60 + 60), **REL)
    assert trend_5m["spend_usd"].sum() == pytest.approx(trend_h["spend_usd"].sum(), **REL)
    # spend by hand: r1 10:00-13:00 = 180 min, r2 10:50-12:10 = 80 min; $0.06 each
    assert trend_h["spend_usd"].sum() == pytest.approx(0.06 * (180 + 80), **REL)
    assert dq.set_index("replica")["up_minutes"].to_dict() == {"r1": 180, "r2": 80}
    assert dq_edge.set_index("replica")["up_minutes"].to_dict() == {"r1": 2}


def test_incomplete_hours_are_read_raw_and_pending_hours_rolled_up(cstore):
    _scenario(cstore)
    # two runs ending mid-hour: 10:00-11:30 then 11:30-13:10; hour 11 is complete only after the second
    jobs.run_jobs(cstore, start=at(0), end=at(5400))
    assert cost.rollup_span(cstore, at(0), at(10800))["rollup_end"] == at(3600)
    _check_summary(cstore, at(0), at(10800))
    jobs.run_jobs(cstore, start=at(5400), end=at(11400))
    assert cost.rollup_span(cstore, at(0), at(10800))["rollup_end"] == at(10800)
    _check_summary(cstore, at(0), at(10800))
    # the periodic chain's hours come without rollups: roll_up_pending fills them
    for table in ("cost_rollup_hours", "cost_hours", "cost_replica_hours", "cost_task_hours", "cost_triangle_hours"):
        cstore.command(f"TRUNCATE TABLE {table}", tag="test")
    assert jobs.roll_up_pending(cstore, retention_days=36500) == (at(0), at(10800))
    assert jobs.roll_up_pending(cstore, retention_days=36500) is None
    assert cost.rollup_span(cstore, at(0), at(10800))["rollup_end"] == at(10800)
    _check_summary(cstore, at(0), at(10800))


def _nearest_rank(values, level=0.99):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(level * len(ordered)))] if ordered else None


def test_triangle_from_the_rollup_matches_the_raw_rows(cstore):
    _scenario(cstore)
    jobs.run_jobs(cstore, start=at(0), end=at(11400))
    start, end = at(1800), at(11100)
    got = cost.replica_windows(cstore, start, end, 3600)
    assert len(cost.rollup_span(cstore, start, end, 3600)["rollup_versions"]) == 2
    calls = _raw(cstore, "llm_calls")
    calls = _in(calls[calls["call_source"] == "engine"], "end_time", start, end)
    calls = calls.assign(window=pd.to_datetime(calls["end_time"]).dt.tz_localize(None).dt.floor("h"))
    tk = _in(_raw(cstore, "tasks"), "minute", start, end)
    cc = _raw(cstore, "call_costs")
    ok = tk[tk["outcome"] == "success"]
    pairs = ok.merge(cc[["task_id", "replica"]], on="task_id").drop_duplicates(["task_id", "replica"])
    pairs = pairs.assign(window=pd.to_datetime(pairs["minute"]).dt.tz_localize(None).dt.floor("h"))
    rm = _in(_raw(cstore, "replica_minutes"), "minute", start, end)
    rm = rm.assign(window=pd.to_datetime(rm["minute"]).dt.tz_localize(None).dt.floor("h"))
    got = got.assign(window=pd.to_datetime(got["window_start"]).dt.tz_localize(None)).set_index(["replica", "window"])
    assert set(got.index) == set(rm.groupby(["replica", "window"]).size().index)
    for (replica, window), g in rm.groupby(["replica", "window"]):
        row = got.loc[(replica, window)]
        assert row["spend_usd"] == pytest.approx(g["spend_usd"].sum(), **REL)
        c = calls[(calls["replica"] == replica) & (calls["window"] == window)]
        assert row["requests"] == len(c)
        if len(c):
            assert row["ttft_p99_s"] == pytest.approx(_nearest_rank(c["ttft_s"]), **REL)
            assert row["e2e_p99_s"] == pytest.approx(_nearest_rank(c["e2e_s"]), **REL)
        s = pairs[(pairs["replica"] == replica) & (pairs["window"] == window)]
        assert row["successful_tasks"] == len(s)
    # by hand: T1's call ended 11:00:30 on r1 and its task succeeded at 11:00 (ended 11:00:35)
    assert got.loc[("r1", at(3600)), "requests"] == 1
    assert got.loc[("r1", at(3600)), "successful_tasks"] == 1
    assert got.loc[("r1", at(3600)), "spend_usd"] == pytest.approx(3.60, **REL)
    assert got.loc[("r1", at(1800 - 1800)), "spend_usd"] == pytest.approx(0.06 * 30, **REL)  # 10:30-11:00 only


# The triangle's 6-hour blocks (migration 1003, schema/jobs/run_cost_blocks.sql). Extra engine calls
# on r1 before the scenario's, in hours 07-09 of the block 06:00-12:00: the block's largest TTFT is in
# hour 08 and its largest e2e in hour 09, so a p99 (nearest rank: the maximum below 100 calls) taken
# from one hour only, or from the wrong hours, differs from the block's.
# (task, call start s, call end s, ttft s)
EARLY = [("E0", -10800, -10790, 0.20), ("E1", -7000, -6990, 0.90), ("E2", -6900, -6800, 0.30),
         ("E3", -3500, -3000, 0.40)]
B0 = at(-14400)  # 06:00, the block the runs below complete


def _block_scenario(store):
    _scenario(store)
    sp = Spans()
    for task, start, end, ttft in EARLY:
        sp.task(f"tr{task}", task, start - 1, end + 5, tenant="acme")
        sp.call(task_id=task, tenant="acme", replica="r1", start=start, end=end, prompt=400, output=40,
                trace=f"tr{task}", ttft=ttft)
    sp.flush(store)
    jobs.run_jobs(store, start=B0, end=at(11400))  # 06:00 .. 13:10: hours 06-12 complete, 13 cut


def _expected_windows(store, start, end, seconds):
    """Engine requests and nearest-rank p99s per (replica, window), recomputed in pandas from llm_calls."""
    calls = _raw(store, "llm_calls")
    calls = _in(calls[calls["call_source"] == "engine"], "end_time", start, end)
    calls = calls.assign(window=pd.to_datetime(calls["end_time"]).dt.tz_localize(None).dt.floor(f"{seconds}s"))
    return {key: (len(g), _nearest_rank(g["ttft_s"]), _nearest_rank(g["e2e_s"]))
            for key, g in calls.groupby(["replica", "window"])}


def _check_windows(got, expected):
    got = got.assign(window=pd.to_datetime(got["window_start"]).dt.tz_localize(None))
    engine = got[got["requests"] > 0].set_index(["replica", "window"])
    assert sorted(engine.index) == sorted(expected)
    for key, (n, ttft, e2e) in expected.items():
        assert engine.loc[key, "requests"] == n, key
        assert engine.loc[key, "ttft_p99_s"] == pytest.approx(ttft, **REL), key
        assert engine.loc[key, "e2e_p99_s"] == pytest.approx(e2e, **REL), key


def test_triangle_blocks_hold_the_exact_p99_of_their_hours(cstore):
    _block_scenario(cstore)
    start, end = B0, at(11100)  # 06:00 .. 13:05: the window 06:00 is the block, 12:00 is partial
    span = cost.rollup_span(cstore, start, end, 21600)
    assert span["block_starts"] == [B0] and len(span["rollup_versions"]) == 7
    blocks = cstore.query_df("SELECT replica, requests, ttft_p99_s, e2e_p99_s FROM cost_triangle_blocks "
                             "WHERE block_seconds = 21600 AND block_start = {b:DateTime} ORDER BY replica",
                             {"b": B0}, tag="test")
    expected = _expected_windows(cstore, start, end, 21600)
    # by hand: r1 ran E0-E3 (07:00-09:10), T0 (10:01) and T1 (ended 11:00:30) in the block
    assert list(blocks["replica"]) == ["r1", "r2"] and list(blocks["requests"]) == [6, 2]
    assert blocks["ttft_p99_s"][0] == pytest.approx(0.90, **REL)  # E1's, hour 08
    assert blocks["e2e_p99_s"][0] == pytest.approx(500.0, **REL)  # E3's, hour 09
    got = cost.replica_windows(cstore, start, end, 21600)
    _check_windows(got, expected)
    # the same frame from the hours' states alone (no block readable)
    cstore.command("TRUNCATE TABLE cost_triangle_block_marks", tag="test")
    assert cost.rollup_span(cstore, start, end, 21600)["block_starts"] == []
    _frames_equal(got, cost.replica_windows(cstore, start, end, 21600))


def test_triangle_block_versions_old_and_stale_marks_are_ignored(cstore):
    _block_scenario(cstore)
    start, end = B0, at(11100)
    before = cost.replica_windows(cstore, start, end, 21600)
    version = cost.rollup_span(cstore, start, end, 21600)["block_versions"][0]
    row = ("INSERT INTO cost_triangle_blocks (block_start, block_seconds, version, replica, requests, ttft_p99_s, "
           "e2e_p99_s) VALUES ({b:DateTime}, 21600, {v:UInt64}, 'r3', 7, 9.5, 99.5)")
    cstore.command(row, {"b": B0, "v": version - 1}, tag="test")  # an older version of the block: never read
    _frames_equal(before, cost.replica_windows(cstore, start, end, 21600))
    cstore.command(row, {"b": B0, "v": version}, tag="test")  # the current version: read (the block is used)
    tampered = cost.replica_windows(cstore, start, end, 21600).set_index("replica")
    assert tampered.loc["r3", "requests"] == 7 and tampered.loc["r3", "ttft_p99_s"] == pytest.approx(9.5, **REL)
    # a recompute of hour 08 gives it a new version: the block's mark no longer names the hours'
    # versions, so the hours are merged (the tampered row is no longer read) until the rollup step of
    # that run writes the block again, from the new versions
    jobs.run_jobs(cstore, start=at(-7200), end=at(-6600))
    span = cost.rollup_span(cstore, start, end, 21600)
    assert span["block_starts"] == [B0] and span["block_versions"][0] > version
    assert cstore.scalar("SELECT count() FROM cost_triangle_block_marks WHERE block_start = {b:DateTime} "
                         "AND block_seconds = 21600", {"b": B0}, tag="test") == 2
    _frames_equal(before, cost.replica_windows(cstore, start, end, 21600))
    _check_windows(before, _expected_windows(cstore, start, end, 21600))
    # a newer complete version of hour 09 with no block written for it (the periodic chain's copy):
    # the block is not read; roll_up_pending writes it
    cstore.command("INSERT INTO cost_rollup_hours (hour, version, complete) VALUES ({h:DateTime}, {v:UInt64}, 1)",
                   {"h": at(-3600), "v": 2**62}, tag="test")
    for table in ("cost_triangle_hours", "cost_replica_hours"):
        # (a subquery: in the outer WHERE, `version` would name the replaced column)
        cstore.command(f"INSERT INTO {table} SELECT * REPLACE (toUInt64({2**62}) AS version) FROM (SELECT * FROM "
                       f"{table} WHERE hour = {{h:DateTime}} AND version = {{old:UInt64}})",
                       {"h": at(-3600), "old": span["rollup_versions"][3]}, tag="test")
    assert cstore.scalar("SELECT count() FROM cost_triangle_hours WHERE version = {v:UInt64}", {"v": 2**62},
                         tag="test") == 2  # r1's engine and successes rows
    assert cost.rollup_span(cstore, start, end, 21600)["block_starts"] == []
    _frames_equal(before, cost.replica_windows(cstore, start, end, 21600))
    assert jobs.roll_up_pending(cstore, retention_days=36500) is None
    assert cost.rollup_span(cstore, start, end, 21600)["block_starts"] == [B0]
    _frames_equal(before, cost.replica_windows(cstore, start, end, 21600))


def test_a_range_starting_before_the_rolled_up_hours_reads_them_from_the_rollup(cstore):
    """A range starting before the first hour the jobs rolled up (08:00, the jobs ran from 10:00; a
    7-day range over a store with less) reads the rolled-up hours from the rollups anyway (the span is
    the longest run of complete hours, not only one from the range's first hour: it read the whole
    range raw, ~10x the time at 10M calls), the hours before and after it raw: the same figures as
    every hour read raw (the marks removed)."""
    _scenario(cstore)
    jobs.run_jobs(cstore, start=at(0), end=at(11400))  # hours 10, 11, 12 complete
    span = cost.rollup_span(cstore, at(-7200), at(11100))
    assert (span["rollup_start"], span["rollup_end"]) == (at(0), at(10800))
    assert len(span["rollup_versions"]) == 3
    row = _check_summary(cstore, at(-7200), at(11100))
    assert row["spend_usd"] == pytest.approx(0.06 * (185 + 80), **REL)  # r1 10:00-13:05, r2 10:50-12:10
    assert row["requests"] == 6
    ranges = [(at(-7200), at(11100)), (at(-1800), at(7200)), (at(-3600), at(10800))]
    read = {r: _all_queries(cstore, *r) for r in ranges}
    assert all(cost.rollup_span(cstore, *r)["rollup_versions"] for r in ranges)
    cstore.command("TRUNCATE TABLE cost_rollup_hours", tag="test")
    for r in ranges:
        assert not cost.rollup_span(cstore, *r)["rollup_versions"]
        for key, frame in _all_queries(cstore, *r).items():
            _frames_equal(read[r][key], frame)


def test_shared_spans_ask_once_per_range_and_answer_as_alone(cstore):
    """Inside ``cost.shared_spans()`` (one page script run) every unit of a range gets the span it gets
    alone, from one query per range and block size; the queries' figures are the same frames."""
    _block_scenario(cstore)
    ranges = [(B0, at(11100)), (at(1800), at(11100)), (at(100), at(200))]
    units = (60, 300, 3600, 7200, 21600, 86400)
    alone = {(r, u): cost.rollup_span(cstore, *r, u) for r in ranges for u in units}
    frames = {r: _all_queries(cstore, *r) for r in ranges}
    calls = []
    original = cstore._call

    def counting(tag, fn, *args, **kwargs):
        calls.append(tag)
        return original(tag, fn, *args, **kwargs)

    cstore._call = counting
    try:
        with cost.shared_spans():
            for (r, u), span in alone.items():
                assert cost.rollup_span(cstore, *r, u) == span, (r, u)
            # a caller changing its copy changes nothing shared
            cost.rollup_span(cstore, *ranges[0], 3600)["rollup_versions"].append(-1)
            assert cost.rollup_span(cstore, *ranges[0], 3600) == alone[(ranges[0], 3600)]
            # the spans without blocks: one query, its window [start - (end - start) or end - 8 days, end)
            # of the first range covers the others (all end at or before its end); with blocks one
            # per range and block size (6 h, 1 day)
            assert calls.count("query.cost_rollup_span") == 1 + len(ranges) * 2
            for r in ranges:
                for key, frame in _all_queries(cstore, *r).items():
                    _frames_equal(frames[r][key], frame)
            # each range's previous period (period_summaries(..., previous=True)) and the budgets' week
            # are inside that window: no more queries
            week = (cost._first_hour(at(11100) - timedelta(days=at(11100).weekday(), hours=at(11100).hour)), at(11100))
            assert cost.rollup_span(cstore, *week) == cost._rollup_span(cstore, *week, 3600, 0)
            assert calls.count("query.cost_rollup_span") == 1 + len(ranges) * 2 + 1  # (the one asked alone)
            # a range ending after the window: read again (its own window)
            later = (at(100), at(11400))
            assert cost.rollup_span(cstore, *later) == cost._rollup_span(cstore, *later, 3600, 0)
            assert calls.count("query.cost_rollup_span") == 1 + len(ranges) * 2 + 3
        cost.rollup_span(cstore, *ranges[0], 3600)  # outside the block: asked again
        assert calls.count("query.cost_rollup_span") == 1 + len(ranges) * 2 + 4
    finally:
        cstore._call = original
    assert any(alone[(r, 3600)]["rollup_versions"] for r in ranges)
    assert any(alone[(r, 21600)]["block_starts"] for r in ranges)


def test_the_previous_period_in_the_same_query_is_its_own_summary(cstore):
    """``period_summaries(..., previous=True)["previous"]`` is exactly ``period_summary`` of the period of
    the same length before (the cost page's deltas), with and without filters, when the boundary cuts
    an hour (read raw on both sides) or falls on one, and the current period's frames do not change."""
    _scenario(cstore)
    jobs.run_jobs(cstore, start=at(0), end=at(11400))
    ranges = [(at(5400), at(11100)), (at(7200), at(10800)), (at(5430), at(9000)), (at(3600), at(7200)),
              (at(60), at(120)), (at(9000), at(12600))]
    for start, end in ranges:
        prev_start = start - (end - start)
        for filters in ({}, {"tenant": "acme"}, {"tenant": "zeta", "model": "llama"}):
            alone = cost.period_summaries(cstore, start, end, ("", "task_type", "replica"), filters)
            both = cost.period_summaries(cstore, start, end, ("", "task_type", "replica"), filters, previous=True)
            assert sorted(both) == sorted([*alone, "previous"])
            for key, frame in alone.items():
                _frames_equal(frame, both[key])
            _frames_equal(cost.period_summary(cstore, prev_start, start, None, filters), both["previous"])
            # hours with data: review.coverage's, fleet-wide whatever the filter
            for key, (a, b) in (("", (start, end)), ("previous", (prev_start, start))):
                assert both[key].iloc[0]["hours_with_data"] == review.coverage(cstore, a, b)["hours_with_data"]
    # by hand: the 95 minutes before 11:30 .. 13:05 are 09:55 .. 11:30: r1 up 10:00-11:30 (90 min), r2
    # 10:50-11:30 (40 min) at $0.06; T0, T1, T2 (a failure) and T3 (11:25:05) ended in it
    prev = cost.period_summaries(cstore, at(5400), at(11100), ("",), previous=True)["previous"].iloc[0]
    assert prev["spend_usd"] == pytest.approx(0.06 * (90 + 40), **REL)
    assert (prev["tasks"], prev["successful_tasks"]) == (4, 3)
    assert prev["hours"] == pytest.approx(95 / 60, **REL)
    assert prev["hours_with_data"] == 2  # hours 10 and 11 (09:55-10:00 has no replica-minute)


def test_tasks_table_is_the_newest_tasks_of_the_raw_rows(cstore):
    """``tasks_table`` reads only the minutes of its newest ``limit`` tasks: every limit (ties inside a
    minute: T1 and T2 both end at 11:00) and search gives the raw rows' own newest-first head."""
    _scenario(cstore)
    jobs.run_jobs(cstore, start=at(0), end=at(11400))
    raw = _raw(cstore, "tasks")
    assert len(raw) == len(TASKS)
    for start, end in [(at(0), at(11400)), (at(3600), at(7200)), (at(3600), at(3660))]:
        for search in ("", "ZETA", "t1", "nothing"):
            rows = _in(raw, "minute", start, end)
            if search:
                hit = lambda v: search.lower() in str(v).lower()  # noqa: E731
                rows = rows[rows["task_id"].map(hit) | rows["task_type"].map(hit) | rows["tenant_id"].map(hit)]
            ordered = list(rows.sort_values(["task_id"]).sort_values("end_time", ascending=False, kind="stable")["task_id"])
            for limit in range(1, len(TASKS) + 2):
                got = cost.tasks_table(cstore, start, end, search or None, limit)
                assert list(got["task_id"]) == ordered[:limit], (start, end, search, limit)
    # by hand: the two newest of the day, and the 11:00 minute's two tasks (T2 ended after T1)
    assert list(cost.tasks_table(cstore, at(0), at(11400), None, 2)["task_id"]) == ["T5", "T4"]
    assert list(cost.tasks_table(cstore, at(3600), at(3660), None, 5)["task_id"]) == ["T2", "T1"]


def test_budget_spend_from_the_rollups_is_the_raw_rows(cstore):
    """``budget_status`` reads the week's rolled-up hours from the rollups (it read a week of
    call pieces on every cost page): the same spend as the raw rows, mid-hour, on the hour, with the
    last hour incomplete, and the next day (the week's spend, none in the day)."""
    from schema.budgets import Budget, sync_budgets
    from schema.queries.budgets import budget_status

    _scenario(cstore)
    jobs.run_jobs(cstore, start=at(-36000), end=at(11400))  # from Monday 00:00: the week's hours rolled up
    sync_budgets(cstore, [Budget("tenant", "acme", "day", 1.0), Budget("tenant", "zeta", "week", 2.0),
                          Budget("task_type", "chat", "week", 3.0)])
    pieces = _raw(cstore, "call_costs")
    nows = [at(9000), at(10800), at(11100), at(11400), at(86400 + 1800)]
    with_rollup = {now: budget_status(cstore, now) for now in nows}
    assert len(cost.rollup_span(cstore, at(-36000), at(11100))["rollup_versions"]) == 13  # hours 00-12
    cstore.command("TRUNCATE TABLE cost_rollup_hours", tag="test")
    for now in nows:
        raw = budget_status(cstore, now)
        _frames_equal(with_rollup[now], raw)
        day = now.replace(hour=0, minute=0, second=0)
        spent = raw.set_index(["scope", "name"])["spent_usd"]
        by_hand = {("tenant", "acme"): _in(pieces, "minute", day, now).query("tenant_id == 'acme'")["cost_usd"].sum(),
                   ("tenant", "zeta"): _in(pieces, "minute", at(-36000), now).query("tenant_id == 'zeta'")["cost_usd"].sum(),
                   ("task_type", "chat"): _in(pieces, "minute", at(-36000), now).query("task_type == 'chat'")["cost_usd"].sum()}
        for key, value in by_hand.items():
            assert spent[key] == pytest.approx(value, **REL), (now, key)
    assert spent[("tenant", "acme")] == 0 and spent[("tenant", "zeta")] > 0  # Tuesday: the day is empty
