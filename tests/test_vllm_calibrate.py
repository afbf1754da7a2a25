"""serving/vllm/calibrate.py, the parts that need no server: the decode-under-traffic fit (method 4)."""

from __future__ import annotations

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
