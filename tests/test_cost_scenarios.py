"""Cost truth on real telemetry shapes: each kind of fault with its right value, by hand.

Spans in their producers' shapes (tests/test_cost_support.py: vLLM 0.32's llm_request, our gateway's
and SDK's attempts) through the receiver's ingest path; metrics as vLLM 0.32 pages
(tests/producers.py, names and labels of the captured page) parsed by the product's scraper. The
jobs run over explicit windows; every expected figure is worked out in the comments first.
Prices: $3.60/GPU-hour = $0.06/min unless said; T0 = 10:00:00 UTC (tests/test_cost_support.T0).
"""

from __future__ import annotations

from datetime import datetime

import pytest

from schema import jobs
from schema.queries import cost
from tests.producers import scrape, vllm_metrics_page
from tests.test_cost_support import _module_store, cstore, Spans, T0, at, fleet_yaml, metrics_up, one, sync, waste_both  # noqa: F401

EXACT = dict(rel=1e-12, abs=1e-12)
EPOCH = datetime(1970, 1, 1)


def ns(seconds: float) -> int:
    return int(round((at(seconds) - EPOCH).total_seconds() * 1e6)) * 1000


def unix(seconds: float) -> float:
    return (at(seconds) - EPOCH).total_seconds()


def minutes(store, columns: str, replica: str = "r1"):
    return store.query_df(f"SELECT {columns} FROM replica_minutes WHERE replica = {{r:String}} ORDER BY minute",
                          {"r": replica}, tag="test")


def call_cost(store, call_id, columns="cached_tokens, cached_estimated, work"):
    """The call's row of call_costs (``columns`` of it)."""
    return one(store.query_df(f"SELECT {columns} FROM call_costs WHERE call_id = {{c:String}}", {"c": call_id},
                              tag="test"))


def cost_uncounted_engine_call(store):
    """An engine request in minute 1 (1000 prompt tokens, 20 out) with no cached count anywhere (vLLM's
    span has none, no gateway in front), costed by the jobs over minutes 0-1: its call_costs row."""
    sp = Spans()
    ids = sp.call(task_id=None, start=62, end=70, prompt=1000, output=20, client=False, gateway=False)
    sp.flush(store)
    jobs.run_jobs(store, start=at(0), end=at(120))
    return call_cost(store, ids.engine)


def scrape_prefix_hits_in_minute_1(store):
    """r1's scrapes at 0:45 and 1:45: minute 1 adds 1000 prompt tokens, 450 of them prefix-cache hits, and 20
    generated."""
    scrape(store, vllm_metrics_page([{"prompt": 0, "generation": 0, "cached": 0, "created": unix(0)}]), replica="r1",
           at_ns=ns(45))
    scrape(store, vllm_metrics_page([{"prompt": 1000, "generation": 20, "cached": 450, "created": unix(0)}]),
           replica="r1", at_ns=ns(105))


def pieces(store, task_id):
    return cost.task_calls(store, task_id).set_index(["task_step", "task_call", "task_attempt"])


# --- 5. counter resets: per scrape and series, across restarts, in the minute of the scrape ------

def test_counter_reset_mid_minute_stays_in_its_minute(cstore):
    sync(cstore, fleet_yaml())
    # scrapes of vllm:prompt_tokens: 0:15 100, 0:30 200, 0:45 300 | 1:15 350, restart at 1:20,
    # 1:30 100, 1:45 150 | 2:15 150, 2:45 180. The series started at T0 (its first point counts
    # whole), restarted at 1:20 (_created moves).
    for t, value, created in [(15, 100, 0), (30, 200, 0), (45, 300, 0), (75, 350, 0), (90, 100, 80), (105, 150, 80),
                              (135, 150, 80), (165, 180, 80)]:
        scrape(cstore, vllm_metrics_page([{"prompt": value, "generation": 0, "created": unix(created)}]),
               replica="r1", at_ns=ns(t))
    jobs.run_jobs(cstore, start=at(0), end=at(180))
    # minute 0: 100 + 100 + 100; minute 1: 50, then 100 since the restart, then 50; minute 2: 0 + 30.
    # (A max-per-minute difference gives 50 and then 180: 150 tokens in the wrong minute.)
    assert minutes(cstore, "counter_prompt_tokens")["counter_prompt_tokens"].tolist() == [300, 200, 30]


