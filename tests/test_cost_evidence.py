"""Counter evidence and the calls it may be charged to, by hand (schema/jobs/README.md,
"allocation": gap work).

One replica r1 = 1 x H100 at $3.60/GPU-hour ($0.06 a minute), ``capacity: 1000`` work units a
minute, w_prefill 0.25, w_decode 1.0, scraped every 10 s through the product's scraper (vLLM 0.32's
page, tests/producers.py). Spans in their producers' shapes (tests/test_cost_support.py). Each test is a
kind of fault with its right value worked out in the comments first; T0 = 10:00:00 UTC.
"""

from __future__ import annotations

import pytest

from schema import jobs
from schema import semconv as sc
from schema.queries import cost
from tests.producers import scrape, vllm_metrics_page
from tests.test_cost_scenarios import EXACT, cost_uncounted_engine_call, minutes, ns, unix
from tests.test_cost_support import _module_store, cstore, Spans, at, fleet_yaml, one, sync, waste_both  # noqa: F401

FLEET = dict(w_prefill=0.25, capacity=1000)


def counters(store, points, *, created: float = 0.0, replica: str = "r1") -> None:
    """Scrapes of r1 at each ``(second, page values)``: cumulative counters of a series started at
    ``created`` seconds after T0; ``None`` values = a failed scrape."""
    for t, values in points:
        page = None if values is None else vllm_metrics_page([{"running": 1, "created": unix(created), **values}])
        scrape(store, page, replica=replica, at_ns=ns(t))


# --- 1. counter work is never charged to a call that did no engine work ----------------------------

def test_counter_work_is_not_charged_to_an_attempt_answered_429(cstore):
    sync(cstore, fleet_yaml(**FLEET))
    # Minute 0: r1 counts the retry's 400 / 100 by 0:20, then 2000 / 100 more whose spans were lost.
    counters(cstore, [(10, dict(prompt=0, generation=0)), (20, dict(prompt=400, generation=100)),
                      (30, dict(prompt=400, generation=100)), (40, dict(prompt=2400, generation=200)),
                      (50, dict(prompt=2400, generation=200))])
    sp = Spans()
    sp.task("trR", "R", 4, 25)
    # attempt 1: the gateway's attempt answered 429 by r1 (no byte of a completion, no engine work)
    rejected = sp.call(task_id="R", attempt=1, start=5, end=5.02, prompt=1000, output=0, streamed=0, ok=False,
                       engine=False, error_type="http.429", upstream_status=429, trace="trR")
    # attempt 2: served, with vLLM's span: 400 prompt / 100 out
    served = sp.call(task_id="R", attempt=2, start=10, end=20, prompt=400, output=100, trace="trR")
    sp.flush(cstore)
    jobs.run_jobs(cstore, start=at(0), end=at(120))
    calls = cost.task_calls(cstore, "R").set_index("call_id")
    # counters 2400 / 200, the retry explains 400 / 100: 0.25 x 2000 + 100 = 600 work units no span
    # explains. The 429 did no engine work: work 0, $0 (was 600, $0.036 of retry waste); the 600 are
    # unspanned: $0.06 x 600 / 1000 = $0.036. The retry: 0.25 x 400 + 100 = 200, $0.012, useful.
    assert calls.loc[rejected.attempt, "error_class"] == "rejected"
    assert calls.loc[rejected.attempt, "work"] == 0 and calls.loc[rejected.attempt, "cost_usd"] == 0
    assert calls.loc[served.engine, "work"] == pytest.approx(200, **EXACT)
    assert calls.loc[served.engine, "cost_usd"] == pytest.approx(0.012, **EXACT)
    assert calls.loc[served.engine, "category"] == "useful"
    rm = minutes(cstore, "gap_work, unspanned_usd, allocated_usd, idle_usd").iloc[0]
    assert rm["gap_work"] == pytest.approx(600, **EXACT)
    assert rm["unspanned_usd"] == pytest.approx(0.036, **EXACT)
    assert (rm["allocated_usd"], rm["idle_usd"]) == (pytest.approx(0.048, **EXACT), pytest.approx(0.012, **EXACT))
    waste = waste_both(cstore, at(0), at(60)).set_index("category")
    assert waste.loc["unspanned", "usd"] == pytest.approx(0.036, **EXACT)
    assert "retry_waste" not in waste.index or waste.loc["retry_waste", "usd"] == 0
    assert one(cost.tasks_table(cstore, at(0), at(120)))["cost_usd"] == pytest.approx(0.012, **EXACT)


