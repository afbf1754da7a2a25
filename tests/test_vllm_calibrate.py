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