def test_restart_that_climbs_past_the_old_value_loses_nothing(cstore):
    sync(cstore, fleet_yaml())
    # 0:45: 100 (started T0); the replica restarts at 0:50 and has counted 250 by 1:45.
    scrape(cstore, vllm_metrics_page([{"prompt": 100, "generation": 10, "created": unix(0)}]), replica="r1", at_ns=ns(45))
    scrape(cstore, vllm_metrics_page([{"prompt": 250, "generation": 30, "created": unix(50)}]), replica="r1",
           at_ns=ns(105))
    jobs.run_jobs(cstore, start=at(0), end=at(120))
    rm = minutes(cstore, "counter_prompt_tokens, counter_generation_tokens")
    # 100 before the restart, 250 after it (250 - 100 would lose the first 100)
    assert rm["counter_prompt_tokens"].tolist() == [100, 250]
    assert rm["counter_generation_tokens"].tolist() == [10, 30]


# --- 6. a failed scrape is not "up"; reserved replicas are paid up or not -------------------------

def test_failed_scrape_is_not_billed_but_a_reserved_replica_is(cstore):
    sync(cstore, fleet_yaml().replace("replicas:\n", "replicas:\n  r2: {gpu_type: H100, gpu_count: 1, billing: reserved}\n"))
    for replica in ("r1", "r2"):
        for t, page in [(30, vllm_metrics_page([{"running": 0}])), (90, None), (150, vllm_metrics_page([{"running": 0}]))]:
            scrape(cstore, page, replica=replica, at_ns=ns(t))  # minute 1's scrape failed: only its up=0 point
    jobs.run_jobs(cstore, start=at(0), end=at(180))
    on_demand = minutes(cstore, "minute, up, spend_usd, billing", "r1")
    assert on_demand["minute"].tolist() == [at(0), at(120)]  # not billed while the scrape failed
    assert on_demand["spend_usd"].sum() == pytest.approx(0.12, **EXACT)
    reserved = minutes(cstore, "minute, up, spend_usd, idle_usd, billing", "r2")
    assert reserved["up"].tolist() == [1, 0, 1] and set(reserved["billing"]) == {"reserved"}
    assert reserved["spend_usd"].sum() == pytest.approx(0.18, **EXACT)  # paid every minute of the window
    waste = waste_both(cstore, at(0), at(180)).set_index("category")
    assert waste.loc["idle", "usd"] == pytest.approx(0.30, **EXACT)
    assert waste.loc["down", "usd"] == pytest.approx(0.06, **EXACT)  # r2's minute 1, visible waste
    dq = cost.data_quality(cstore, at(0), at(180)).set_index("replica")
    assert (dq.loc["r1", "down_minutes"], dq.loc["r2", "down_minutes"]) == (0, 1)


# --- 4. data-parallel replicas: one series per engine ---------------------------------------------

def test_data_parallel_engines_are_summed(cstore):
    sync(cstore, fleet_yaml())
    page = vllm_metrics_page([
        {"running": 16, "waiting": 6, "kv": 0.5, "blocks": 8192, "prompt": 100, "generation": 40, "created": unix(0)},
        {"running": 16, "waiting": 2, "kv": 0.25, "blocks": 8192, "prompt": 60, "generation": 20, "created": unix(0)},
    ])
    scrape(cstore, page, replica="r1", at_ns=ns(30))
    jobs.run_jobs(cstore, start=at(0), end=at(60))
    row = one(minutes(cstore, "running_avg, queue_waiting_avg, queue_waiting_max, kv_usage_avg, saturated, "
                              "counter_prompt_tokens, counter_generation_tokens"))
    # 16 + 16 running, 6 + 2 waiting, KV (0.5 x 8192 + 0.25 x 8192) / 16384, counters 100 + 60, 40 + 20
    assert (row["running_avg"], row["queue_waiting_avg"], row["queue_waiting_max"]) == (32, 8, 8)
    assert row["kv_usage_avg"] == pytest.approx(0.375, **EXACT)
    assert row["saturated"] == 1
    assert (row["counter_prompt_tokens"], row["counter_generation_tokens"]) == (160, 60)


