"""The API-server front end (serving/emulator/frontend.py): a FIFO server the arrivals queue behind."""

from __future__ import annotations

import pytest

from serving.emulator.frontend import FrontEnd
from serving.emulator.profiles import PROFILES, get_profile


@pytest.mark.parametrize("name", ["h100-llama-3.1-8b", "a100-llama-3.1-8b", "4xh100-llama-3.1-70b"])
def test_published_gpu_profiles_keep_the_constant_overhead(name):
    prof = PROFILES[name]
    assert prof.frontend_input_s is None
    fe = FrontEnd(prof)
    assert not fe.modelled
    # two arrivals at once: each joins the queue input_overhead_s after arriving, no queueing
    assert fe.admit(1.0, engine_busy=True) == 1.0 + prof.input_overhead_s
    assert fe.admit(1.0, engine_busy=True) == 1.0 + prof.input_overhead_s
    fe.outputs(1.0, 10_000, engine_busy=True)  # output processing costs nothing
    assert fe.admit(2.0, engine_busy=False) == 2.0 + prof.input_overhead_s


def test_arrivals_queue_behind_inputs_and_output_processing():
    fe = FrontEnd(get_profile("h100-llama-3.1-8b", frontend_input_s=0.010, frontend_per_token_s=0.001,
                              frontend_busy_share=0.5))
    assert fe.modelled
    assert fe.admit(1.0, engine_busy=False) == pytest.approx(1.010)  # idle host: 10 ms of input
    # sent 5 ms later while the engine steps: waits for the first (1.010), then 10 ms at half speed
    assert fe.admit(1.005, engine_busy=True) == pytest.approx(1.030)
    # a step ending at 1.020 made 10 tokens: processed after the queued work, 10 x 1 ms at half speed
    fe.outputs(1.020, 10, engine_busy=True)
    assert fe.free_at == pytest.approx(1.050)
    assert fe.admit(1.040, engine_busy=False) == pytest.approx(1.060)
    # the counter is cumulative: no new tokens, no work; 4 new ones from 2.0 on an idle front end
    fe.outputs(1.5, 10, engine_busy=True)
    assert fe.free_at == pytest.approx(1.060)
    fe.outputs(2.0, 14, engine_busy=False)
    assert fe.free_at == pytest.approx(2.004)
    # a restarted engine counts from 0 and nothing is queued
    fe.reset(3.0)
    fe.outputs(3.0, 2, engine_busy=True)
    assert fe.free_at == pytest.approx(3.004)
    assert fe.admit(3.001, engine_busy=True) == pytest.approx(3.024)


def test_cpu_tiny_profile_models_its_front_end_with_the_measured_input_time():
    prof = PROFILES["cpu-tiny-llama"]
    assert prof.frontend_input_s == prof.input_overhead_s > 0
    assert prof.frontend_per_token_s > 0 and prof.frontend_busy_share == 0.5
    # a lone request on an idle replica: TTFT = input + one prefill step, as batch1_ttft_s says
    assert FrontEnd(prof).admit(0.0, engine_busy=False) + prof.step_time(100, 0, 100) == pytest.approx(
        prof.batch1_ttft_s(100))
