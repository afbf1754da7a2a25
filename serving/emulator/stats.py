"""Engine statistics as plain data: counters and histograms with vLLM's exact bucket bounds.

Where it sits: filled by the engine model (``engine.py``); mapped to Prometheus in one place
(``prom.py``, live mode) and to OTLP metric points in another (``otlp.py``, virtual time). Never
imports either exporter (vLLM keeps ``vllm/v1/metrics/stats.py`` apart from its loggers the same way).

Bucket bounds are copied from vLLM V1 ``vllm/v1/metrics/loggers.py`` (PrometheusStatLogger).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

# vllm:time_to_first_token_seconds
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
# vllm:inter_token_latency_seconds and vllm:request_time_per_output_token_seconds
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
               20.0, 40.0, 80.0)
# vllm:e2e_request_latency_seconds, _queue_, _inference_, _prefill_, _decode_time_seconds
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                           60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
# vllm:iteration_tokens_total
ITERATION_TOKENS_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
# vllm:request_params_n
N_BUCKETS = (1, 2, 5, 10, 20)

FINISH_REASONS = ("stop", "length", "abort", "error")  # vLLM's FinishReason values (request_success)


def build_1_2_5_buckets(max_value: int) -> tuple[int, ...]:
    """vLLM's ``build_1_2_5_buckets``: 1, 2, 5, 10, 20, 50, ... up to ``max_value``."""
    out, exp = [], 0
    while True:
        for m in (1, 2, 5):
            v = m * 10**exp
            if v > max_value:
                return tuple(out)
            out.append(v)
        exp += 1


class Hist:
    """A Prometheus-style histogram: per-bucket counts (not cumulative; last = +Inf), sum, count."""

    __slots__ = ("bounds", "counts", "sum", "count")

    def __init__(self, bounds):
        self.bounds = tuple(float(b) for b in bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, v: float, n: int = 1) -> None:
        # Prometheus buckets are "le": v lands in the first bound >= v.
        self.counts[bisect_left(self.bounds, v)] += n
        self.sum += v * n
        self.count += n

    def observe_series(self, first: float, step: float, k: int, n: int = 1) -> None:
        """Observe the k values ``first + j*step`` (j = 0..k-1), each ``n`` times, in O(buckets).

        Used for the inter-token gaps of k identical-composition decode steps (step grows by the
        KV read of one more token per sequence each step).
        """
        if k <= 0 or n <= 0:
            return
        last = first + step * (k - 1)
        lo = bisect_left(self.bounds, first)
        hi = bisect_left(self.bounds, last)
        if lo == hi or step <= 0:
            self.counts[lo] += k * n
        else:
            placed = 0
            for b in range(lo, hi):
                # values <= bound: j <= (bound - first) / step
                upto = min(k, int((self.bounds[b] - first) / step) + 1)
                self.counts[b] += (upto - placed) * n
                placed = upto
            self.counts[hi] += (k - placed) * n
        self.sum += (first + last) * k / 2 * n
        self.count += k * n

    def cumulative(self) -> list[int]:
        out, acc = [], 0
        for c in self.counts:
            acc += c
            out.append(acc)
        return out