# --- 11. allocation by utilisation -----------------------------------------------------------------

def test_allocation_by_fleet_capacity_is_stable_per_task(cstore):
    # $6/GPU-hour = $0.10/min, capacity 1000 work units per minute, w_prefill 0 (output tokens only)
    sync(cstore, fleet_yaml(price=6.0, w_prefill=0.0, capacity=1000))
    metrics_up(cstore, "r1", [0, 1])
    sp = Spans()
    for task, start, output in [("T1", 5, 100), ("T2", 65, 100), ("T3", 70, 400)]:
        sp.task("tr" + task, task, start - 1, start + 20)
        sp.call(task_id=task, start=start, end=start + 10, prompt=0, output=output, trace="tr" + task)
    sp.flush(cstore)
    jobs.run_jobs(cstore, start=at(0), end=at(120))
    tasks = cost.tasks_table(cstore, at(0), at(120)).set_index("task_id")
    # minute 0: T1 alone, work 100 of 1000 -> $0.01, idle $0.09; minute 1: 100 + 400 -> $0.01, $0.04, idle $0.05
    assert tasks.loc["T1", "cost_usd"] == pytest.approx(0.01, **EXACT)
    assert tasks.loc["T2", "cost_usd"] == pytest.approx(0.01, **EXACT)  # same work, same cost, whoever ran beside
    assert tasks.loc["T3", "cost_usd"] == pytest.approx(0.04, **EXACT)
    s = one(cost.period_summary(cstore, at(0), at(120)))
    assert s["idle_usd"] == pytest.approx(0.14, **EXACT)
    assert s["cpst_usd"] == pytest.approx(0.2 / 3, **EXACT)  # all spend / successes, as before
    assert s["attributed_cpst_usd"] == pytest.approx(0.06 / 3, **EXACT)
    assert minutes(cstore, "capacity_source")["capacity_source"].tolist() == ["fleet", "fleet"]


def test_capacity_learned_from_saturated_minutes(cstore):
    sync(cstore, fleet_yaml(price=6.0, w_prefill=0.0, capacity=None))
    sp = Spans()
    # minutes 0-2 saturated (requests waiting) with work 300, 400, 500; minute 3 not, work 200
    for minute, output, waiting in [(0, 300, 3), (1, 400, 5), (2, 500, 9), (3, 200, 0)]:
        metrics_up(cstore, "r1", [minute], waiting=waiting)
        sp.call(task_id=None, start=60 * minute + 5, end=60 * minute + 15, prompt=0, output=output, client=False,
                gateway=False)
    sp.flush(cstore)
    jobs.run_jobs(cstore, start=at(0), end=at(240))
    rm = minutes(cstore, "capacity_work, capacity_source, allocated_usd, idle_usd, saturated")
    # capacity = median(300, 400, 500) = 400: minute 0 allocates 300/400 of $0.10, 1 and 2 all, 3 half
    assert rm["saturated"].tolist() == [1, 1, 1, 0]
    assert set(rm["capacity_work"]) == {400} and set(rm["capacity_source"]) == {"saturated"}
    assert rm["allocated_usd"].tolist() == pytest.approx([0.075, 0.1, 0.1, 0.05], **EXACT)
    assert (rm["allocated_usd"] + rm["idle_usd"]).tolist() == pytest.approx([0.1] * 4, **EXACT)