def test_a_429_and_a_refused_connection_beside_a_broken_stream_take_none_of_its_work(cstore):
    sync(cstore, fleet_yaml(**FLEET))
    # Minute 0: 224 prompt tokens no span explains: 0.25 x 224 = 56 work units.
    counters(cstore, [(10, dict(prompt=0, generation=0)), (40, dict(prompt=224, generation=0)),
                      (50, dict(prompt=224, generation=0))])
    sp = Spans()
    sp.task("trB", "B", 9, 31, outcome="failure")
    # a stream broken after prefill, before its first chunk (HTTP 200, nothing more: prompt unknown)
    broken = sp.call(task_id="B", step="s", start=10, end=30, prompt=224, output=0, streamed=0, ok=False,
                     engine=False, trace="trB")
    # beside it, two attempts that did no engine work: one answered 429 (0.2 s inside the counters'
    # span: it took 56 x 0.2 / 20.2 = 0.55 of the stream's work), one whose connection was refused
    rejected = sp.call(task_id="B", step="t", start=12, end=12.2, output=0, streamed=0, ok=False, engine=False,
                       error_type="http.429", upstream_status=429, trace="trB")
    refused = sp.call(task_id="B", step="u", start=15, end=15.001, output=0, streamed=0, ok=False, engine=False,
                      error_type="connection_error", upstream_status=None, trace="trB")
    sp.flush(cstore)
    jobs.run_jobs(cstore, start=at(0), end=at(120))
    calls = cost.task_calls(cstore, "B").set_index("call_id")
    # the stream takes all 56 ($0.06 x 56 / 1000 = $0.00336); the other two nothing
    assert calls.loc[broken.attempt, "work"] == pytest.approx(56, **EXACT)
    assert calls.loc[broken.attempt, "cost_usd"] == pytest.approx(0.00336, **EXACT)
    for ids in (rejected, refused):
        assert calls.loc[ids.attempt, "work"] == 0 and calls.loc[ids.attempt, "cost_usd"] == 0
    assert minutes(cstore, "unspanned_usd").iloc[0]["unspanned_usd"] == 0


# --- 2. the cached-token estimate only uses hits no span reported ---------------------------------

def test_cached_estimate_leaves_out_the_hits_spans_reported(cstore):
    sync(cstore, fleet_yaml(**FLEET))
    # Minute 0's counters: prompt 4000, cached 2000, generated 350.
    counters(cstore, [(10, dict(prompt=0, generation=0, cached=0)), (30, dict(prompt=4000, generation=350, cached=2000)),
                      (50, dict(prompt=4000, generation=350, cached=2000))])
    sp = Spans()
    # S: prompt 3000, 2000 of them cached (the usage's prompt_tokens_details), 200 out
    s = sp.call(task_id=None, start=5, end=25, prompt=3000, cached=2000, output=200)
    # M: prompt 1000, nothing cached: vLLM leaves prompt_tokens_details out, so no count anywhere
    m = sp.call(task_id=None, start=6, end=26, prompt=1000, output=150)
    sp.flush(cstore)
    jobs.run_jobs(cstore, start=at(0), end=at(120))
    rows = cstore.query_df("SELECT call_id, cached_tokens, cached_estimated, work, cost_usd FROM call_costs",
                           tag="test").set_index("call_id")
    # The counters' 2000 hits are S's, reported: none is left for M (the minute's rate 0.5 would
    # have given M 500 cached, work 275, $0.0165). M: cached 0, work 0.25 x 1000 + 150 = 400,
    # $0.06 x 400 / 1000 = $0.024; S: 0.25 x 1000 + 200 = 450, $0.027.
    assert rows.loc[m.engine, "cached_tokens"] == 0
    assert rows.loc[m.engine, "work"] == pytest.approx(400, **EXACT)
    assert rows.loc[m.engine, "cost_usd"] == pytest.approx(0.024, **EXACT)
    assert (rows.loc[s.engine, "cached_tokens"], rows.loc[s.engine, "cached_estimated"]) == (2000, 0)
    assert rows.loc[s.engine, "cost_usd"] == pytest.approx(0.027, **EXACT)
    rm = minutes(cstore, "cached_tokens, counter_cached_tokens").iloc[0]
    assert (rm["cached_tokens"], rm["counter_cached_tokens"]) == (2000, 2000)


