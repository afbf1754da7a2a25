"""Calibrate the emulator's step-time model against a running vLLM, and measure a workload's figures.

Where it sits: serving/vllm (the real-vLLM harness); talks HTTP to any OpenAI-compatible server
(real vLLM or an emulated replica), so the same workload runs on both for the fidelity check.

Method: streaming ``/v1/completions`` with token-id prompts of exact length and random ids (the
prefix cache never hits), ``ignore_eos`` (outputs have exactly ``max_tokens``); times are the
ENGINE's, read as deltas of vLLM's own histograms on ``/metrics`` around each experiment (client-side
chunk times are useless on a busy CPU: the API server process hands out tokens in bursts):

1. Prefill: lone requests (batch 1) with prompts of P tokens and 2 output tokens; the median
   ``vllm:request_prefill_time_seconds`` (scheduled -> first token: one prefill step) per P fits
   ``step = base + prefill_per_token x P`` (least squares).
2. Decode: B concurrent requests (short prompts, 48 tokens); the median over batches of the mean
   ``vllm:inter_token_latency_seconds`` per B fits ``step = base + decode_per_seq x B``; ``base`` is
   this intercept.
3. ``input_overhead`` = median(TTFT - queue - prefill) of the lone requests (API server,
   tokenisation, hand-over to the engine core). KV reads are folded into the two slopes (the tiny
   model reads ~4 KiB of KV per token).

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

import httpx

PREFILL_SIZES = (32, 128, 256, 512, 896)
DECODE_BATCHES = (1, 2, 4, 8, 16)
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


def _fit(xs, ys) -> tuple[float, float]:
    """Least-squares line: (intercept, slope)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


HISTS = {"ttft": "vllm:time_to_first_token_seconds", "itl": "vllm:inter_token_latency_seconds",
         "prefill": "vllm:request_prefill_time_seconds", "queue": "vllm:request_queue_time_seconds"}


def histogram_totals(url: str) -> dict:
    """``{key: (sum, count)}`` of the HISTS families on the server's ``/metrics`` (all series summed)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url.rstrip("/") + "/metrics", timeout=30, trust_env=False).text
    names = {v: k for k, v in HISTS.items()}
    out = {k: [0.0, 0.0] for k in HISTS}
    for f in text_string_to_metric_families(text):
        if f.name in names:
            for smp in f.samples:
                if smp.name == f.name + "_sum":
                    out[names[f.name]][0] += smp.value
                elif smp.name == f.name + "_count":
                    out[names[f.name]][1] += smp.value
    return {k: tuple(v) for k, v in out.items()}


def engine_means(url: str, model: str, reqs: list[Req]) -> dict:
    """Run ``reqs`` and return the engine's mean of each HISTS interval over them (seconds)."""
    before = histogram_totals(url)
    run(url, model, reqs)
    after = histogram_totals(url)
    means = {}
    for k in HISTS:
        ds, dc = after[k][0] - before[k][0], after[k][1] - before[k][1]
        means[k] = ds / dc if dc > 0 else float("nan")
    return means


def calibrate(url: str, model: str, reps: int = 5, seed: int = 1) -> dict:
    """Measure the step-time fields of a Profile (seconds) on the server at ``url`` (see module doc).

    Each point is the median of ``reps`` experiments (one lone request per prefill experiment, one
    batch per decode experiment), so a stall of a shared CPU moves a point less than a mean would.
    Returns ``{"base_s", "input_overhead_s", "prefill_per_token_s", "decode_per_seq_s",
    "kv_read_per_token_s": 0.0, "points": {...}}``; ``points`` holds the medians fitted.
    """
    run(url, model, [Req(0.0, 16, 4, seed)])  # warm-up (first request pays lazy initialisation)
    rng = random.Random(seed)
    # Interleaved (shuffled) experiments: a slow spell of a shared CPU hits every size alike.
    plan = [("p", p, i) for p in PREFILL_SIZES for i in range(reps)]
    plan += [("d", b, i) for b in DECODE_BATCHES for i in range(max(1, reps - 2))]
    rng.shuffle(plan)
    got: dict[tuple, list] = {}
    for kind, size, i in plan:
        if kind == "p":
            m = engine_means(url, model, [Req(0.0, size, 2, seed * 1000 + size * 10 + i)])
        else:
            m = engine_means(url, model, [Req(0.0, 32, 48, seed * 7919 + size * 100 + i * 17 + j) for j in range(size)])
        got.setdefault((kind, size), []).append(m)
    prefill = {p: statistics.median(m["prefill"] for m in got[("p", p)]) for p in PREFILL_SIZES}
    overhead = [m["ttft"] - m["queue"] - m["prefill"] for p in PREFILL_SIZES for m in got[("p", p)]]
    itl = {b: statistics.median(m["itl"] for m in got[("d", b)]) for b in DECODE_BATCHES}
    _p_icpt, p_slope = _fit(list(prefill), list(prefill.values()))
    d_icpt, d_slope = _fit(list(itl), list(itl.values()))
    return {"base_s": max(d_icpt, 1e-4), "input_overhead_s": max(statistics.median(overhead), 0.0),
            "prefill_per_token_s": max(p_slope, 0.0), "decode_per_seq_s": max(d_slope, 0.0),
            "kv_read_per_token_s": 0.0,
            "points": {"prefill_step_s_by_prompt": prefill, "itl_s_by_batch": itl,
                       "input_overhead_s_median": statistics.median(overhead)}}


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
