"""OTLP output of the virtual-time simulators: protobuf spans and metric points, and the sinks.

A *sink* is any callable taking one ``ExportTraceServiceRequest`` or ``ExportMetricsServiceRequest``
(opentelemetry.proto). Provided: ``MemorySink`` (keeps them: tests), ``CallbackSink`` (e.g.
``CallbackSink(lambda r: ingest_traces(store, r), lambda r: ingest_metrics(store, r))``) and
``OtlpHttpSink`` (POSTs protobuf to ``{endpoint}/v1/traces`` / ``/v1/metrics``, retrying 429/502/503/504
with ``Retry-After``, as the OTLP/HTTP spec asks).

Metric points follow docs/telemetry.md: ``MetricName`` = the Prometheus family name (counters
without ``_total``), Sums monotonic and cumulative from the engine's start (a restart starts a
new series: ``start_time_unix_nano`` moves), histograms cumulative with vLLM's bucket bounds,
labels ``model_name`` and ``engine`` as point attributes, the replica in resource attributes.
"""

from __future__ import annotations

import time
from collections import defaultdict

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2 as mpb
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1 import trace_pb2 as tpb

from serving import otlp_encoding
from serving.emulator.stats import COUNTERS, FINISH_REASONS, HISTOGRAMS

SPAN_KIND_INTERNAL = tpb.Span.SPAN_KIND_INTERNAL
SPAN_KIND_SERVER = tpb.Span.SPAN_KIND_SERVER
SPAN_KIND_CLIENT = tpb.Span.SPAN_KIND_CLIENT
STATUS_UNSET, STATUS_OK, STATUS_ERROR = 0, 1, 2
CUMULATIVE = mpb.AGGREGATION_TEMPORALITY_CUMULATIVE

# Metrics the simulator exports per replica and tick (docs/telemetry.md metric contract).
GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
# Counters (name, EngineStats attribute): the modelled ones of the live page (COUNTERS minus the
# features the emulator does not model) plus generation and cached prompt tokens.
SIM_COUNTERS = tuple((n, a, h) for n, a, h in COUNTERS if a) + (
    ("vllm:generation_tokens", "generation_tokens", ""), ("vllm:prompt_tokens_cached", "prompt_tokens_cached", ""))
# Histograms: the ones the product reads (the engine view's heatmaps and its queue / prefill / decode
# distribution, schema.queries.ops_engine HEATMAPS and PHASES); ``full`` adds the rest of vLLM's.
SIM_HISTOGRAMS = ("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
                  "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
                  "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds")


def any_value(v) -> AnyValue:
    if isinstance(v, bool):
        return AnyValue(bool_value=v)
    if isinstance(v, int):
        return AnyValue(int_value=v)
    if isinstance(v, float):
        return AnyValue(double_value=v)
    return AnyValue(string_value=str(v))


def kvs(d: dict) -> list[KeyValue]:
    return [KeyValue(key=k, value=any_value(v)) for k, v in d.items() if v is not None]


class SpanBatcher:
    """Groups encoded spans (``otlp_encoding.span`` bytes) by resource and hands the sink an
    ``ExportTraceServiceRequest`` every ``batch`` spans (and on ``flush``)."""

    def __init__(self, sink, batch: int = 5000, scope: str = "infercost.emulator"):
        self.sink = sink
        self.batch = batch
        self.scope_bytes = InstrumentationScope(name=scope).SerializeToString()
        self.by_resource: dict[tuple, list] = {}
        self.resources: dict[tuple, bytes] = {}
        self.scopes: dict[tuple, bytes] = {}
        self.pending = 0
        self.total = 0

    def resource(self, attrs: dict, scope: str | None = None) -> tuple:
        """Key of a resource (and the instrumentation scope its spans are sent under)."""
        key = tuple(sorted((k, str(v)) for k, v in attrs.items())) + ((("\0scope", scope),) if scope else ())
        if key not in self.resources:
            self.resources[key] = Resource(attributes=kvs(attrs)).SerializeToString()
            self.scopes[key] = InstrumentationScope(name=scope).SerializeToString() if scope else self.scope_bytes
        return key

    def add(self, res_key: tuple, span_bytes: bytes) -> None:
        lst = self.by_resource.get(res_key)
        if lst is None:
            lst = self.by_resource[res_key] = []
        lst.append(span_bytes)
        self.pending += 1
        self.total += 1
        if self.pending >= self.batch:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        body = b"".join(otlp_encoding.resource_spans(self.resources[key], self.scopes[key], spans)
                        for key, spans in self.by_resource.items() if spans)
        self.by_resource = {}
        self.pending = 0
        if self.sink is not None:
            self.sink(ExportTraceServiceRequest.FromString(body))


