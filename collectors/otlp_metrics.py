"""OTLP metrics -> rows of the exporter-layout tables ``otel_metrics_gauge/sum/histogram``.

Position: collectors. No I/O. Used by the OTLP ``/v1/metrics`` route (via :func:`prepare_metrics`
and :func:`metric_rows`) and by the Prometheus scraper (which builds :class:`MetricRows` itself).

Layout follows the contrib ClickHouse exporter (``internal/metrics_*.go``): one row per data
point; ServiceName from resource ``service.name``; int and double points both as Float64;
histograms with per-bucket counts and ``ExplicitBounds``. Supported: gauge, sum, histogram.
Exponential histograms and summaries are rejected data points (``partial_success`` names the
metric), as are points with ``time_unix_nano`` 0, points of a metric without a name, negative values
of a monotonic sum, histograms whose bucket count is not ``len(explicit_bounds) + 1`` and (with
``bounds``, as the receiver passes) points older than the store's retention or dated in the future.
Attribute keys/values are truncated and too-deeply nested values cut as for spans
(:mod:`collectors.otlp_traces`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric

from collectors import otlp_common as common
from collectors.lenient import decode_problem, flatten_deep_values, lenient_metrics_request

_HEAD = ["ResourceAttributes", "ResourceSchemaUrl", "ScopeName", "ScopeVersion", "ScopeAttributes",
         "ScopeDroppedAttrCount", "ScopeSchemaUrl", "ServiceName", "MetricName", "MetricDescription", "MetricUnit",
         "Attributes", "StartTimeUnix", "TimeUnix"]
_EXEMPLARS = ["Exemplars.FilteredAttributes", "Exemplars.TimeUnix", "Exemplars.Value", "Exemplars.SpanId",
              "Exemplars.TraceId"]
GAUGE_COLUMNS = _HEAD + ["Value", "Flags"] + _EXEMPLARS
SUM_COLUMNS = GAUGE_COLUMNS + ["AggregationTemporality", "IsMonotonic"]
HISTOGRAM_COLUMNS = _HEAD + ["Count", "Sum", "BucketCounts", "ExplicitBounds"] + _EXEMPLARS + [
    "Flags", "Min", "Max", "AggregationTemporality"]
TABLES = {"otel_metrics_gauge": GAUGE_COLUMNS, "otel_metrics_sum": SUM_COLUMNS,
          "otel_metrics_histogram": HISTOGRAM_COLUMNS}
NO_EXEMPLARS = ([], [], [], [], [])


@dataclass
class MetricRows:
    """Rows per table, each a list in the table's column order (``TABLES``). Times in ns."""

    gauge: list = field(default_factory=list)
    sum: list = field(default_factory=list)
    histogram: list = field(default_factory=list)
    newest_ns: int = 0

    def by_table(self) -> dict[str, list]:
        return {"otel_metrics_gauge": self.gauge, "otel_metrics_sum": self.sum, "otel_metrics_histogram": self.histogram}

    def __len__(self) -> int:
        return len(self.gauge) + len(self.sum) + len(self.histogram)

    def extend(self, other: "MetricRows") -> None:
        self.gauge += other.gauge
        self.sum += other.sum
        self.histogram += other.histogram
        self.newest_ns = max(self.newest_ns, other.newest_ns)


@dataclass
class PreparedMetrics:
    """A validated metrics request: protobuf ``payload`` of the valid points, counts, message."""

    payload: bytes
    accepted: int
    rejected: int
    message: str
    newest_ns: int = 0


def _exemplars(point) -> tuple:
    if not point.exemplars:
        return NO_EXEMPLARS
    ex = point.exemplars
    return ([common.attributes_to_map(e.filtered_attributes) for e in ex], [e.time_unix_nano for e in ex],
            [e.as_double if e.WhichOneof("value") == "as_double" else float(e.as_int) for e in ex],
            [e.span_id.hex() for e in ex], [e.trace_id.hex() for e in ex])


