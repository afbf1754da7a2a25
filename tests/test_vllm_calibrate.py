"""serving/vllm/calibrate.py, the parts that need no server: the decode-under-traffic fit (method 4)."""

from __future__ import annotations

import dataclasses
import statistics

import pytest

from serving.vllm import calibrate as cal


def test_base_fitted_to_traffic_recovers_the_step_time_that_produced_it():
    # A lone request with a 40-token prompt and 5 output tokens: one prefill step, then 4 decode steps
    # of base_s each (decode_per_seq 0) -> 4 x base of decode for 4 tokens after the first.
    lone = [cal.Req(0.0, 40, 5, 1)]
    assert cal.fit_base_to_traffic(lone, 0.0025, prefill_per_token_s=5e-5, decode_per_seq_s=0.0,
                                   input_overhead_s=0.003) == pytest.approx(0.0025, abs=1e-6)
    # decode_per_seq is kept: a lone decode step is base + 0.3 ms -> base 3.7 ms for 4 ms a token.
    assert cal.fit_base_to_traffic(lone, 0.004, prefill_per_token_s=5e-5, decode_per_seq_s=3e-4,
                                   input_overhead_s=0.003) == pytest.approx(0.0037, abs=1e-6)
    # Overlapping traffic (batches of 2+ and prefills mixed into decode steps) costs more per token
    # than lone decoding, so the same 4 ms a token needs a smaller base.
    traffic = cal.fidelity_workload(n=24, seed=cal.CALIBRATION_SEED)
    base = cal.fit_base_to_traffic(traffic, 0.004, prefill_per_token_s=5e-5, decode_per_seq_s=3e-4,
                                   input_overhead_s=0.003)
    assert 0.001 < base < 0.0037 - 1e-5
    # Out of range: the bounds come back.
    assert cal.fit_base_to_traffic(lone, 10.0, prefill_per_token_s=5e-5, decode_per_seq_s=0.0,
                                   input_overhead_s=0.003) == 0.2
    assert cal.fit_base_to_traffic(lone, 0.0, prefill_per_token_s=5e-5, decode_per_seq_s=0.0,
                                   input_overhead_s=0.003) == 1e-4


def test_robust_line_is_the_median_of_pairwise_slopes_and_ignores_one_stalled_experiment():
    # y = 3 + 0.5 x at x = 1, 2, 4 and a stalled experiment at x = 3 (y 30 instead of 4.5)
    xs, ys = [1, 2, 3, 4], [3.5, 4.0, 30.0, 5.0]
    # pairwise slopes: (1,2) 0.5, (1,3) 13.25, (1,4) 0.5, (2,3) 26, (2,4) 0.5, (3,4) -25 -> median 0.5
    # intercepts y - 0.5 x: 3, 3, 28.5, 3 -> median 3
    assert cal.robust_line(xs, ys) == (pytest.approx(3.0), pytest.approx(0.5))
    # repeated x (three experiments per batch size) only pair across sizes
    assert cal.robust_line([1, 1, 2, 2], [1.0, 1.2, 2.0, 2.2]) == (pytest.approx(0.1), pytest.approx(1.0))
    with pytest.raises(ValueError):
        cal.robust_line([2, 2], [1.0, 3.0])


def test_refit_base_uses_the_mean_of_the_traffic_runs():
    measured = {"prefill_per_token_s": 5e-5, "decode_per_seq_s": 3e-4, "input_overhead_s": 0.003}
    traffic = cal.fidelity_workload(seed=cal.CALIBRATION_SEED)
    assert cal.refit_base(measured, [0.003, 0.005]) == cal.fit_base_to_traffic(
        traffic, 0.004, prefill_per_token_s=5e-5, decode_per_seq_s=3e-4, input_overhead_s=0.003)