@dataclass
class EngineStats:
    """Cumulative engine statistics since ``start_time`` (engine clock, seconds).

    Counters follow vLLM's semantics (ref vllm-telemetry.md): prompt tokens are counted when a
    request's prefill completes or when it is aborted before that (aborted requests' prompts are
    included); generation tokens on every step that samples them; prefix-cache queries/hits in
    tokens, once per request; ``request_success`` by finish reason, for finished and aborted requests.
    """

    start_time: float = 0.0
    max_model_len: int = 131072
    detailed: bool = True  # False: only the histograms the virtual-time metric contract exports
    prompt_tokens: int = 0
    generation_tokens: int = 0
    num_preemptions: int = 0
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    request_success: dict = field(default_factory=lambda: {r: 0 for r in FINISH_REASONS})
    ttft: Hist = field(default_factory=lambda: Hist(TTFT_BUCKETS))
    itl: Hist = field(default_factory=lambda: Hist(ITL_BUCKETS))
    tpot: Hist = field(default_factory=lambda: Hist(ITL_BUCKETS))
    e2e: Hist = field(default_factory=lambda: Hist(REQUEST_LATENCY_BUCKETS))
    queue: Hist = field(default_factory=lambda: Hist(REQUEST_LATENCY_BUCKETS))
    inference: Hist = field(default_factory=lambda: Hist(REQUEST_LATENCY_BUCKETS))
    prefill: Hist = field(default_factory=lambda: Hist(REQUEST_LATENCY_BUCKETS))
    decode: Hist = field(default_factory=lambda: Hist(REQUEST_LATENCY_BUCKETS))
    iteration_tokens: Hist = field(default_factory=lambda: Hist(ITERATION_TOKENS_BUCKETS))
    request_prompt_tokens: Hist | None = None
    request_generation_tokens: Hist | None = None
    request_max_tokens: Hist | None = None
    request_n: Hist = field(default_factory=lambda: Hist(N_BUCKETS))

    def __post_init__(self):
        b = build_1_2_5_buckets(self.max_model_len)
        self.request_prompt_tokens = Hist(b)
        self.request_generation_tokens = Hist(b)
        self.request_max_tokens = Hist(b)


# Histograms exported, as (vLLM metric family name, EngineStats attribute).
HISTOGRAMS = (
    ("vllm:time_to_first_token_seconds", "ttft"),
    ("vllm:inter_token_latency_seconds", "itl"),
    ("vllm:request_time_per_output_token_seconds", "tpot"),
    ("vllm:e2e_request_latency_seconds", "e2e"),
    ("vllm:request_queue_time_seconds", "queue"),
    ("vllm:request_inference_time_seconds", "inference"),
    ("vllm:request_prefill_time_seconds", "prefill"),
    ("vllm:request_decode_time_seconds", "decode"),
    ("vllm:iteration_tokens_total", "iteration_tokens"),
    ("vllm:request_prompt_tokens", "request_prompt_tokens"),
    ("vllm:request_generation_tokens", "request_generation_tokens"),
    ("vllm:request_params_max_tokens", "request_max_tokens"),
    ("vllm:request_params_n", "request_n"),
)
# Counters exported (family name without ``_total``, EngineStats attribute).
COUNTERS = (
    ("vllm:prompt_tokens", "prompt_tokens", "Number of prefill tokens processed."),
    ("vllm:generation_tokens", "generation_tokens", "Number of generation tokens processed."),
    ("vllm:num_preemptions", "num_preemptions", "Cumulative number of preemption from the engine."),
    ("vllm:prefix_cache_queries", "prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens."),
    ("vllm:prefix_cache_hits", "prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."),
)
HELP = {
    "vllm:num_requests_running": "Number of requests in model execution batches.",
    "vllm:num_requests_waiting": "Number of requests waiting to be processed.",
    "vllm:kv_cache_usage_perc": "KV-cache usage. 1 means 100 percent usage.",
    "vllm:request_success": "Count of successfully processed requests.",
    "vllm:time_to_first_token_seconds": "Histogram of time to first token in seconds.",
    "vllm:inter_token_latency_seconds": "Histogram of inter-token latency in seconds.",
    "vllm:request_time_per_output_token_seconds": "Histogram of time_per_output_token_seconds per request.",
    "vllm:e2e_request_latency_seconds": "Histogram of e2e request latency in seconds.",
    "vllm:request_queue_time_seconds": "Histogram of time spent in WAITING phase for request.",
    "vllm:request_inference_time_seconds": "Histogram of time spent in RUNNING phase for request.",
    "vllm:request_prefill_time_seconds": "Histogram of time spent in PREFILL phase for request.",
    "vllm:request_decode_time_seconds": "Histogram of time spent in DECODE phase for request.",
    "vllm:iteration_tokens_total": "Histogram of number of tokens per engine_step.",
    "vllm:request_prompt_tokens": "Number of prefill tokens processed.",
    "vllm:request_generation_tokens": "Number of generation tokens processed.",
    "vllm:request_params_max_tokens": "Histogram of the max_tokens request parameter.",
    "vllm:request_params_n": "Histogram of the n request parameter.",
    "vllm:cache_config_info": "Information of the LLMEngine CacheConfig",
}