# --- 12. a price change inside a minute is pro rata ------------------------------------------------

def test_price_valid_from_inside_a_minute_is_pro_rata(cstore):
    sync(cstore, fleet_yaml().replace(
        "      - {usd_per_gpu_hour: 3.6, valid_from: 2025-01-01}\n",
        "      - {usd_per_gpu_hour: 3.6, valid_from: 2025-01-01}\n"
        "      - {usd_per_gpu_hour: 7.2, valid_from: '2026-01-05T10:00:30Z'}\n"))
    metrics_up(cstore, "r1", [0, 1])
    jobs.run_jobs(cstore, start=at(0), end=at(120))
    rm = minutes(cstore, "spend_usd, usd_per_gpu_hour")
    # minute 0: 30 s at $3.60 + 30 s at $7.20 = (108 + 216) / 3600 = $0.09 ($5.40/h on average)
    assert rm["spend_usd"].tolist() == pytest.approx([0.09, 0.12], **EXACT)
    assert rm["usd_per_gpu_hour"].tolist() == pytest.approx([5.4, 7.2], **EXACT)


# --- 9. parallel calls in one step ----------------------------------------------------------------

def test_parallel_calls_in_one_step_are_judged_per_call(cstore):
    sync(cstore, fleet_yaml())
    metrics_up(cstore, "r1", [0, 1, 2])
    sp = Spans()
    sp.task("trP", "P", 0, 170)
    # step "search" fans out two calls; call 1 breaks mid-stream and is retried, call 2 succeeds first time
    sp.call(task_id="P", step="search", call_index=1, attempt=1, start=5, end=15, output=0, streamed=5, ok=False,
            partial=True, engine=False, trace="trP")
    sp.call(task_id="P", step="search", call_index=1, attempt=2, start=65, end=75, trace="trP")
    sp.call(task_id="P", step="search", call_index=2, attempt=1, start=125, end=135, trace="trP")
    sp.flush(cstore)
    jobs.run_jobs(cstore, start=at(0), end=at(180))
    calls = pieces(cstore, "P")
    # each call alone in its minute: $0.06 each; call 2's only attempt is its accepted result
    assert calls.loc[("search", 1, 1), "category"] == "retry_waste"
    assert calls.loc[("search", 1, 2), "category"] == "useful"
    assert calls.loc[("search", 2, 1), "category"] == "useful"
    task = one(cost.tasks_table(cstore, at(0), at(180)))
    assert (task["steps"], task["attempts"], task["calls"]) == (1, 3, 3)
    assert task["useful_usd"] == pytest.approx(0.12, **EXACT) and task["retry_waste_usd"] == pytest.approx(0.06, **EXACT)
    s = one(cost.period_summary(cstore, at(0), at(180)))
    assert s["attempts_per_success"] == 3 and s["steps_per_success"] == 1
    assert s["retries_per_call"] == pytest.approx(0.5, **EXACT)  # 3 attempts for 2 calls


# --- 10. goodput judged on what the user waited ----------------------------------------------------

def test_goodput_uses_the_clients_ttft(cstore):
    sync(cstore, fleet_yaml())
    metrics_up(cstore, "r1", [0])
    sp = Spans()
    sp.task("trG", "G", 0, 20, slo_ttft_ms=2000)
    # the gateway retried out of sight: the user waited 5 s for the first token, the engine saw 0.1 s
    sp.call(task_id="G", start=1, end=10, ttft=0.1, gateway_ttft=0.3, client_ttft=5.0, trace="trG")
    sp.flush(cstore)
    jobs.run_jobs(cstore, start=at(0), end=at(60))
    task = one(cost.tasks_table(cstore, at(0), at(60)))
    assert task["ttft_s"] == pytest.approx(5.0, **EXACT) and task["slo_met"] == 0
    ttft_source = cstore.scalar("SELECT ttft_source FROM tasks WHERE task_id = 'G'", tag="test")
    assert ttft_source == "client"
    assert one(cost.period_summary(cstore, at(0), at(60)))["goodput_per_hour"] == 0


