"""The one place that maps engine statistics to Prometheus metrics (live mode ``/metrics``).

Names, types, labels (``model_name``, ``engine``; ``finished_reason`` on request_success) and
bucket bounds are vLLM V1's (stats.py holds the bounds). Each replica owns its registry.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from serving.emulator.stats import COUNTERS, FINISH_REASONS, HELP, HISTOGRAMS

LABELS = ("model_name", "engine")


class EngineCollector:
    """A prometheus_client collector reading an engine's live state on every scrape."""

    def __init__(self, get_engine, model_name: str, engine_index: str = "0"):
        self._get_engine = get_engine
        self.labels = [model_name, engine_index]

    def collect(self):
        eng = self._get_engine()
        st = eng.stats
        lv = self.labels
        for name, value in (("vllm:num_requests_running", eng.num_running),
                            ("vllm:num_requests_waiting", eng.num_waiting),
                            ("vllm:kv_cache_usage_perc", eng.kv_usage())):
            g = GaugeMetricFamily(name, HELP[name], labels=LABELS)
            g.add_metric(lv, value)
            yield g
        for name, attr, help_ in COUNTERS:
            c = CounterMetricFamily(name, help_, labels=LABELS)
            c.add_metric(lv, getattr(st, attr))
            yield c
        c = CounterMetricFamily("vllm:request_success", HELP["vllm:request_success"],
                                labels=LABELS + ("finished_reason",))
        for reason in FINISH_REASONS:
            c.add_metric(lv + [reason], st.request_success[reason])
        yield c
        for name, attr in HISTOGRAMS:
            h = getattr(st, attr)
            cum = h.cumulative()
            buckets = [(_fmt(b), cum[i]) for i, b in enumerate(h.bounds)] + [("+Inf", cum[-1])]
            fam = HistogramMetricFamily(name, HELP[name], labels=LABELS)
            fam.add_metric(lv, buckets, h.sum)
            yield fam
        info = GaugeMetricFamily("vllm:cache_config_info", HELP["vllm:cache_config_info"],
                                 labels=("block_size", "enable_prefix_caching", "gpu_memory_utilization",
                                         "num_gpu_blocks", "engine"))
        prof = eng.profile
        info.add_metric([str(prof.block_size), str(eng_prefix(eng)), str(prof.gpu_memory_utilization),
                         str(eng.capacity), lv[1]], 1)
        yield info


def eng_prefix(eng) -> bool:
    cache = getattr(eng, "cache", None)
    return bool(cache and cache.enabled)


def _fmt(b: float) -> str:
    return repr(float(b))


def make_registry(get_engine, model_name: str) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(EngineCollector(get_engine, model_name))
    return reg


def exposition(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
