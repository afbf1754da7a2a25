"""The vLLM ``/metrics`` scraper: Prometheus text -> rows of ``otel_metrics_gauge/sum/histogram``.

Position: collectors -> schema. Interface:

``ScrapeTarget(url, replica, gpu_type, gpu_count, model)``
    one replica's ``/metrics`` URL and what the resource attributes say about it.
``parse_metrics_text(text, target, scrape_time_ns) -> MetricRows``
    pure; parses with prometheus-client's parser (``text_string_to_metric_families``).
``Scraper(targets, sink, interval_s=5)``
    ``.start()`` / ``.stop()`` a named thread that scrapes every target each interval and hands the
    rows to ``sink(rows: MetricRows)`` (e.g. ``Receiver.metrics_sink``, durable through the spool;
    a ``Store`` is accepted too and inserted into directly); ``.scrape_once()`` does one round
    synchronously.

Mapping (docs/telemetry.md "Metrics"; the same layout the contrib prometheus receiver + ClickHouse
exporter produce):

* ``MetricName`` = the family name: counters without ``_total``, histograms without
  ``_bucket``/``_sum``/``_count``; labels -> ``Attributes``;
* ``ResourceAttributes``: ``service.name`` (``vllm``), ``service.instance.id`` (replica),
  ``gpu.type``, ``gpu.count`` and, when known, ``gen_ai.request.model``;
* gauges (and untyped/info samples) -> ``otel_metrics_gauge``; counters -> ``otel_metrics_sum``
  with ``AggregationTemporality`` 2 (cumulative) and ``IsMonotonic`` true, ``StartTimeUnix`` from
  the ``_created`` sample when exposed; histograms -> ``otel_metrics_histogram`` with per-bucket
  (non-cumulative) ``BucketCounts`` and ``ExplicitBounds`` without the ``+Inf`` bound (OTLP style),
  cumulative temporality; summaries' quantiles -> gauge rows with a ``quantile`` attribute and
  their ``_sum``/``_count`` -> sum rows;
* each scrape also writes the gauge ``up`` (1 scraped, 0 failed), as Prometheus does.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import httpx
from prometheus_client.parser import text_string_to_metric_families

from collectors.otlp_metrics import NO_EXEMPLARS, MetricRows
from schema import semconv as sc

log = logging.getLogger(__name__)

SCOPE_NAME = "infercost.collectors.scraper"
SERVICE_NAME = "vllm"
CUMULATIVE = 2  # OTLP AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE


@dataclass(frozen=True)
class ScrapeTarget:
    """One replica's Prometheus endpoint and its identity (GPU count in GPUs)."""

    url: str
    replica: str
    gpu_type: str = ""
    gpu_count: int = 1
    model: str = ""

    def resource(self) -> dict[str, str]:
        attrs = {sc.SERVICE_NAME: SERVICE_NAME, sc.SERVICE_INSTANCE_ID: self.replica, sc.GPU_TYPE: self.gpu_type,
                 sc.GPU_COUNT: str(self.gpu_count)}
        if self.model:
            attrs[sc.RESOURCE_MODEL] = self.model
        return attrs


@dataclass
class ScrapeStats:
    """Per-scraper counters: scrapes done / failed, rows produced, the last error per replica."""

    scrapes: int = 0
    failures: int = 0
    rows: int = 0
    last_error: dict[str, str] = field(default_factory=dict)


def _head(resource: dict, name: str, description: str, unit: str) -> list:
    return [resource, "", SCOPE_NAME, "", {}, 0, "", SERVICE_NAME, name, description, unit]


def _ns(timestamp, default: int) -> int:
    return int(timestamp * 1e9) if timestamp else default


def parse_metrics_text(text: str, target: ScrapeTarget, scrape_time_ns: int) -> MetricRows:
    """Rows for the three metric tables from one Prometheus text exposition (see module doc).

    Args:
        text: the body of ``GET /metrics`` (Prometheus text format 0.0.4 or OpenMetrics).
        target: the replica it came from (resource attributes).
        scrape_time_ns: the scrape time, ns since the epoch (used when samples carry no timestamp).

    Raises:
        ValueError: the text is not parseable (prometheus-client's message).
    """
    rows = MetricRows(newest_ns=scrape_time_ns)
    resource = target.resource()
    families = list(text_string_to_metric_families(text))
    # Text format 0.0.4 exposes a counter's/histogram's creation time as a separate `<name>_created`
    # gauge family: use it as StartTimeUnix instead of storing it as a metric of its own.
    cumulative = {f.name for f in families if f.type in ("counter", "histogram")}
    created: dict[tuple, float] = {}
    for family in families:
        for s in family.samples:
            if s.name.endswith("_created") and s.name[:-len("_created")] in cumulative:
                created[(s.name[:-len("_created")], _key(s.labels))] = s.value
    for family in families:
        if family.name.endswith("_created") and family.name[:-len("_created")] in cumulative:
            continue
        head = _head(resource, family.name, family.documentation, family.unit)
        if family.type == "counter":
            for s in family.samples:
                if s.name.endswith("_created"):
                    continue
                start = int(created.get((family.name, _key(s.labels)), 0) * 1e9)
                rows.sum.append([*head, dict(s.labels), start, _ns(s.timestamp, scrape_time_ns), float(s.value), 0,
                                 *NO_EXEMPLARS, CUMULATIVE, True])
        elif family.type in ("histogram", "gaugehistogram"):
            _histograms(family, head, scrape_time_ns, rows, created)
        elif family.type == "summary":
            for s in family.samples:
                if s.name.endswith("_created"):
                    continue
                if s.name in (family.name + "_sum", family.name + "_count"):
                    rows.sum.append([*_head(resource, s.name, family.documentation, family.unit), dict(s.labels), 0,
                                     _ns(s.timestamp, scrape_time_ns), float(s.value), 0, *NO_EXEMPLARS, CUMULATIVE,
                                     s.name.endswith("_count")])
                else:
                    rows.gauge.append([*head, dict(s.labels), 0, _ns(s.timestamp, scrape_time_ns), float(s.value), 0,
                                       *NO_EXEMPLARS])
        else:  # gauge, untyped/unknown, info, stateset: point values
            for s in family.samples:
                rows.gauge.append([*_head(resource, s.name, family.documentation, family.unit), dict(s.labels), 0,
                                   _ns(s.timestamp, scrape_time_ns), float(s.value), 0, *NO_EXEMPLARS])
    return rows


