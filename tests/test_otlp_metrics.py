"""OTLP metrics: the stock SDK's OTLP/HTTP metric exporter -> receiver -> otel_metrics_*; unsupported types rejected."""

from __future__ import annotations

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (ExportMetricsServiceRequest,
                                                                          ExportMetricsServiceResponse)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource

from collectors.ingest import ingest_metrics
from collectors.receiver import Receiver, ReceiverConfig
from conftest import emptied

T0 = 1_764_400_000_000_000_000


@pytest.fixture
def store(module_store):
    return emptied(module_store, "otel_metrics_gauge", "otel_metrics_sum", "otel_metrics_histogram")


def test_sdk_metrics_export_is_stored(store, tmp_path):
    r = Receiver(ReceiverConfig(port=0, spool_dir=tmp_path / "spool", batch_max_seconds=0.05), store).start()
    try:
        reader = PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=f"{r.url}/v1/metrics"),
                                               export_interval_millis=3_600_000)
        provider = MeterProvider(resource=Resource.create({"service.name": "gateway", "service.instance.id": "gw-1"}),
                                 metric_readers=[reader],
                                 views=[View(instrument_name="ttft", aggregation=ExplicitBucketHistogramAggregation(
                                     [0.1, 0.5]))])
        meter = provider.get_meter("infercost.test", "0.1")
        meter.create_counter("requests", unit="1", description="requests seen").add(5, {"replica": "r1"})
        meter.create_gauge("queue_depth").set(7, {"replica": "r1"})
        ttft = meter.create_histogram("ttft", unit="s")
        for value in (0.05, 0.2, 0.3, 2.0):
            ttft.record(value, {"replica": "r1"})
        provider.shutdown()
        assert r.flush(10)
        assert r.stats.metric_points_stored == 3 and r.stats.metric_points_rejected == 0
    finally:
        r.stop()
    sums = store.query("SELECT ServiceName, MetricName, MetricUnit, MetricDescription, Attributes, Value, "
                       "AggregationTemporality, IsMonotonic, ScopeName, ScopeVersion FROM otel_metrics_sum",
                       tag="test").result_rows
    assert sums == [("gateway", "requests", "1", "requests seen", {"replica": "r1"}, 5.0, 2, True, "infercost.test",
                     "0.1")]
    gauges = store.query("SELECT MetricName, Value, ResourceAttributes['service.instance.id'] FROM otel_metrics_gauge",
                         tag="test").result_rows
    assert gauges == [("queue_depth", 7.0, "gw-1")]
    hist = store.query("SELECT MetricName, Count, Sum, BucketCounts, ExplicitBounds, Min, Max, AggregationTemporality "
                       "FROM otel_metrics_histogram", tag="test").result_rows
    assert hist == [("ttft", 4, 2.55, [1, 2, 1], [0.1, 0.5], 0.05, 2.0, 2)]


def _bad_request() -> ExportMetricsServiceRequest:
    req = ExportMetricsServiceRequest()
    sm = req.resource_metrics.add().scope_metrics.add()
    ok = sm.metrics.add(name="ok_gauge")
    ok.gauge.data_points.add(time_unix_nano=T0, as_int=4)
    ok.gauge.data_points.add(time_unix_nano=0, as_double=1.0)  # no time: rejected
    summary = sm.metrics.add(name="latency_summary")
    summary.summary.data_points.add(time_unix_nano=T0, count=1, sum=2.0)
    hist = sm.metrics.add(name="bad_hist")
    hist.histogram.data_points.add(time_unix_nano=T0, count=3, bucket_counts=[1, 2], explicit_bounds=[1.0, 2.0])
    return req