# --- 1. cached tokens: per call from a span, else estimated from the counters ----------------------

def test_cached_tokens_estimated_from_the_counter_hit_rate(cstore):
    sync(cstore, fleet_yaml(w_prefill=0.25))
    scrape_prefix_hits_in_minute_1(cstore)
    row = cost_uncounted_engine_call(cstore)
    # hit rate 450 / 1000: 450 cached, estimated; work 0.25 x 550 + 20 = 157.5
    assert (row["cached_tokens"], row["cached_estimated"]) == (450, 1)
    assert row["work"] == pytest.approx(157.5, **EXACT)
    rm = one(minutes(cstore, "cached_estimated_tokens, counter_hit_rate", "r1").iloc[1:])
    assert rm["cached_estimated_tokens"] == 450 and rm["counter_hit_rate"] == pytest.approx(0.45, **EXACT)
    assert one(cost.period_summary(cstore, at(0), at(120)))["cached_estimated_tokens"] == 450


def test_cached_tokens_from_the_gateway_usage_win_over_the_estimate(cstore):
    sync(cstore, fleet_yaml(w_prefill=0.25))
    scrape_prefix_hits_in_minute_1(cstore)
    sp = Spans()
    # the usage chunk said 900 of the 1000 prompt tokens were cached (--enable-prompt-tokens-details)
    ids = sp.call(task_id="C", start=62, end=70, prompt=1000, cached=900, output=20, trace="trC")
    sp.flush(cstore)
    jobs.run_jobs(cstore, start=at(0), end=at(120))
    row = call_cost(cstore, ids.engine, "call_source, cached_tokens, cached_estimated, work")
    # the engine span is the evidence; the cached count comes from the gateway: 0.25 x 100 + 20 = 45
    assert (row["call_source"], row["cached_tokens"], row["cached_estimated"]) == ("engine", 900, 0)
    assert row["work"] == pytest.approx(45, **EXACT)


# --- 3. engine work no span explains ----------------------------------------------------------------

def test_counter_gap_charged_to_calls_without_engine_spans(cstore):
    sync(cstore, fleet_yaml(w_prefill=0.25))
    scrape(cstore, vllm_metrics_page([{"prompt": 0, "generation": 0, "created": unix(0)}]), replica="r1", at_ns=ns(45))
    scrape(cstore, vllm_metrics_page([{"prompt": 700, "generation": 26, "created": unix(0)}]), replica="r1",
           at_ns=ns(105))
    sp = Spans()
    sp.task("trX", "X", 60, 100, outcome="failure")
    # a: a stream that died after 6 tokens: the gateway knows its prompt (200) from the first chunk
    a = sp.call(task_id="X", step="a", start=61, end=63, prompt=200, output=0, streamed=6, ok=False, partial=True,
                engine=False, trace="trX")
    # b: a non-streamed call whose replica died: the gateway saw nothing of it
    b = sp.call(task_id="X", step="b", start=62, end=64, prompt=300, output=0, streamed=0, ok=False, engine=False,
                trace="trX")
    # c: a finished request with its engine span: prompt 300, output 20
    c = sp.call(task_id="X", step="c", start=65, end=70, prompt=300, output=20, trace="trX")
    sp.flush(cstore)
    jobs.run_jobs(cstore, start=at(0), end=at(120))
    calls = cost.task_calls(cstore, "X").set_index("call_id")
    # counters +700 / +26; spans explain 200 + 300 prompt and 6 + 20 output: 200 prompt tokens
    # unexplained = 0.25 x 200 = 50 work units, shared by a and b (no engine span, 2 s each inside
    # the counters' span): 25 each. a: 0.25 x 200 + 6 + 25 = 81, b: 25, c: 0.25 x 300 + 20 = 95.
    assert calls.loc[a.attempt, "work"] == pytest.approx(81, **EXACT)
    assert calls.loc[b.attempt, "work"] == pytest.approx(25, **EXACT)
    assert calls.loc[c.engine, "work"] == pytest.approx(95, **EXACT)
    assert calls.loc[a.attempt, "cost_usd"] == pytest.approx(0.06 * 81 / 201, **EXACT)
    rm = minutes(cstore, "gap_work, token_gap, unspanned_usd").iloc[1]
    assert rm["gap_work"] == pytest.approx(50, **EXACT) and rm["token_gap"] == 200 and rm["unspanned_usd"] == 0