def _number(point) -> float:
    return point.as_double if point.WhichOneof("value") == "as_double" else float(point.as_int)


def metric_point_problem(metric, point) -> str:
    """'' if a data point can be stored, else why not."""
    if point.time_unix_nano == 0:
        return "time_unix_nano is 0 (missing)"
    if not metric.name:
        return "the metric has no name (OTLP requires one)"
    kind = metric.WhichOneof("data")
    if kind == "sum" and metric.sum.is_monotonic and _number(point) < 0:
        # a counter only grows from 0 (OTLP data model, Sums): a negative one would be read as a reset
        return f"a monotonic sum cannot be negative, got {_number(point):g}"
    if kind == "histogram" and point.bucket_counts and len(point.bucket_counts) != len(point.explicit_bounds) + 1:
        return (f"histogram has {len(point.bucket_counts)} bucket counts for {len(point.explicit_bounds)} bounds "
                f"(expected bounds + 1)")
    return ""


def _points(metric):
    kind = metric.WhichOneof("data")
    if kind in ("gauge", "sum", "histogram", "exponential_histogram", "summary"):
        return kind, getattr(metric, kind).data_points
    return kind, []


def _validate(request: ExportMetricsServiceRequest, first: list, bounds: common.TimeBounds | None,
              by_time: dict) -> tuple[int, int, int, bool]:
    """Drop invalid points (and unsupported metric types) in place; returns (accepted, rejected, newest, changed)."""
    accepted = rejected = newest = 0
    changed = False
    walk_above = common.MAX_ATTRIBUTE_KEY_BYTES
    for rm_i, rm in enumerate(request.resource_metrics):
        for sm_i, sm in enumerate(rm.scope_metrics):
            drop_metrics = []
            for m_i, metric in enumerate(sm.metrics):
                kind, points = _points(metric)
                where = f"metric {metric.name!r} (resource_metrics[{rm_i}].scope_metrics[{sm_i}].metrics[{m_i}])"
                if kind in ("exponential_histogram", "summary"):
                    rejected += len(points)
                    if not first:
                        first.append(f"{where}: {kind} data points are not supported (gauge, sum, histogram are)")
                    drop_metrics.append(m_i)
                    continue
                bad = []
                for p_i, point in enumerate(points):
                    problem = metric_point_problem(metric, point)
                    if problem:
                        bad.append(p_i)
                        if not first:
                            first.append(f"{where} data_points[{p_i}]: {problem}")
                        continue
                    late = bounds.problem(point.time_unix_nano) if bounds is not None else ""
                    if late:
                        bad.append(p_i)
                        by_time[late] += 1
                        continue
                    if point.ByteSize() > walk_above:
                        common.truncate_attributes(point.attributes, common.MAX_ATTRIBUTE_VALUE_BYTES, where,
                                                   common.Truncations())
                        changed = True
                    accepted += 1
                    newest = max(newest, point.time_unix_nano)
                for p_i in reversed(bad):
                    del points[p_i]
                rejected += len(bad)
                changed = changed or bool(bad)
            for m_i in reversed(drop_metrics):
                del sm.metrics[m_i]
            changed = changed or bool(drop_metrics)
    return accepted, rejected, newest, changed


