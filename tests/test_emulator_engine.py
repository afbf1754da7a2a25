"""The engine model in virtual time: calibration, batching, prefix caching, preemption, accounting."""

from __future__ import annotations

import pytest

from serving.emulator.engine import Engine, EngineRequest
from serving.emulator.kvcache import segments_from_hash_ids, segments_from_tokens
from serving.emulator.profiles import PROFILES, get_profile
from serving.emulator.prom import exposition, make_registry
from serving.emulator.static import StaticEngine
from serving.emulator.stats import Hist
from serving.emulator.virtual import engine_requests, read_azure, read_mooncake, replay


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_batch1_ttft_and_itl_match_the_profile(name):
    prof = get_profile(name)
    req = EngineRequest("r", 512, 101, arrival=0.0)
    eng = Engine(prof)
    (done,) = replay(eng, [req])
    ttft = done.first_token - done.arrival
    itl = (done.finished - done.first_token) / 100
    assert ttft == pytest.approx(prof.batch1_ttft_s(512), rel=0.10)
    # context grows from 513 to 612 tokens over the decode: the profile's ITL at the midpoint
    assert itl == pytest.approx(prof.batch1_itl_s(562), rel=0.10)
    assert done.out == 101 and done.finish_reason == "stop"


def test_profile_numbers_by_hand():
    h100 = get_profile("h100-llama-3.1-8b")
    # 20 ms input overhead + 6 ms base + 1000 x 0.0325 ms + 1000 x 131072 B / 3.35 TB/s
    assert h100.batch1_ttft_s(1000) == pytest.approx(0.020 + 0.006 + 0.0325 + 1000 * 131072 / 3.35e12)
    assert h100.batch1_itl_s(1000) == pytest.approx(0.006 + 0.0000325 + 1000 * 131072 / 3.35e12)
    # (80 GB x 0.9 - 16 GB - 4 GiB) / 128 KiB per token
    assert h100.kv_capacity_tokens == int((80e9 * 0.9 - 16e9 - 4 * 1024**3) // 131072)
    # reference ranges: 70B on 4xH100 TTFT 250-400 ms at 1-2k prompt tokens, ITL 25-40 ms
    big = get_profile("4xh100-llama-3.1-70b")
    assert 0.25 <= big.batch1_ttft_s(1000) <= 0.40 and 0.25 <= big.batch1_ttft_s(2000) <= 0.40
    assert 0.025 <= big.batch1_itl_s(1000) <= 0.040
    a100 = get_profile("a100-llama-3.1-8b")
    assert 1.5 <= a100.batch1_itl_s(1000) / h100.batch1_itl_s(1000) <= 2.0
    with pytest.raises(ValueError, match="unknown engine profile"):
        get_profile("tpu-v5")


def test_max_tokens_caps_with_length():
    eng = Engine(get_profile("h100-llama-3.1-8b"))
    (done,) = replay(eng, [EngineRequest("r", 100, 50, max_tokens=7)])
    assert (done.out, done.finish_reason) == (7, "length")
    assert eng.stats.request_success["length"] == 1


def test_continuous_batching_beats_static_on_azure_conversations(traces_dir):
    """At 5x the trace's rate (~27 req/s, above one H100's ~15 req/s), same max batch size (256).

    Static batching reserves KV for the longest request the trace needs (FasterTransformer-style
    max_seq_len), pads prompts to the batch's longest and decodes until its longest output.
    """
    rows_all = read_azure(traces_dir / "azure_llm_inference_2023_conv.csv")
    reserve = max(r[1] for r in rows_all) + max(r[2] for r in rows_all)
    rows = [(a / 5.0, p, g) for a, p, g in rows_all[:3000]]
    prof = get_profile("h100-llama-3.1-8b")
    tput = {}
    for name, eng in (("continuous", Engine(prof)), ("static", StaticEngine(prof, reserve_tokens=reserve))):
        done = replay(eng, engine_requests(rows))
        assert len(done) == 3000
        assert eng.stats.generation_tokens == sum(r[2] for r in rows)
        tput[name] = len(done) / max(r.finished for r in done)
    assert tput["continuous"] >= 5 * tput["static"], tput


def test_prefix_caching_hits_and_lowers_ttft_on_mooncake(traces_dir):
    rows = read_mooncake(traces_dir / "mooncake_conversation_trace.jsonl", limit=300)
    prof = get_profile("h100-llama-3.1-8b")
    ttft = {}
    for on in (True, False):
        eng = Engine(prof, prefix_caching=on)
        done = replay(eng, engine_requests(rows))
        assert len(done) == 300
        ttft[on] = sum(r.first_token - r.arrival for r in done) / len(done)
        if on:
            assert eng.stats.prefix_cache_hits > 0
            assert eng.stats.prefix_cache_queries == sum(r[1] for r in rows)
        else:
            assert eng.stats.prefix_cache_hits == 0
    assert ttft[True] < ttft[False]


def test_prefix_hit_skips_cached_blocks_exactly():
    prof = get_profile("h100-llama-3.1-8b")
    eng = Engine(prof)
    a = EngineRequest("a", 1100, 5, segments=segments_from_hash_ids([7, 8, 9], 1100), arrival=0.0)
    replay(eng, [a])
    # same first two 512-token blocks, different third: 1024 tokens hit
    b = EngineRequest("b", 1100, 5, segments=segments_from_hash_ids([7, 8, 10], 1100), arrival=10.0)
    replay(eng, [b])
    assert b.hit_tokens == 1024
    assert eng.stats.prefix_cache_hits == 1024
    assert eng.stats.prefix_cache_queries == 2200
    # a different first block shares nothing, even with equal later ids (hashes chain the prefix)
    c = EngineRequest("c", 1100, 5, segments=segments_from_hash_ids([1, 8, 9], 1100), arrival=20.0)
    replay(eng, [c])
    assert c.hit_tokens == 0
    toks = [str(i) for i in range(40)]
    assert len(segments_from_tokens(toks)) == 2  # 40 tokens = 2 full 16-token blocks


def test_kv_pressure_preempts_and_is_counted_in_metrics():
    prof = get_profile("h100-llama-3.1-8b")
    eng = Engine(prof, kv_blocks=400)  # 6,400 tokens of KV
    reqs = [EngineRequest(f"r{i}", 1000, 600, arrival=0.0) for i in range(8)]
    done = replay(eng, reqs)
    assert len(done) == 8
    assert eng.stats.num_preemptions > 0
    assert all(r.out == 600 for r in done)
    assert eng.stats.generation_tokens == 8 * 600
    assert any(r.preemptions for r in done)
    text = exposition(make_registry(lambda: eng, prof.model)).decode()
    line = next(ln for ln in text.splitlines() if ln.startswith("vllm:num_preemptions_total{"))
    assert float(line.rsplit(" ", 1)[1]) == eng.stats.num_preemptions


def test_kv_cut_fault_causes_preemption():
    prof = get_profile("h100-llama-3.1-8b")
    eng = Engine(prof, kv_blocks=1000)
    reqs = [EngineRequest(f"r{i}", 1000, 400, arrival=0.0) for i in range(8)]
    for r in reqs:
        eng.add(r)
    for _ in range(40):
        eng.plan(max_steps=1)
        eng.commit()
    assert eng.stats.num_preemptions == 0 and eng.num_running == 8
    eng.kv_cut = 0.6  # 400 blocks left for 8 x ~1040 tokens (~520 blocks)
    done = eng.run_until_idle()
    assert eng.stats.num_preemptions > 0
    assert len(done) == 8 and eng.stats.generation_tokens == 8 * 400


def test_abort_counts_prompt_but_no_success():
    prof = get_profile("h100-llama-3.1-8b")
    eng = Engine(prof)
    eng.add(EngineRequest("a", 300, 1000, arrival=0.0))
    for _ in range(10):
        eng.plan(max_steps=1)
        eng.commit()
    got = eng.abort("a")
    assert got.finish_reason == "abort" and got.out == 10
    assert eng.stats.prompt_tokens == 300 and eng.stats.generation_tokens == 10
    assert sum(eng.stats.request_success.values()) == 0
    assert eng.idle() and eng.used_blocks() == 0


def test_histogram_series_matches_individual_observations():
    a, b = Hist((0.01, 0.025, 0.05, 0.1)), Hist((0.01, 0.025, 0.05, 0.1))
    a.observe_series(0.008, 0.004, 30, 3)
    for j in range(30):
        b.observe(0.008 + 0.004 * j, 3)
    assert a.counts == b.counts and a.count == b.count == 90
    assert a.sum == pytest.approx(b.sum)


def test_prompt_that_can_never_fit_is_rejected_not_stuck():
    prof = get_profile("h100-llama-3.1-8b")
    eng = Engine(prof, kv_blocks=100)  # 1,600 tokens
    small, huge = EngineRequest("small", 200, 10, arrival=0.0), EngineRequest("huge", 5000, 10, arrival=0.0)
    done = replay(eng, [huge, small])
    assert {r.request_id: r.finish_reason for r in done} == {"huge": "error", "small": "stop"}
    assert eng.stats.request_success["error"] == 1 and eng.idle()


def _step(eng: Engine) -> None:
    """One step as the live replica drives it (server.py: plan one step, commit it)."""
    assert eng.plan(max_steps=1) is not None
    eng.commit()


def test_request_handed_over_after_a_step_starts_waits_for_the_next_boundary():
    # A live replica's model clock can run behind the wall clock after a host stall (steps follow each
    # other in model time); a request handed over at wall time t must not be scheduled in a step that
    # starts before t: vLLM's scheduler sees it at the next step, and its queue time is never negative.
    prof = get_profile("h100-llama-3.1-8b")
    assert prof.noise_sigma == 0.0
    eng = Engine(prof)
    eng.add(EngineRequest("a", 100, 50), now=0.0)
    _step(eng)  # a's prefill
    late = EngineRequest("b", 100, 5)
    queued_at = eng.now + 0.05  # 50 ms of decode steps (~6 ms each) later in model time
    eng.add(late, now=queued_at)
    while late.scheduled is None:
        before = eng.now
        _step(eng)
        assert late.scheduled is None or late.scheduled == before
    assert late.handed_over == queued_at
    decode_step = prof.step_time(0, 1, 200)
    assert 0.0 <= late.scheduled - late.handed_over < decode_step
    # vLLM's QUEUED event is when the engine core takes it in, at that step boundary: no queue time
    assert late.queued == late.scheduled


def test_engine_idles_until_a_waiting_request_has_been_handed_over():
    prof = get_profile("h100-llama-3.1-8b")
    eng = Engine(prof)
    eng.add(EngineRequest("a", 100, 2), now=0.0)
    late = EngineRequest("b", 100, 2)
    eng.add(late, now=1.0)
    while late.scheduled is None:
        _step(eng)
    # a finished after a few ms; nothing ran until b was handed over at 1.0 s
    assert late.scheduled == late.queued == late.handed_over == 1.0


def test_queue_time_is_the_wait_for_capacity_after_the_engine_core_took_the_request_in():
    # max_num_seqs 1: b is handed over during a's first decode step, taken in at that step's end, and
    # waits there until a finishes; vLLM's queue time is that wait (QUEUED -> SCHEDULED), not the
    # rest of the step in flight when it was handed over.
    prof = get_profile("h100-llama-3.1-8b", max_num_seqs=1)
    eng = Engine(prof)
    a, b = EngineRequest("a", 100, 3), EngineRequest("b", 100, 2)
    eng.add(a, now=0.0)
    _step(eng)  # a's prefill (first token)
    step_start = eng.now
    eng.plan(max_steps=1)  # a's first decode step is in flight
    eng.add(b, now=step_start + 0.001)
    eng.commit()
    taken_in = eng.now
    while b.scheduled is None:
        _step(eng)
    assert b.handed_over == step_start + 0.001 and b.queued == taken_in
    assert b.scheduled == a.finished and b.scheduled - b.queued == a.finished - taken_in > 0