# --- 8. late data ------------------------------------------------------------------------------

def test_late_minutes_are_detected_and_recomputed(cstore):
    sync(cstore, fleet_yaml())
    jobs.run_jobs(cstore, start=at(0), end=at(4 * 3600))  # the jobs passed these hours: watermark at 4 h
    # a collector outage: a replica's spans and metrics of minute 180 (3 h after T0) arrive now
    metrics_up(cstore, "r1", [180])
    sp = Spans()
    sp.task("trL", "L", 10800, 10830)
    sp.call(task_id="L", start=10805, end=10815, trace="trL")
    sp.flush(cstore)
    start, end = at(10800), at(10860)
    assert cost.tasks_table(cstore, start, end).empty
    assert one(cost.period_summary(cstore, start, end))["spend_usd"] == 0
    pending = cstore.scalar("SELECT uniqExact(minute) FROM late_minutes", tag="test")
    assert pending == 1
    done = jobs.recompute_late(cstore, retention_days=3650)
    # re-run from the late minute to an hour after it, capped at the watermark (the live window is the chain's)
    assert done == [(at(10800), at(4 * 3600))]
    assert one(cost.tasks_table(cstore, start, end))["cost_usd"] == pytest.approx(0.06, **EXACT)
    assert one(cost.period_summary(cstore, start, end))["spend_usd"] == pytest.approx(0.06, **EXACT)
    dq = cost.data_quality(cstore, start, end).set_index("replica")
    assert dq.loc["r1", "late_minutes_recomputed"] == 1
    assert jobs.recompute_late(cstore, retention_days=3650) == []  # nothing pending any more


# --- mixed scenarios, truth by hand --------------------------------------------------------------