def test_unsupported_and_invalid_points_are_rejected_by_name(store, tmp_path):
    result = ingest_metrics(store, _bad_request())
    assert (result.accepted, result.rejected) == (1, 3)
    assert result.message.startswith("rejected 3 of 4 data points; first: metric 'ok_gauge'")
    assert "data_points[1]: time_unix_nano is 0 (missing)" in result.message
    assert store.query("SELECT MetricName, Value FROM otel_metrics_gauge", tag="test").result_rows == [("ok_gauge", 4.0)]
    r = Receiver(ReceiverConfig(port=0, spool_dir=tmp_path / "spool", batch_max_seconds=0.05), store).start()
    try:
        resp = httpx.post(f"{r.url}/v1/metrics", content=_bad_request().SerializeToString(),
                          headers={"content-type": "application/x-protobuf"})
        assert resp.status_code == 200
        partial = ExportMetricsServiceResponse.FromString(resp.content).partial_success
        assert partial.rejected_data_points == 3 and partial.error_message == result.message
        resp = httpx.post(f"{r.url}/v1/metrics", json={"resourceMetrics": [{"scopeMetrics": [{"metrics": [
            {"name": "json_sum", "sum": {"aggregationTemporality": 2, "isMonotonic": True, "dataPoints": [
                {"timeUnixNano": str(T0), "asInt": "12", "attributes": [{"key": "k", "value": {"stringValue": "v"}}]}]}},
            {"name": "json_summary", "summary": {"dataPoints": [{"timeUnixNano": str(T0), "count": "1"}]}}]}]}]})
        assert resp.status_code == 200
        assert resp.json()["partialSuccess"]["rejectedDataPoints"] == "1"
        assert "metric 'json_summary'" in resp.json()["partialSuccess"]["errorMessage"]
        assert "summary data points are not supported" in resp.json()["partialSuccess"]["errorMessage"]
        assert r.flush(10)
    finally:
        r.stop()
    assert store.query("SELECT MetricName, Attributes, Value FROM otel_metrics_sum", tag="test").result_rows == [
        ("json_sum", {"k": "v"}, 12.0)]
    assert store.scalar("SELECT count() FROM otel_metrics_gauge", tag="test") == 2


def test_buffered_ingest_batches_traces_and_metrics(store):
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    from collectors.ingest import BufferedIngest

    emptied(store, "otel_traces")
    sink = BufferedIngest(store, max_rows=1000)
    for k in range(3):
        req = ExportTraceServiceRequest()
        ss = req.resource_spans.add().scope_spans.add()
        for i in range(2):
            n = k * 2 + i + 1
            ss.spans.append(Span(trace_id=n.to_bytes(16, "big"), span_id=n.to_bytes(8, "big"), name=f"s{n}",
                                 start_time_unix_nano=T0, end_time_unix_nano=T0 + n))
        sink(req)
    result = sink(_bad_request())
    assert (result.accepted, result.rejected) == (1, 3)
    assert store.scalar("SELECT count() FROM otel_traces", tag="test") == 0  # buffered, not yet inserted
    sink.flush()
    assert (sink.accepted, sink.rejected, len(sink.messages)) == (7, 3, 1)
    assert store.query("SELECT SpanName, Duration FROM otel_traces ORDER BY SpanName", tag="test").result_rows == [
        (f"s{n}", n) for n in range(1, 7)]
    assert store.query("SELECT MetricName FROM otel_metrics_gauge", tag="test").result_rows == [("ok_gauge",)]


def test_nameless_metrics_and_negative_counters_are_rejected_updown_sums_kept(store):
    def request(*metrics):
        req = ExportMetricsServiceRequest()
        sm = req.resource_metrics.add().scope_metrics.add()
        for name, monotonic, value in metrics:
            m = sm.metrics.add(name=name)
            m.sum.aggregation_temporality, m.sum.is_monotonic = 2, monotonic
            m.sum.data_points.add(time_unix_nano=T0, as_double=value)
        return req

    result = ingest_metrics(store, request(("vllm:prompt_tokens", True, -100.0)))
    assert (result.accepted, result.rejected) == (0, 1)
    assert result.message == ("rejected 1 of 1 data points; first: metric 'vllm:prompt_tokens' "
                              "(resource_metrics[0].scope_metrics[0].metrics[0]) data_points[0]: "
                              "a monotonic sum cannot be negative, got -100")
    result = ingest_metrics(store, request(("", False, 3.0)))
    assert result.rejected == 1
    assert result.message.endswith("data_points[0]: the metric has no name (OTLP requires one)")
    # an UpDownCounter (non-monotonic sum) may go below 0; a counter at 0 is a counter
    result = ingest_metrics(store, request(("inflight_delta", False, -5.0), ("vllm:prompt_tokens", True, 0.0)))
    assert (result.accepted, result.rejected, result.message) == (2, 0, "")
    assert sorted(store.query("SELECT MetricName, Value FROM otel_metrics_sum", tag="test").result_rows) == [
        ("inflight_delta", -5.0), ("vllm:prompt_tokens", 0.0)]
