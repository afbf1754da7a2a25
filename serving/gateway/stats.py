"""Gateway statistics (plain dataclasses) and their one mapping to Prometheus.

Position: serving (gateway). The proxy only increments fields of :class:`GatewayStats` (cheap, no
Prometheus calls on the hot path); :class:`GatewayCollector` turns them into metric families when
``/metrics`` is scraped, into an instance-owned ``CollectorRegistry``. Names follow
``infercost_<snake>_<unit>``, labels are low-cardinality (replica, priority, policy, outcome).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

# Seconds. The GenAI semconv advice for gen_ai.server.time_to_first_token, extended to 60 s.
# Seconds: the gateway's own added latency is expected well under a millisecond.
OVERHEAD_BUCKETS = (0.00005, 0.0001, 0.0002, 0.0003, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.005, 0.01, 0.025, 0.05,
                    0.1, 0.25, 0.5, 1.0, 2.5)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 30.0, 60.0)


@dataclass
class Histogram:
    """Cumulative histogram: counts per upper bound (non-cumulative internally), sum, count."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    n: int = 0

    def __post_init__(self):
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.n += 1

    def buckets(self) -> list[tuple[str, int]]:
        out, acc = [], 0
        for bound, c in zip(self.bounds, self.counts):
            acc += c
            out.append((repr(float(bound)), acc))
        out.append(("+Inf", acc + self.counts[-1]))
        return out


@dataclass
class GatewayStats:
    """Counters of one gateway (requests, attempts, tokens are counts; seconds in histograms).

    requests: (policy, outcome) -> count; outcome = ok | upstream_error | stream_broken | timeout |
    upstream_malformed | stream_error | rejected | no_replica | client_disconnect. ejections:
    replica -> times outlier detection ejected it. rejections: priority -> 429s from admission.
    attempts: (replica, result) -> upstream attempts; result = ok | error. retries: hidden retries
    performed. retries_denied: retries the budget refused. tokens_streamed: output tokens relayed.
    ttft: gateway-observed time to first chunk. overhead: the gateway's own added latency on a
    first attempt (request received -> upstream request sent, plus first upstream event received ->
    relayed to the client), seconds.
    """

    requests: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    rejections: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    attempts: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    ejections: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    retries: int = 0
    retries_denied: int = 0
    tokens_streamed: int = 0
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    overhead: Histogram = field(default_factory=lambda: Histogram(OVERHEAD_BUCKETS))


class GatewayCollector:
    """Maps GatewayStats + the router's replica states to metric families at scrape time."""

    def __init__(self, stats: GatewayStats, router, admission):
        self.stats, self.router, self.admission = stats, router, admission

    def collect(self):
        s = self.stats
        m = CounterMetricFamily("infercost_gateway_requests", "Client requests by routing policy and outcome.",
                                labels=["policy", "outcome"])
        for (policy, outcome), v in sorted(s.requests.items()):
            m.add_metric([policy, outcome], v)
        yield m
        m = CounterMetricFamily("infercost_gateway_admission_rejections", "Requests rejected with 429 by admission control.",
                                labels=["priority"])
        for prio, v in sorted(s.rejections.items()):
            m.add_metric([prio], v)
        yield m
        m = CounterMetricFamily("infercost_gateway_upstream_attempts", "Upstream attempts by replica and result.",
                                labels=["replica", "result"])
        for (replica, result), v in sorted(s.attempts.items()):
            m.add_metric([replica, result], v)
        yield m
        yield CounterMetricFamily("infercost_gateway_retries", "Hidden retries the gateway performed.", value=s.retries)
        yield CounterMetricFamily("infercost_gateway_retries_denied", "Retries refused by the retry budget.",
                                  value=s.retries_denied)
        yield CounterMetricFamily("infercost_gateway_tokens_streamed", "Output tokens relayed to clients.",
                                  value=s.tokens_streamed)
        h = HistogramMetricFamily("infercost_gateway_time_to_first_chunk_seconds",
                                  "Request received -> first upstream chunk relayed, seconds.")
        h.add_metric([], s.ttft.buckets(), s.ttft.total)
        yield h
        h = HistogramMetricFamily("infercost_gateway_overhead_seconds",
                                  "Latency the gateway adds to a first attempt (before the upstream send + "
                                  "relay of the first event), seconds.")
        h.add_metric([], s.overhead.buckets(), s.overhead.total)
        yield h
        g = GaugeMetricFamily("infercost_gateway_inflight_requests", "Requests in flight to each replica.", labels=["replica"])
        for r in self.router.replicas:
            g.add_metric([r.replica_id], r.inflight)
        yield g
        m = CounterMetricFamily("infercost_gateway_outlier_ejections",
                                "Times outlier detection ejected a replica (consecutive failures).", labels=["replica"])
        for r in self.router.replicas:
            m.add_metric([r.replica_id], s.ejections.get(r.replica_id, 0))
        yield m
        g = GaugeMetricFamily("infercost_gateway_replica_ejected", "1 while outlier detection keeps a replica out.",
                              labels=["replica"])
        for r in self.router.replicas:
            g.add_metric([r.replica_id], 1 if self.router.ejected(r) else 0)
        yield g
        g = GaugeMetricFamily("infercost_gateway_queued_requests", "Requests waiting in the gateway for an upstream slot.")
        g.add_metric([], self.admission.queued())
        yield g


def make_registry(stats: GatewayStats, router, admission) -> CollectorRegistry:
    """An instance-owned registry exposing this gateway's stats."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GatewayCollector(stats, router, admission))
    return registry