def test_mixed_cache_fanout_crash_price_change_and_late_arrival(cstore):
    # $3.60/h until 10:01:30, then $7.20/h; w_prefill 0.25; every minute with work allocates all of it
    sync(cstore, fleet_yaml(w_prefill=0.25).replace(
        "      - {usd_per_gpu_hour: 3.6, valid_from: 2025-01-01}\n",
        "      - {usd_per_gpu_hour: 3.6, valid_from: 2025-01-01}\n"
        "      - {usd_per_gpu_hour: 7.2, valid_from: '2026-01-05T10:01:30Z'}\n"))
    metrics_up(cstore, "r1", [0, 1, 2])
    sp = Spans()
    sp.task("trM", "M", 0, 170)
    # plan (minute 0): n = 2, prompt 40 (20 cached per the usage chunk), outputs 30 + 50 -> 0.25 x 20 + 80 = 85
    sp.call(task_id="M", step="plan", call_index=1, start=5, end=15, prompt=40, cached=20, choices=2,
            engine_outputs=[30, 50], trace="trM")
    # search call 1 (minute 1): the stream dies after 10 tokens (prompt 400 known) -> 0.25 x 400 + 10 = 110,
    # then its retry: prompt 400 (300 cached), output 40 -> 0.25 x 100 + 40 = 65
    sp.call(task_id="M", step="search", call_index=1, attempt=1, start=65, end=75, prompt=400, output=0, streamed=10,
            ok=False, partial=True, engine=False, trace="trM")
    sp.call(task_id="M", step="search", call_index=1, attempt=2, start=80, end=88, prompt=400, cached=300, output=40,
            trace="trM")
    sp.flush(cstore)
    jobs.run_jobs(cstore, start=at(0), end=at(180))
    # search call 2 (minute 2, in parallel with call 1's retry) arrives after the jobs passed minute 2:
    # prompt 100, output 10 -> 0.25 x 100 + 10 = 35
    sp.call(task_id="M", step="search", call_index=2, attempt=1, start=125, end=135, prompt=100, output=10, trace="trM")
    sp.flush(cstore)
    before = one(cost.tasks_table(cstore, at(0), at(180)))
    assert before["calls"] == 3
    jobs.recompute_late(cstore, retention_days=3650)
    task = one(cost.tasks_table(cstore, at(0), at(180)))
    # spend: minute 0 $0.06; minute 1 30 s x $3.60 + 30 s x $7.20 = $0.09; minute 2 $0.12
    # minute 1 shares $0.09 by 110 : 65
    assert task["cost_usd"] == pytest.approx(0.06 + 0.09 + 0.12, **EXACT)
    assert task["retry_waste_usd"] == pytest.approx(0.09 * 110 / 175, **EXACT)
    assert task["useful_usd"] == pytest.approx(0.06 + 0.09 * 65 / 175 + 0.12, **EXACT)
    assert (task["steps"], task["attempts"], task["calls"]) == (2, 4, 4)
    assert (task["prompt_tokens"], task["cached_tokens"], task["output_tokens"]) == (940, 320, 140)
    calls = pieces(cstore, "M")
    assert calls.loc[("plan", 1, 1), "output_tokens"] == 80 and calls.loc[("plan", 1, 1), "work"] == 85
    s = one(cost.period_summary(cstore, at(0), at(180)))
    assert s["spend_usd"] == pytest.approx(0.27, **EXACT) and s["idle_usd"] == pytest.approx(0, abs=1e-12)
    assert s["cpst_usd"] == pytest.approx(0.27, **EXACT)


def test_mixed_reserved_data_parallel_utilisation_and_unspanned_work(cstore):
    # r1: reserved, capacity 200 work units per minute, two engines; w_prefill 0.25
    sync(cstore, fleet_yaml(w_prefill=0.25, capacity=200, billing="reserved"))
    engines = [{"running": 16, "waiting": 0, "prompt": 0, "generation": 0, "created": unix(0)},
               {"running": 16, "waiting": 0, "prompt": 0, "generation": 0, "created": unix(0)}]
    scrape(cstore, vllm_metrics_page(engines), replica="r1", at_ns=ns(30))
    scrape(cstore, None, replica="r1", at_ns=ns(90))  # minute 1: the replica is down
    engines[0].update(prompt=100, generation=80)
    engines[1].update(generation=35)
    scrape(cstore, vllm_metrics_page(engines), replica="r1", at_ns=ns(150))
    sp = Spans()
    sp.task("trD", "D", 120, 150)
    sp.call(task_id="D", start=125, end=140, prompt=100, output=75, trace="trD")  # 0.25 x 100 + 75 = 100
    sp.flush(cstore)
    jobs.run_jobs(cstore, start=at(0), end=at(180))
    rm = minutes(cstore, "up, running_avg, counter_generation_tokens, gap_work, allocated_usd, unspanned_usd, idle_usd")
    # counters since 0:30: +100 prompt, +80 + 35 = 115 generated; the call explains 100 and 75:
    # 40 generated tokens no span explains = 40 work units, no call to take them -> unspanned.
    # minute 2: work 140 of capacity 200 -> allocated $0.06 x 0.7 = $0.042 (call 0.03, unspanned 0.012)
    assert rm["up"].tolist() == [1, 0, 1]
    assert rm["running_avg"].tolist()[0] == 32 and rm["counter_generation_tokens"].tolist()[2] == 115
    assert rm["gap_work"].tolist() == pytest.approx([0, 0, 40], **EXACT)
    assert rm["allocated_usd"].tolist() == pytest.approx([0, 0, 0.042], **EXACT)
    assert rm["unspanned_usd"].tolist() == pytest.approx([0, 0, 0.012], **EXACT)
    assert one(cost.tasks_table(cstore, at(0), at(180)))["cost_usd"] == pytest.approx(0.03, **EXACT)
    waste = waste_both(cstore, at(0), at(180)).set_index("category")
    assert waste.loc["idle", "usd"] == pytest.approx(0.18 - 0.042, **EXACT)
    assert waste.loc["down", "usd"] == pytest.approx(0.06, **EXACT)
    assert waste.loc["unspanned", "usd"] == pytest.approx(0.012, **EXACT)
    assert waste.loc[list(cost.CATEGORIES), "usd"].sum() == pytest.approx(0.18, **EXACT)