def test_sched_totals_reads_this_process_groups_cpu_and_wait():
    import os
    import time

    before = cal.sched_totals(os.getpgrp())
    t = time.process_time()
    while time.process_time() - t < 0.05:  # 50 ms on a CPU
        pass
    after = cal.sched_totals(os.getpgrp())
    # pytest's title is not a vLLM process title: every thread counts as the API server's role
    assert set(after) == {"api_server", "all"}
    assert after["all"][0] - before["all"][0] >= 0.045 and after["all"][1] >= before["all"][1] >= 0.0
    assert cal.sched_totals(2**22 + 12345) == {}  # no such group


def test_wait_share_per_role_of_two_readings():
    before = {"worker": (1.0, 0.5), "all": (2.0, 1.0)}
    after = {"worker": (1.3, 0.6), "all": (2.5, 1.5), "api_server": (0.0, 0.0)}
    assert cal.wait_share(before, after) == {"worker": pytest.approx(0.25), "all": pytest.approx(0.5),
                                             "api_server": 0.0}


def test_fresh_prompts_change_the_ids_not_the_shape():
    w = cal.fidelity_workload(n=5, seed=cal.CALIBRATION_SEED)
    assert cal.fresh_prompts(w, 0) == w
    again = cal.fresh_prompts(w, 1)
    assert [(r.at_s, r.prompt_tokens, r.max_tokens) for r in again] == [(r.at_s, r.prompt_tokens, r.max_tokens) for r in w]
    for a, b in zip(w, again):
        ids_a, ids_b = cal.prompt_ids(a.prompt_tokens, a.seed), cal.prompt_ids(b.prompt_tokens, b.seed)
        assert len(ids_a) == len(ids_b) and ids_a[:16] != ids_b[:16]  # the first (cache) block differs
    assert {r.seed for r in cal.fresh_prompts(w, 2)}.isdisjoint({r.seed for r in again} | {r.seed for r in w})


FIELDS = {"base_s": 0.003, "prefill_per_token_s": 5e-5, "decode_per_seq_s": 0.0, "frontend_input_s": 0.002,
          "frontend_per_token_s": 0.001, "frontend_busy_share": 0.5}


def test_replay_traffic_splits_ttft_as_vllm_spans_do():
    # A arrives at 0 on an idle host: input 2 ms -> queued at 2, prefill step 3 + 40 x 0.05 = 5 ms -> first
    # token at 7. B arrives at 6 while A's prefill runs: input at half speed, 4 ms -> queued at 10, so the
    # front end picks A's first token up at 10 (TTFT 10 = 5 engine + 5 front end) and then has A's token
    # to process (1 ms at half speed: free at 12). A decodes 7-10; B joins the step at 10 (prefill 5 ms,
    # A's decode beside it) -> first token 15, picked up at 15: TTFT 9 = 5 engine + 4 input. A's four
    # tokens after the first end at 10, 15, 18, 21: ITL (21 - 7) / 4 = 3.5 ms; B's at 18, 21, 24, 27: 3 ms.
    a, b = cal.replay_traffic([cal.Req(0.0, 40, 5, 1), cal.Req(0.006, 40, 5, 2)], FIELDS)
    assert a == {"ttft_s": pytest.approx(0.010), "engine_s": pytest.approx(0.005), "split_s": pytest.approx(0.005),
                 "itl_s": pytest.approx(0.0035)}
    assert b == {"ttft_s": pytest.approx(0.009), "engine_s": pytest.approx(0.005), "split_s": pytest.approx(0.004),
                 "itl_s": pytest.approx(0.003)}
    # one output token: no ITL
    assert cal.replay_traffic([cal.Req(0.0, 40, 1, 1)], FIELDS)[0]["itl_s"] is None


TRUTH = {**FIELDS, "base_s": 0.004, "prefill_per_token_s": 7e-5, "frontend_input_s": 0.003,
         "frontend_per_token_s": 5e-4, "decode_per_seq_s": 2e-4}
# lone-request values off by 1.5-3x (as on a real host), the slopes kept
MEASURED = {**TRUTH, "base_s": 0.006, "prefill_per_token_s": 4e-5, "frontend_input_s": 0.009,
            "input_overhead_s": 0.009, "points": {"x": 1}}