def _lenient_filter(body: bytes, first: list) -> tuple[bytes, int]:
    request = lenient_metrics_request()
    try:
        request.ParseFromString(body)
    except DecodeError:
        try:  # values nested too deep to decode: cut them to the level the store keeps
            body, _ = flatten_deep_values(body, "metrics", common.MAX_VALUE_DEPTH)
            request.ParseFromString(body)
        except DecodeError as exc:
            raise common.UndecodableBody(
                f"undecodable protobuf ExportMetricsServiceRequest: {decode_problem(exc)}") from exc
    rejected = 0
    for rm_i, rm in enumerate(request.resource_metrics):
        resource_problem = common.lenient_attributes_problem(rm.resource.attributes, "resource")
        for sm in rm.scope_metrics:
            scope_problem = resource_problem or common.utf8_problem(sm.scope.name, "scope name")
            bad = []
            for m_i, metric in enumerate(sm.metrics):
                problem = scope_problem or (
                    common.utf8_problem(metric.name, "metric name") or common.utf8_problem(metric.description, "description")
                    or common.utf8_problem(metric.unit, "unit"))
                _, points = _points(metric)
                for point in points:
                    problem = problem or common.lenient_attributes_problem(point.attributes, "data point")
                if problem:
                    rejected += len(points)
                    if not first:
                        first.append(f"resource_metrics[{rm_i}] metric {metric.name.decode('utf-8', 'replace')!r}: {problem}")
                    bad.append(m_i)
            for m_i in reversed(bad):
                del sm.metrics[m_i]
    return request.SerializeToString(), rejected


def _list(doc: dict, *keys: str, where: str) -> list:
    """``doc[key]`` (first key present) as a list; raises UndecodableBody for anything else."""
    value = next((doc[k] for k in keys if k in doc), None) if isinstance(doc, dict) else None
    if value is None:
        return []
    if not isinstance(value, list):
        raise common.UndecodableBody(f"invalid OTLP JSON: {where} must be a list, got {type(value).__name__}")
    return value


_PARSE_ERRORS = (json_format.ParseError, ValueError, TypeError, AttributeError, KeyError)


def _from_json(doc: dict, first: list) -> tuple[ExportMetricsServiceRequest, int]:
    request = ExportMetricsServiceRequest()
    rejected = 0
    resource_metrics = _list(doc, "resourceMetrics", "resource_metrics", where="resourceMetrics")
    common.prune_json_values(resource_metrics)
    for rm_i, rm_doc in enumerate(resource_metrics):
        if not isinstance(rm_doc, dict):
            raise common.UndecodableBody(f"invalid OTLP JSON: resourceMetrics[{rm_i}] must be an object")
        rm = request.resource_metrics.add()
        try:
            json_format.ParseDict(rm_doc.get("resource") or {}, rm.resource, ignore_unknown_fields=True)
        except _PARSE_ERRORS as exc:
            raise common.UndecodableBody(f"resourceMetrics[{rm_i}].resource: {exc}") from exc
        for sm_i, sm_doc in enumerate(_list(rm_doc, "scopeMetrics", "scope_metrics",
                                            where=f"resourceMetrics[{rm_i}].scopeMetrics")):
            if not isinstance(sm_doc, dict):
                raise common.UndecodableBody(f"invalid OTLP JSON: resourceMetrics[{rm_i}].scopeMetrics[{sm_i}] "
                                             f"must be an object")
            sm = rm.scope_metrics.add()
            try:
                json_format.ParseDict(sm_doc.get("scope") or {}, sm.scope, ignore_unknown_fields=True)
            except _PARSE_ERRORS as exc:
                raise common.UndecodableBody(f"resourceMetrics[{rm_i}].scopeMetrics[{sm_i}].scope: {exc}") from exc
            for m_i, m_doc in enumerate(_list(sm_doc, "metrics", where=f"resourceMetrics[{rm_i}].scopeMetrics[{sm_i}].metrics")):
                metric = Metric()
                try:
                    if not isinstance(m_doc, dict):
                        raise ValueError("not an object")
                    json_format.ParseDict(common.convert_ids(dict(m_doc)), metric, ignore_unknown_fields=True)
                except _PARSE_ERRORS as exc:
                    n = sum(len(v.get("dataPoints") or []) for v in (m_doc.values() if isinstance(m_doc, dict) else ())
                            if isinstance(v, dict) and isinstance(v.get("dataPoints"), list))
                    rejected += max(n, 1)
                    if not first:
                        first.append(f"resourceMetrics[{rm_i}].scopeMetrics[{sm_i}].metrics[{m_i}]: {exc}")
                    continue
                sm.metrics.append(metric)
    return request, rejected