def test_token_gap_is_exact_at_range_edges_and_a_series_first_minute(cstore):
    # The gap read 17.2 % where it was ~0.7 %: a counter series' first minute and the edges of
    # the window must not drop tokens. Each minute m: a call at m:10-m:50 (prompt 100, output 40), a
    # scrape at m:55 counting exactly those; the engine (and its series) started at T0.
    sync(cstore, fleet_yaml())
    sp = Spans()
    for m in range(4):
        sp.call(task_id=None, start=60 * m + 10, end=60 * m + 50, prompt=100, output=40, client=False, gateway=False)
        scrape(cstore, vllm_metrics_page([{"prompt": 100 * (m + 1), "generation": 40 * (m + 1), "created": unix(0)}]),
               replica="r1", at_ns=ns(60 * m + 55))
    sp.flush(cstore)
    jobs.run_jobs(cstore, start=at(0), end=at(240))
    for lo, hi in [(0, 240), (60, 180), (120, 240)]:
        dq = one(cost.data_quality(cstore, at(lo), at(hi)))
        assert dq["token_gap"] == 0 and dq["counter_tokens"] == 140 * (hi - lo) // 60, (lo, hi)
    # a trailing window that starts at minute 2 still knows minute 2's increase (primed by minute 1)
    jobs.run_jobs(cstore, start=at(120), end=at(240))
    assert minutes(cstore, "counter_prompt_tokens")["counter_prompt_tokens"].tolist() == [100, 100, 100, 100]


def test_data_parallel_replica_in_live_ops_alerts_and_review(store):
    """The same two-engine replica (16 + 16 running, 6 + 2 waiting) as the live-ops tiles, the
    alert inputs and the weekly review read it: 32 running and 8 waiting, not their mean."""
    from datetime import timedelta

    from schema.queries import alerts, ops, review

    page = vllm_metrics_page([{"running": 16, "waiting": 6, "kv": 0.5}, {"running": 16, "waiting": 2, "kv": 0.25}])
    for t in (10, 25, 40):
        scrape(store, page, replica="r1", at_ns=ns(t))
    start, end = at(0), at(60)
    health = one(ops.replica_health(store, start, end))
    assert (health["running"], health["waiting"]) == (32, 8)
    assert health["kv_cache_usage"] == pytest.approx(0.375, **EXACT)
    gauges = one(ops.gauge_series(store, start, end, 60))
    assert (gauges["running"], gauges["waiting"]) == (32, 8)
    wide = ops.gauge_series(store, start - timedelta(hours=6), end, 3600)  # the per-minute rollup
    assert (wide["running"].max(), wide["waiting"].max()) == (32, 8)
    gauges = [r for r in alerts.replica_series(store, at(59), 60, 1) if r["replica"] == "r1"]
    assert len(gauges) == 1 and (gauges[0]["running_mean"], gauges[0]["waiting_mean"]) == (32, 8)
    assert gauges[0]["kv_mean"] == pytest.approx(0.375, **EXACT)
    occupancy = one(review.batch_occupancy(store, start, end))
    assert (occupancy["running_mean"], occupancy["running_max"], occupancy["waiting_mean"]) == (32, 32, 8)
    assert occupancy["running_points"] == 3