class ReplicaMetrics:
    """One replica's metric points (gauges, counters, histograms), built once and updated per tick.

    ``snapshot(engine, now_ns, start_ns)`` returns the serialized ``ExportMetricsServiceRequest``
    bytes of the points at ``now_ns``; ``start_ns`` starts the cumulative series (the engine's start
    or last restart). ``full``: all vLLM histograms, not only the six the product reads (:data:`SIM_HISTOGRAMS`).
    Concatenated snapshots of several replicas parse as one request (repeated-field merge).
    """

    def __init__(self, resource_attrs: dict, model: str, engine_index: str = "0", full: bool = False):
        labels = kvs({"model_name": model, "engine": engine_index})
        self.req = req = ExportMetricsServiceRequest()
        rm = req.resource_metrics.add()
        rm.resource.attributes.extend(kvs(resource_attrs))
        sm = rm.scope_metrics.add()
        sm.scope.name = "vllm"
        self.gauges, self.sums, self.hists, self.stamped = [], [], [], []
        for name in GAUGES:
            pt = sm.metrics.add(name=name).gauge.data_points.add()
            pt.attributes.extend(labels)
            self.gauges.append(pt)
        for name, attr, _help in SIM_COUNTERS:
            m = sm.metrics.add(name=name)
            m.sum.is_monotonic = True
            m.sum.aggregation_temporality = CUMULATIVE
            pt = m.sum.data_points.add()
            pt.attributes.extend(labels)
            self.sums.append((pt, attr, None))
        m = sm.metrics.add(name="vllm:request_success")
        m.sum.is_monotonic = True
        m.sum.aggregation_temporality = CUMULATIVE
        for reason in FINISH_REASONS:
            pt = m.sum.data_points.add()
            pt.attributes.extend(labels)
            pt.attributes.add(key="finished_reason", value=AnyValue(string_value=reason))
            self.sums.append((pt, None, reason))
        for name, attr in HISTOGRAMS:
            if not full and name not in SIM_HISTOGRAMS:
                continue
            m = sm.metrics.add(name=name)
            m.histogram.aggregation_temporality = CUMULATIVE
            pt = m.histogram.data_points.add()
            pt.attributes.extend(labels)
            self.hists.append((pt, attr))
        self.n_points = len(self.gauges) + len(self.sums) + len(self.hists)
        self._bounds_set = False

    def snapshot(self, engine, now_ns: int, start_ns: int) -> bytes:
        st = engine.stats
        for pt, value in zip(self.gauges, (engine.num_running, engine.num_waiting, engine.kv_usage())):
            pt.time_unix_nano = now_ns
            pt.as_double = float(value)
        for pt, attr, reason in self.sums:
            pt.start_time_unix_nano = start_ns
            pt.time_unix_nano = now_ns
            pt.as_double = float(getattr(st, attr) if attr else st.request_success[reason])
        for pt, attr in self.hists:
            h = getattr(st, attr)
            pt.start_time_unix_nano = start_ns
            pt.time_unix_nano = now_ns
            pt.count = h.count
            pt.sum = h.sum
            pt.bucket_counts[:] = h.counts
            if not self._bounds_set:
                pt.explicit_bounds[:] = h.bounds
        self._bounds_set = True
        return self.req.SerializeToString()