def spans_of(reqs: list, fields: dict) -> list[dict]:
    """The spans vLLM would write for ``reqs`` served as ``replay_traffic`` serves them with ``fields``:
    arrival (s from the first request), tokens, TTFT split and decode time."""
    t0 = reqs[0].at_s
    return [{"start_s": q.at_s - t0, "prompt_tokens": q.prompt_tokens, "output_tokens": q.max_tokens,
             "ttft_s": r["ttft_s"], "queue_s": 0.0, "prefill_s": r["engine_s"],
             "decode_s": r["itl_s"] * (q.max_tokens - 1)} for r, q in zip(cal.replay_traffic(reqs, fields), reqs)]


def bunched(reqs: list) -> list:
    """``reqs`` as a late client sends them on a busy host: three at a time, each group at its first
    request's time (the fidelity check measured sends 0.69 s late at p95, at load 11)."""
    return [dataclasses.replace(r, at_s=reqs[i - i % 3].at_s) for i, r in enumerate(reqs)]


def test_fit_to_traffic_recovers_the_fields_that_made_the_spans():
    traffic = cal.fidelity_workload(seed=cal.CALIBRATION_SEED)
    run = spans_of(traffic, TRUTH)
    fit = cal.fit_to_traffic(MEASURED, [run, run])
    assert fit["base_s"] == pytest.approx(0.004, rel=0.02)
    assert fit["prefill_per_token_s"] == pytest.approx(7e-5, rel=0.02)
    assert fit["frontend_input_s"] == fit["input_overhead_s"] == pytest.approx(0.003, rel=0.05)
    assert fit["points"]["x"] == 1 and fit["points"]["traffic_fit"]["requests"] == 2 * len(traffic)
    assert fit["points"]["traffic_fit"]["runs"] == 2
    assert fit["points"]["traffic_fit"]["lone_request_fields"]["frontend_input_s"] == 0.009
    assert MEASURED["base_s"] == 0.006  # not modified


def test_fit_to_traffic_replays_each_run_at_the_times_vllm_stamped():
    # One run arrived as scheduled, one bunched in threes by a late client. Bunches queue behind each
    # other's input and prefill, so the bunched run's TTFT and ITL are longer for the same fields; a fit
    # replaying the schedule would take that for a slower engine and front end.
    traffic = cal.fidelity_workload(seed=cal.CALIBRATION_SEED)
    late = spans_of(bunched(traffic), TRUTH)
    on_time = spans_of(traffic, TRUTH)
    assert statistics.median(q["ttft_s"] for q in late) > 1.1 * statistics.median(q["ttft_s"] for q in on_time)
    fit = cal.fit_to_traffic(MEASURED, [on_time, late])
    assert fit["base_s"] == pytest.approx(0.004, rel=0.02)
    assert fit["prefill_per_token_s"] == pytest.approx(7e-5, rel=0.02)
    # three medians for three fields, solved in turn: the input time lands 7% low on the two runs pooled
    assert fit["frontend_input_s"] == pytest.approx(0.003, rel=0.1)
    # the same spans stamped at the schedule's times (what the fit assumed before): input 1.46x, prefill 1.23x
    misread = [{**q, "start_s": r.at_s - traffic[0].at_s} for q, r in zip(late, traffic)]
    wrong = cal.fit_to_traffic(MEASURED, [on_time, misread])
    assert wrong["frontend_input_s"] > 1.3 * 0.003 and wrong["prefill_per_token_s"] > 1.15 * 7e-5


def test_solve_increasing_bisects_and_clamps():
    assert cal.solve_increasing(lambda x: x * x, 2.0, 0.0, 4.0, tol=1e-9) == pytest.approx(2 ** 0.5, abs=1e-8)
    assert cal.solve_increasing(lambda x: x, 10.0, 0.0, 4.0) == 4.0
    assert cal.solve_increasing(lambda x: x, -1.0, 0.0, 4.0) == 0.0