def test_cached_estimate_shares_the_unreported_hits_among_the_calls_without_a_count(cstore):
    sync(cstore, fleet_yaml(**FLEET))
    # Minute 0: prompt 5000, cached 2600. S reports 2000 of its 3000; M1 (1000) and M2 (1000) report
    # nothing: 600 hits are left for their 2000 prompt tokens, a rate of 0.3: 300 cached each.
    counters(cstore, [(10, dict(prompt=0, generation=0, cached=0)), (40, dict(prompt=5000, generation=30, cached=2600))])
    sp = Spans()
    sp.call(task_id=None, start=5, end=25, prompt=3000, cached=2000, output=10)
    m1 = sp.call(task_id=None, start=6, end=26, prompt=1000, output=10)
    m2 = sp.call(task_id=None, start=7, end=27, prompt=1000, output=10, client=False, gateway=False)
    sp.flush(cstore)
    jobs.run_jobs(cstore, start=at(0), end=at(120))
    rows = cstore.query_df("SELECT call_id, cached_tokens, cached_estimated, work FROM call_costs", tag="test"
                           ).set_index("call_id")
    for ids in (m1, m2):
        assert (rows.loc[ids.engine, "cached_tokens"], rows.loc[ids.engine, "cached_estimated"]) == (300, 1)
        assert rows.loc[ids.engine, "work"] == pytest.approx(0.25 * 700 + 10, **EXACT)
    assert minutes(cstore, "cached_tokens").iloc[0]["cached_tokens"] == 2600


def test_a_call_in_a_minute_without_counters_takes_the_windows_unreported_hits(cstore):
    sync(cstore, fleet_yaml(**FLEET))
    # Scrapes at 0:45 (nothing yet) and 1:45: prompt 4000, cached 2000 in minute 1, minute 0 has no rate.
    counters(cstore, [(45, dict(prompt=0, generation=0, cached=0)), (105, dict(prompt=4000, generation=350, cached=2000))])
    sp = Spans()
    # M starts in minute 0 (no rate there: the window's is used), S in minute 1 and reports 2000 of its 3000
    m = sp.call(task_id=None, start=55, end=75, prompt=1000, output=150)
    sp.call(task_id=None, start=62, end=80, prompt=3000, cached=2000, output=200)
    sp.flush(cstore)
    jobs.run_jobs(cstore, start=at(0), end=at(120))
    # over the window: 0.5 x 4000 = 2000 hits, all reported by S: none left for M (the window's
    # rate alone would have given it 500)
    row = one(cstore.query_df("SELECT sum(cached_tokens) AS cached, sum(work) AS work FROM call_costs "
                              "WHERE call_id = {c:String}", {"c": m.engine}, tag="test"))
    assert row["cached"] == 0 and row["work"] == pytest.approx(400, **EXACT)


# --- 3. a restarted counter series covers only its own lifetime -----------------------------------

def test_a_restarted_series_is_not_read_back_to_before_the_restart(cstore):
    sync(cstore, fleet_yaml(**FLEET))
    # r1 (series started at T0) until it crashes at 2:25; its scrapes at 2:30-3:00 fail; it restarts
    # at 3:01 (new series, start time 181 s) and is scraped again from 3:10.
    # X: a gateway attempt at 2:10-2:25 whose stream broke after 20 tokens when r1 crashed; prompt 800
    # from the first chunk (its first token at ~2:10.1). The counters at 2:20 / 2:30... saw its prompt
    # at 2:20 and 13 of its tokens by 2:20 (20 x 9.9 / 14.9 spread evenly: 13.29 counted, no residual).
    old = [(t, dict(prompt=0, generation=0)) for t in range(10, 130, 10)]
    old += [(130, dict(prompt=0, generation=0)), (140, dict(prompt=800, generation=13))]
    counters(cstore, old)
    counters(cstore, [(t, None) for t in (150, 160, 170, 180)])
    # After the restart a request whose spans were lost runs at 3:05-3:15: prompt 1000, output 50.
    counters(cstore, [(190, dict(prompt=1000, generation=22)), (200, dict(prompt=1000, generation=50)),
                      (210, dict(prompt=1000, generation=50)), (230, dict(prompt=1000, generation=50))], created=181)
    sp = Spans()
    sp.task("trX", "X", 129, 150, outcome="failure")
    x = sp.call(task_id="X", start=130, end=145, prompt=800, output=0, streamed=20, ok=False, partial=True,
                engine=False, trace="trX")
    sp.flush(cstore)
    jobs.run_jobs(cstore, start=at(0), end=at(300))
    call = one(cost.task_calls(cstore, "X"))
    # X: 0.25 x 800 + 20 = 220 work units in minute 2, $0.06 x 220 / 1000 = $0.0132. Minute 3's
    # counters (1000 / 50, the new series) cover (3:01, 3:50], not from 2:20: X ended before the
    # restart and takes none of their 0.25 x 1000 + 50 = 300 work units (it took 293, work 513,
    # $0.0308). The 300 are unspanned: $0.06 x 300 / 1000 = $0.018.
    assert call["call_id"] == x.attempt
    assert call["work"] == pytest.approx(220, **EXACT)
    assert call["cost_usd"] == pytest.approx(0.0132, **EXACT)
    rm = minutes(cstore, "minute, gap_work, unspanned_usd").set_index("minute")
    assert rm.loc[at(120), "gap_work"] == 0
    assert rm.loc[at(180), "gap_work"] == pytest.approx(300, **EXACT)
    assert rm.loc[at(180), "unspanned_usd"] == pytest.approx(0.018, **EXACT)
    covers = one(cstore.query_df("SELECT covers_from, covers_to FROM job_engine_counters(ws = {ws:DateTime}, "
                                 "we = {we:DateTime}) WHERE minute = {m:DateTime}",
                                 {"ws": at(0), "we": at(300), "m": at(180)}, tag="test"))
    assert (covers["covers_from"], covers["covers_to"]) == (at(181), at(230))