def metric_points(resource_attrs: dict, engine, now_ns: int, start_ns: int, model: str, engine_index: str = "0",
                  full: bool = False) -> tuple[ExportMetricsServiceRequest, int]:
    """One replica's metric points at ``now_ns`` as a request, and how many points it holds."""
    rm = ReplicaMetrics(resource_attrs, model, engine_index, full)
    return ExportMetricsServiceRequest.FromString(rm.snapshot(engine, now_ns, start_ns)), rm.n_points


class MemorySink:
    """Keeps every request (tests). ``spans()`` flattens to ``(resource_attrs, span)`` pairs."""

    def __init__(self):
        self.traces: list[ExportTraceServiceRequest] = []
        self.metrics: list[ExportMetricsServiceRequest] = []

    def __call__(self, req) -> None:
        (self.traces if isinstance(req, ExportTraceServiceRequest) else self.metrics).append(req)

    def spans(self):
        for req in self.traces:
            for rs in req.resource_spans:
                res = {kv.key: _val(kv.value) for kv in rs.resource.attributes}
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        yield res, s

    def spans_by_name(self) -> defaultdict[str, list]:
        """Span name -> ``(resource_attrs, span, span_attrs)`` of every span so named, in export order
        (a name without spans: an empty list)."""
        out = defaultdict(list)
        for res, s in self.spans():
            out[s.name].append((res, s, span_attrs(s)))
        return out

    def points(self):
        """Yield ``(resource_attrs, metric_name, kind, point)`` for every metric point."""
        for req in self.metrics:
            for rm in req.resource_metrics:
                res = {kv.key: _val(kv.value) for kv in rm.resource.attributes}
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        kind = m.WhichOneof("data")
                        for p in getattr(m, kind).data_points:
                            yield res, m.name, kind, p


def _val(v: AnyValue):
    return getattr(v, v.WhichOneof("value")) if v.WhichOneof("value") else None


def span_attrs(span) -> dict:
    return {kv.key: _val(kv.value) for kv in span.attributes}


class CallbackSink:
    """Dispatch traces and metrics to two callables (e.g. the collectors' in-process ingest)."""

    def __init__(self, on_traces, on_metrics):
        self.on_traces, self.on_metrics = on_traces, on_metrics

    def __call__(self, req) -> None:
        if isinstance(req, ExportTraceServiceRequest):
            self.on_traces(req)
        else:
            self.on_metrics(req)


class OtlpHttpSink:
    """POST protobuf to an OTLP/HTTP receiver (``endpoint`` like ``http://127.0.0.1:4318``).

    Retries 429/502/503/504 and connection errors up to ``max_retries`` times, honouring
    ``Retry-After``; raises RuntimeError on any other status (the OTLP spec's non-retryable codes)
    or when retries run out, so nothing is dropped silently.
    """

    def __init__(self, endpoint: str, timeout_s: float = 30.0, max_retries: int = 8):
        import httpx

        self.base = endpoint.rstrip("/")
        self.client = httpx.Client(timeout=timeout_s)
        self.max_retries = max_retries
        self.sent_bytes = 0

    def __call__(self, req) -> None:
        import httpx

        path = "/v1/traces" if isinstance(req, ExportTraceServiceRequest) else "/v1/metrics"
        body = req.SerializeToString()
        delay = 0.5
        for attempt in range(self.max_retries + 1):
            try:
                r = self.client.post(self.base + path, content=body,
                                     headers={"Content-Type": "application/x-protobuf"})
            except httpx.TransportError as exc:
                if attempt == self.max_retries:
                    raise RuntimeError(f"OTLP export to {self.base}{path} failed: {exc}") from exc
                time.sleep(delay)
                delay = min(delay * 2, 10)
                continue
            if r.status_code == 200:
                self.sent_bytes += len(body)
                return
            if r.status_code in (429, 502, 503, 504) and attempt < self.max_retries:
                ra = r.headers.get("retry-after")
                time.sleep(float(ra) if ra and ra.replace(".", "", 1).isdigit() else delay)
                delay = min(delay * 2, 10)
                continue
            raise RuntimeError(f"OTLP export to {self.base}{path} answered {r.status_code}: {r.text[:200]}")

    def close(self) -> None:
        self.client.close()