def _key(labels: dict) -> tuple:
    return tuple(sorted((k, v) for k, v in labels.items() if k not in ("le", "quantile")))


def _histograms(family, head: list, scrape_time_ns: int, rows: MetricRows, created: dict) -> None:
    series: dict[tuple, dict] = {}
    for s in family.samples:
        entry = series.setdefault(_key(s.labels), {"labels": {k: v for k, v in s.labels.items() if k != "le"},
                                                   "buckets": [], "sum": 0.0, "count": None, "created": 0.0,
                                                   "time": _ns(s.timestamp, scrape_time_ns)})
        if s.name.endswith("_bucket"):
            entry["buckets"].append((float(s.labels["le"]), s.value))
        elif s.name.endswith("_sum") or s.name.endswith("_gsum"):
            entry["sum"] = float(s.value)
        elif s.name.endswith("_count") or s.name.endswith("_gcount"):
            entry["count"] = s.value
        elif s.name.endswith("_created"):
            entry["created"] = s.value
    for entry in series.values():
        buckets = sorted(entry["buckets"])
        cumulative = [int(v) for _, v in buckets]
        counts = [c - p for c, p in zip(cumulative, [0] + cumulative[:-1])]  # per-bucket, not cumulative
        bounds = [b for b, _ in buckets if not math.isinf(b)]
        total = int(entry["count"]) if entry["count"] is not None else (cumulative[-1] if cumulative else 0)
        start = entry["created"] or created.get((family.name, _key(entry["labels"])), 0.0)
        rows.histogram.append([*head, entry["labels"], int(start * 1e9), entry["time"], total,
                               entry["sum"], counts, bounds, *NO_EXEMPLARS, 0, 0.0, 0.0, CUMULATIVE])


def up_row(target: ScrapeTarget, scrape_time_ns: int, ok: bool) -> list:
    """The ``up`` gauge row of one scrape (1 scraped, 0 failed)."""
    return [*_head(target.resource(), "up", "1 if the replica's /metrics was scraped, else 0.", ""), {}, 0,
            scrape_time_ns, 1.0 if ok else 0.0, 0, *NO_EXEMPLARS]


# Idle connections are reused for at most this long (seconds). vLLM's API server closes an idle
# keep-alive connection after 5 s (VLLM_HTTP_TIMEOUT_KEEP_ALIVE, uvicorn's default too), the same as
# the default scrape interval and httpx's default expiry: a scrape that reused a connection at that
# instant was reset by the replica and recorded as up = 0 (seen in the demo, ~1 scrape in 50). Below
# the server's timeout, a scrape every 5 s opens a fresh connection (one TCP handshake per replica).
KEEPALIVE_EXPIRY_S = 2.0


class Scraper:
    """Scrapes every target each ``interval_s`` seconds in a named thread; hands rows to ``sink``.

    Connections are kept for :data:`KEEPALIVE_EXPIRY_S` when idle, below the replicas' own keep-alive
    timeout, so a scrape never races the server closing the connection it reuses."""

    def __init__(self, targets: list[ScrapeTarget], sink: Callable[[MetricRows], object], interval_s: float = 5.0,
                 timeout_s: float = 3.0):
        self.targets = list(targets)
        if not callable(sink) and hasattr(sink, "insert"):  # a Store: insert directly
            from collectors.ingest import insert_metric_rows

            store = sink
            sink = lambda rows: insert_metric_rows(store, rows, tag="scraper")  # noqa: E731
        self.sink = sink
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.stats = ScrapeStats()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._client = httpx.Client(timeout=timeout_s, trust_env=False,
                                    limits=httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY_S))

    def scrape_once(self) -> MetricRows:
        """Scrape every target once; returns (and sinks) the rows, ``up`` rows included."""
        rows = MetricRows()
        for target in self.targets:
            now = time.time_ns()
            try:
                resp = self._client.get(target.url)
                resp.raise_for_status()
                part = parse_metrics_text(resp.text, target, now)
                part.gauge.append(up_row(target, now, True))
                self.stats.last_error.pop(target.replica, None)
            except (httpx.HTTPError, ValueError) as exc:
                self.stats.failures += 1
                self.stats.last_error[target.replica] = str(exc)[:500]
                log.warning("scrape of %s (%s) failed: %s", target.url, target.replica, exc)
                part = MetricRows(gauge=[up_row(target, now, False)], newest_ns=now)
            self.stats.scrapes += 1
            rows.extend(part)
        self.stats.rows += len(rows)
        if len(rows):
            self.sink(rows)
        return rows

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.scrape_once()
            except Exception:  # the sink failing (store down) must not kill the loop
                log.exception("scrape round failed")
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))

    def start(self) -> "Scraper":
        if self._thread is None and self.targets:
            self._thread = threading.Thread(target=self._run, name="infercost-scraper", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop after the current round (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s * max(1, len(self.targets)) + 5)
            self._thread = None
        self._client.close()
