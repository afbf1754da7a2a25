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
# vllm:request_num_preemptions (captured vLLM 0.32 page)
PREEMPTION_BUCKETS = (1, 2, 3, 4, 5, 10, 20)

# vLLM's FinishReason values, in the order vLLM 0.32 pre-creates vllm:request_success series.
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")


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
    # prompt tokens served from the prefix cache, counted with prompt_tokens (so
    # prompt_tokens_by_source local_compute + local_cache_hit = prompt_tokens, as on vLLM 0.32's page)
    prompt_tokens_cached: int = 0
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
    request_max_generation_tokens: Hist | None = None
    request_preemptions: Hist = field(default_factory=lambda: Hist(PREEMPTION_BUCKETS))
    request_prefill_kv_computed: Hist | None = None

    def __post_init__(self):
        b = build_1_2_5_buckets(self.max_model_len)
        self.request_prompt_tokens = Hist(b)
        self.request_generation_tokens = Hist(b)
        self.request_max_tokens = Hist(b)
        self.request_max_generation_tokens = Hist(b)
        self.request_prefill_kv_computed = Hist(b)


# Histograms exported, as (vLLM metric family name, EngineStats attribute), in vLLM 0.32's page order.
HISTOGRAMS = (
    ("vllm:request_prompt_tokens", "request_prompt_tokens"),
    ("vllm:request_generation_tokens", "request_generation_tokens"),
    ("vllm:iteration_tokens_total", "iteration_tokens"),
    ("vllm:request_max_num_generation_tokens", "request_max_generation_tokens"),
    ("vllm:request_params_n", "request_n"),
    ("vllm:request_params_max_tokens", "request_max_tokens"),
    ("vllm:time_to_first_token_seconds", "ttft"),
    ("vllm:inter_token_latency_seconds", "itl"),
    ("vllm:request_time_per_output_token_seconds", "tpot"),
    ("vllm:e2e_request_latency_seconds", "e2e"),
    ("vllm:request_queue_time_seconds", "queue"),
    ("vllm:request_inference_time_seconds", "inference"),
    ("vllm:request_prefill_time_seconds", "prefill"),
    ("vllm:request_decode_time_seconds", "decode"),
    ("vllm:request_num_preemptions", "request_preemptions"),
    ("vllm:request_prefill_kv_computed_tokens", "request_prefill_kv_computed"),
)
# Counters with only the (model_name, engine) labels: (family name without ``_total``, EngineStats
# attribute or None for vLLM features the emulator does not model, which stay 0, help).
COUNTERS = (
    ("vllm:prefix_cache_queries", "prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens."),
    ("vllm:prefix_cache_hits", "prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."),
    ("vllm:external_prefix_cache_queries", None, "External prefix cache queries from KV connector cross-instance "
     "cache sharing, in terms of number of queried tokens."),
    ("vllm:external_prefix_cache_hits", None, "External prefix cache hits from KV connector cross-instance cache "
     "sharing, in terms of number of cached tokens."),
    ("vllm:mm_cache_queries", None, "Multi-modal cache queries, in terms of number of queried items."),
    ("vllm:mm_cache_hits", None, "Multi-modal cache hits, in terms of number of cached items."),
    ("vllm:num_preemptions", "num_preemptions", "Cumulative number of preemption from the engine."),
    ("vllm:prompt_tokens", "prompt_tokens", "Number of prefill tokens processed."),
)
# MFU estimates: 0 unless vLLM runs with --enable-mfu-metrics (off by default; 0 on the captured page).
MFU_COUNTERS = (
    ("vllm:estimated_flops_per_gpu", "Estimated number of floating point operations per GPU (for Model Flops "
     "Utilization calculations)."),
    ("vllm:estimated_read_bytes_per_gpu", "Estimated number of bytes read from memory per GPU (for Model Flops "
     "Utilization calculations)."),
    ("vllm:estimated_write_bytes_per_gpu", "Estimated number of bytes written to memory per GPU (for Model Flops "
     "Utilization calculations)."),
)
PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
CACHED_SOURCES = ("device", "host", "p2p", "disk", "external_unspecified")
WAITING_REASONS = ("capacity", "deferred")
SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")
ADMISSION_REASONS = ("max_num_queued_reqs", "max_num_queued_tokens")
HELP = {
    "vllm:num_requests_running": "Number of requests in model execution batches.",
    "vllm:num_requests_waiting": "Number of requests waiting to be processed.",
    "vllm:num_requests_waiting_by_reason": "Number of waiting requests by reason. Reason labels: 'capacity' = "
    "waiting for scheduling capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV transfer, "
    "blocked status). Sum of all reasons equals vllm:num_requests_waiting.",
    "vllm:engine_sleep_state": "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is "
    "awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
    "vllm:kv_cache_usage_perc": "KV-cache usage. 1 means 100 percent usage.",
    "vllm:prompt_tokens_by_source": "Number of prompt tokens by source.",
    "vllm:prompt_tokens_cached": "Number of cached prompt tokens (local + external).",
    "vllm:prompt_tokens_cached_by_source": "Prefix-cache hit tokens by the cache tier that supplied them: device "
    "(local HBM), host (offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or "
    "external_unspecified. Counted at admission; sums to vllm:prefix_cache_hits + vllm:external_prefix_cache_hits.",
    "vllm:generation_tokens": "Number of generation tokens processed.",
    "vllm:request_success": "Count of successfully processed requests.",
    "vllm:admission_rejections": "Number of admission attempts rejected by a queue limit, by reason.",
    "vllm:request_prompt_tokens": "Number of prefill tokens processed.",
    "vllm:request_generation_tokens": "Number of generation tokens processed.",
    "vllm:iteration_tokens_total": "Histogram of number of tokens per engine_step.",
    "vllm:request_max_num_generation_tokens": "Histogram of maximum number of requested generation tokens.",
    "vllm:request_params_n": "Histogram of the n request parameter.",
    "vllm:request_params_max_tokens": "Histogram of the max_tokens request parameter.",
    "vllm:time_to_first_token_seconds": "Histogram of time to first token in seconds.",
    "vllm:inter_token_latency_seconds": "Histogram of inter-token latency in seconds.",
    "vllm:request_time_per_output_token_seconds": "Histogram of time_per_output_token_seconds per request.",
    "vllm:e2e_request_latency_seconds": "Histogram of e2e request latency in seconds.",
    "vllm:request_queue_time_seconds": "Histogram of time spent in WAITING phase for request.",
    "vllm:request_inference_time_seconds": "Histogram of time spent in RUNNING phase for request.",
    "vllm:request_prefill_time_seconds": "Histogram of time spent in PREFILL phase for request.",
    "vllm:request_decode_time_seconds": "Histogram of time spent in DECODE phase for request.",
    "vllm:request_num_preemptions": "Histogram of the number of times a request was preempted.",
    "vllm:request_prefill_kv_computed_tokens": "Histogram of new KV tokens computed during prefill (excluding "
    "cached tokens).",
    "vllm:cache_config_info": "Information of the LLMEngine CacheConfig",
}