# --- 6. cached tokens by source -------------------------------------------------------------------

def test_cached_tokens_by_source_come_before_the_prefix_cache_hit_rate(cstore):
    sync(cstore, fleet_yaml(**FLEET))
    # Minute 1: 1000 prompt tokens, by source 600 computed, 300 from the local prefix cache and 100
    # transferred from another instance: 400 cached (the prefix cache's own hits / queries, 100 /
    # 1000, count only local hits against every query). No prompt_tokens_cached on this page.
    zero = dict(prompt=0, generation=0, queries=0, hits=0,
                by_source={"local_compute": 0, "local_cache_hit": 0, "external_kv_transfer": 0})
    counters(cstore, [(45, zero), (105, dict(prompt=1000, generation=20, queries=1000, hits=100, by_source={
        "local_compute": 600, "local_cache_hit": 300, "external_kv_transfer": 100}))])
    row = cost_uncounted_engine_call(cstore)
    # rate 400 / 1000: 400 cached, estimated; work 0.25 x 600 + 20 = 170
    assert (row["cached_tokens"], row["cached_estimated"]) == (400, 1)
    assert row["work"] == pytest.approx(170, **EXACT)
    rm = minutes(cstore, "counter_cached_tokens, counter_hit_rate").iloc[1]
    assert rm["counter_cached_tokens"] == 400 and rm["counter_hit_rate"] == pytest.approx(0.4, **EXACT)


@pytest.mark.parametrize("name", [sc.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS, sc.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS])
def test_a_span_reporting_cache_writes_reported_its_cache_use(cstore, name):
    sync(cstore, fleet_yaml(**FLEET))
    counters(cstore, [(45, dict(prompt=0, generation=0, cached=0)),
                      (105, dict(prompt=2000, generation=40, cached=1000))])
    sp = Spans()
    # W: its usage says 1000 prompt tokens were written to the cache and none read (no cache-read count)
    w = sp.call(task_id=None, start=62, end=70, prompt=1000, output=20, gateway_extra={name: 1000})
    # R: reports its reads (1000 of 1000): the minute's 1000 hits are R's
    r = sp.call(task_id=None, start=63, end=71, prompt=1000, cached=1000, output=20,
                gateway_extra={sc.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS: 0})
    sp.flush(cstore)
    jobs.run_jobs(cstore, start=at(0), end=at(120))
    rows = cstore.query_df("SELECT call_id, cached_tokens, cached_estimated, work FROM call_costs", tag="test"
                           ).set_index("call_id")
    # W: 0 cached from its own span (not estimated): 0.25 x 1000 + 20 = 270; R: 0.25 x 0 + 20 = 20
    assert (rows.loc[w.engine, "cached_tokens"], rows.loc[w.engine, "cached_estimated"]) == (0, 0)
    assert rows.loc[w.engine, "work"] == pytest.approx(270, **EXACT)
    assert (rows.loc[r.engine, "cached_tokens"], rows.loc[r.engine, "work"]) == (1000, pytest.approx(20, **EXACT))