def prepare_metrics(body: bytes | ExportMetricsServiceRequest, media: str = common.PROTOBUF,
                    bounds: common.TimeBounds | None = None) -> PreparedMetrics:
    """Decode and validate one metrics export request (see module doc for what is rejected).

    ``bounds``: point times accepted (retention, clock skew); None accepts any time.
    Raises UndecodableBody when the body is not a decodable OTLP metrics request.
    """
    first: list[str] = []
    rejected = 0
    if isinstance(body, ExportMetricsServiceRequest):
        request, raw = body, None
    elif media == common.JSON:
        request, rejected = _from_json(common.load_json(body), first)
        raw = None
    else:
        raw = bytes(body)
        request = ExportMetricsServiceRequest()
        try:
            request.ParseFromString(raw)
        except DecodeError:
            raw, rejected = _lenient_filter(raw, first)
            request.ParseFromString(raw)
    by_time = {"old": 0, "future": 0}
    accepted, bad, newest, changed = _validate(request, first, bounds, by_time)
    rejected += bad
    if accepted == 0:
        payload = b""
    elif raw is not None and not changed:
        payload = raw
    else:
        payload = request.SerializeToString()
    parts = [bounds.describe(k, n, "data points" if n != 1 else "data point") for k, n in by_time.items() if n]
    if first:
        parts.append(f"first: {first[0]}")
    message = f"rejected {rejected} of {rejected + accepted} data points; " + "; ".join(parts) if rejected else ""
    return PreparedMetrics(payload, accepted, rejected, message, newest)


def metric_rows(request: ExportMetricsServiceRequest | bytes) -> MetricRows:
    """Rows for the three metric tables from a (validated) request or its protobuf bytes."""
    if isinstance(request, (bytes, bytearray, memoryview)):
        request = ExportMetricsServiceRequest.FromString(bytes(request))
    rows = MetricRows()
    for rm in request.resource_metrics:
        resource = common.attributes_to_map(rm.resource.attributes)
        service = resource.get("service.name", "")
        for sm in rm.scope_metrics:
            scope = (sm.scope.name, sm.scope.version, common.attributes_to_map(sm.scope.attributes),
                     sm.scope.dropped_attributes_count, sm.schema_url)
            for metric in sm.metrics:
                kind = metric.WhichOneof("data")
                head = (resource, rm.schema_url) + scope + (service, metric.name, metric.description, metric.unit)
                if kind == "gauge":
                    for p in metric.gauge.data_points:
                        rows.gauge.append([*head, common.attributes_to_map(p.attributes), p.start_time_unix_nano,
                                           p.time_unix_nano, _number(p), p.flags, *_exemplars(p)])
                        rows.newest_ns = max(rows.newest_ns, p.time_unix_nano)
                elif kind == "sum":
                    s = metric.sum
                    for p in s.data_points:
                        rows.sum.append([*head, common.attributes_to_map(p.attributes), p.start_time_unix_nano,
                                         p.time_unix_nano, _number(p), p.flags, *_exemplars(p),
                                         int(s.aggregation_temporality), bool(s.is_monotonic)])
                        rows.newest_ns = max(rows.newest_ns, p.time_unix_nano)
                elif kind == "histogram":
                    h = metric.histogram
                    for p in h.data_points:
                        rows.histogram.append([*head, common.attributes_to_map(p.attributes), p.start_time_unix_nano,
                                               p.time_unix_nano, p.count, p.sum, list(p.bucket_counts),
                                               list(p.explicit_bounds), *_exemplars(p), p.flags,
                                               p.min if p.HasField("min") else 0.0,
                                               p.max if p.HasField("max") else 0.0, int(h.aggregation_temporality)])
                        rows.newest_ns = max(rows.newest_ns, p.time_unix_nano)
    return rows
