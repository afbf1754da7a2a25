-- Raw telemetry as it arrives: OTLP spans and metric points (the OpenTelemetry Collector's ClickHouse
-- exporter layout), the receiver's ingest tables and the span de-duplication that makes a retried batch
-- count once.

-- Spans, column-for-column the OpenTelemetry Collector contrib ClickHouse exporter's traces table
-- (exporter/clickhouseexporter/internal/sqltemplates/traces_table.sql), so the contrib collector
-- can write into the same database instead of our receiver. Bloom-filter skip indexes (the
-- exporter's choice on servers without text indexes).
CREATE TABLE IF NOT EXISTS otel_traces
(
    `Timestamp` DateTime64(9) CODEC(Delta(8), ZSTD(1)),
    `TraceId` String CODEC(ZSTD(1)),
    `SpanId` String CODEC(ZSTD(1)),
    `ParentSpanId` String CODEC(ZSTD(1)),
    `TraceState` String CODEC(ZSTD(1)),
    `SpanName` LowCardinality(String) CODEC(ZSTD(1)),
    `SpanKind` LowCardinality(String) CODEC(ZSTD(1)),
    `ServiceName` LowCardinality(String) CODEC(ZSTD(1)),
    `ResourceAttributes` Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    `ScopeName` String CODEC(ZSTD(1)),
    `ScopeVersion` String CODEC(ZSTD(1)),
    `SpanAttributes` Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    `Duration` UInt64 CODEC(T64, ZSTD(1)),
    `StatusCode` LowCardinality(String) CODEC(ZSTD(1)),
    `StatusMessage` String CODEC(ZSTD(1)),
    `Events.Timestamp` Array(DateTime64(9)) CODEC(ZSTD(1)),
    `Events.Name` Array(LowCardinality(String)) CODEC(ZSTD(1)),
    `Events.Attributes` Array(Map(LowCardinality(String), String)) CODEC(ZSTD(1)),
    `Links.TraceId` Array(String) CODEC(ZSTD(1)),
    `Links.SpanId` Array(String) CODEC(ZSTD(1)),
    `Links.TraceState` Array(String) CODEC(ZSTD(1)),
    `Links.Attributes` Array(Map(LowCardinality(String), String)) CODEC(ZSTD(1)),
    INDEX idx_trace_id TraceId TYPE bloom_filter(0.001) GRANULARITY 1,
    INDEX idx_res_attr_key mapKeys(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_res_attr_value mapValues(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_span_attr_key mapKeys(SpanAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_span_attr_value mapValues(SpanAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_duration Duration TYPE minmax GRANULARITY 1
)
ENGINE = MergeTree
PARTITION BY toDate(Timestamp)
PRIMARY KEY (ServiceName, SpanName, toDateTime(Timestamp))
ORDER BY (ServiceName, SpanName, toDateTime(Timestamp), Timestamp)
TTL toDateTime(Timestamp) + toIntervalDay({{retention_days}})
SETTINGS ttl_only_drop_parts = 1, non_replicated_deduplication_window = 1000, min_bytes_for_wide_part = 33554432;

-- The exporter's trace-id lookup (traces_id_ts_lookup_table.sql / _mv.sql): first and last
-- second of each trace, so a trace can be fetched by id without scanning every partition.
CREATE TABLE IF NOT EXISTS otel_traces_trace_id_ts
(
    `TraceId` String CODEC(ZSTD(1)),
    `Start` SimpleAggregateFunction(min, DateTime) CODEC(ZSTD(1)),
    `End` SimpleAggregateFunction(max, DateTime) CODEC(ZSTD(1)),
    INDEX idx_start Start TYPE minmax GRANULARITY 1,
    INDEX idx_end End TYPE minmax GRANULARITY 1
)
ENGINE = AggregatingMergeTree
PARTITION BY toStartOfWeek(Start)
ORDER BY (TraceId)
TTL toDateTime(Start) + toIntervalDay({{retention_days}})
SETTINGS ttl_only_drop_parts = 1, non_replicated_deduplication_window = 1000;

CREATE MATERIALIZED VIEW IF NOT EXISTS otel_traces_trace_id_ts_mv TO otel_traces_trace_id_ts
AS SELECT
    TraceId,
    min(toDateTime(Timestamp)) AS Start,
    max(toDateTime(Timestamp)) AS End
FROM otel_traces
WHERE TraceId != ''
GROUP BY TraceId;

-- Metric points in the OpenTelemetry Collector contrib ClickHouse exporter's layout
-- (metrics_gauge_table.sql, metrics_sum_table.sql, metrics_histogram_table.sql). Int and double
-- points are both stored as Float64. Written by the /metrics scraper and the OTLP receiver.
CREATE TABLE IF NOT EXISTS otel_metrics_gauge
(
    `ResourceAttributes` Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    `ResourceSchemaUrl` String CODEC(ZSTD(1)),
    `ScopeName` String CODEC(ZSTD(1)),
    `ScopeVersion` String CODEC(ZSTD(1)),
    `ScopeAttributes` Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    `ScopeDroppedAttrCount` UInt32 CODEC(ZSTD(1)),
    `ScopeSchemaUrl` String CODEC(ZSTD(1)),
    `ServiceName` LowCardinality(String) CODEC(ZSTD(1)),
    `MetricName` String CODEC(ZSTD(1)),
    `MetricDescription` String CODEC(ZSTD(1)),
    `MetricUnit` String CODEC(ZSTD(1)),
    `Attributes` Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    `StartTimeUnix` DateTime64(9) CODEC(Delta(8), ZSTD(1)),
    `TimeUnix` DateTime64(9) CODEC(Delta(8), ZSTD(1)),
    `Value` Float64 CODEC(ZSTD(1)),
    `Flags` UInt32 CODEC(ZSTD(1)),
    `Exemplars.FilteredAttributes` Array(Map(LowCardinality(String), String)) CODEC(ZSTD(1)),
    `Exemplars.TimeUnix` Array(DateTime64(9)) CODEC(ZSTD(1)),
    `Exemplars.Value` Array(Float64) CODEC(ZSTD(1)),
    `Exemplars.SpanId` Array(String) CODEC(ZSTD(1)),
    `Exemplars.TraceId` Array(String) CODEC(ZSTD(1)),
    INDEX idx_res_attr_key mapKeys(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_res_attr_value mapValues(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_scope_attr_key mapKeys(ScopeAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_scope_attr_value mapValues(ScopeAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_attr_key mapKeys(Attributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_attr_value mapValues(Attributes) TYPE bloom_filter(0.01) GRANULARITY 1
)
ENGINE = MergeTree
PARTITION BY toDate(TimeUnix)
ORDER BY (ServiceName, MetricName, Attributes, toUnixTimestamp64Nano(TimeUnix))
TTL toDateTime(TimeUnix) + toIntervalDay({{retention_days}})
SETTINGS ttl_only_drop_parts = 1, non_replicated_deduplication_window = 1000;

CREATE TABLE IF NOT EXISTS otel_metrics_sum
(
    `ResourceAttributes` Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    `ResourceSchemaUrl` String CODEC(ZSTD(1)),
    `ScopeName` String CODEC(ZSTD(1)),
    `ScopeVersion` String CODEC(ZSTD(1)),
    `ScopeAttributes` Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    `ScopeDroppedAttrCount` UInt32 CODEC(ZSTD(1)),
    `ScopeSchemaUrl` String CODEC(ZSTD(1)),
    `ServiceName` LowCardinality(String) CODEC(ZSTD(1)),
    `MetricName` String CODEC(ZSTD(1)),
    `MetricDescription` String CODEC(ZSTD(1)),
    `MetricUnit` String CODEC(ZSTD(1)),
    `Attributes` Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    `StartTimeUnix` DateTime64(9) CODEC(Delta(8), ZSTD(1)),
    `TimeUnix` DateTime64(9) CODEC(Delta(8), ZSTD(1)),
    `Value` Float64 CODEC(ZSTD(1)),
    `Flags` UInt32 CODEC(ZSTD(1)),
    `Exemplars.FilteredAttributes` Array(Map(LowCardinality(String), String)) CODEC(ZSTD(1)),
    `Exemplars.TimeUnix` Array(DateTime64(9)) CODEC(ZSTD(1)),
    `Exemplars.Value` Array(Float64) CODEC(ZSTD(1)),
    `Exemplars.SpanId` Array(String) CODEC(ZSTD(1)),
    `Exemplars.TraceId` Array(String) CODEC(ZSTD(1)),
    `AggregationTemporality` Int32 CODEC(ZSTD(1)),
    `IsMonotonic` Bool CODEC(Delta(1), ZSTD(1)),
    INDEX idx_res_attr_key mapKeys(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_res_attr_value mapValues(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_scope_attr_key mapKeys(ScopeAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_scope_attr_value mapValues(ScopeAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_attr_key mapKeys(Attributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_attr_value mapValues(Attributes) TYPE bloom_filter(0.01) GRANULARITY 1
)
ENGINE = MergeTree
PARTITION BY toDate(TimeUnix)
ORDER BY (ServiceName, MetricName, Attributes, toUnixTimestamp64Nano(TimeUnix))
TTL toDateTime(TimeUnix) + toIntervalDay({{retention_days}})
SETTINGS ttl_only_drop_parts = 1, non_replicated_deduplication_window = 1000;

CREATE TABLE IF NOT EXISTS otel_metrics_histogram
(
    `ResourceAttributes` Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    `ResourceSchemaUrl` String CODEC(ZSTD(1)),
    `ScopeName` String CODEC(ZSTD(1)),
    `ScopeVersion` String CODEC(ZSTD(1)),
    `ScopeAttributes` Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    `ScopeDroppedAttrCount` UInt32 CODEC(ZSTD(1)),
    `ScopeSchemaUrl` String CODEC(ZSTD(1)),
    `ServiceName` LowCardinality(String) CODEC(ZSTD(1)),
    `MetricName` String CODEC(ZSTD(1)),
    `MetricDescription` String CODEC(ZSTD(1)),
    `MetricUnit` String CODEC(ZSTD(1)),
    `Attributes` Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    `StartTimeUnix` DateTime64(9) CODEC(Delta(8), ZSTD(1)),
    `TimeUnix` DateTime64(9) CODEC(Delta(8), ZSTD(1)),
    `Count` UInt64 CODEC(Delta(8), ZSTD(1)),
    `Sum` Float64 CODEC(ZSTD(1)),
    `BucketCounts` Array(UInt64) CODEC(ZSTD(1)),
    `ExplicitBounds` Array(Float64) CODEC(ZSTD(1)),
    `Exemplars.FilteredAttributes` Array(Map(LowCardinality(String), String)) CODEC(ZSTD(1)),
    `Exemplars.TimeUnix` Array(DateTime64(9)) CODEC(ZSTD(1)),
    `Exemplars.Value` Array(Float64) CODEC(ZSTD(1)),
    `Exemplars.SpanId` Array(String) CODEC(ZSTD(1)),
    `Exemplars.TraceId` Array(String) CODEC(ZSTD(1)),
    `Flags` UInt32 CODEC(ZSTD(1)),
    `Min` Float64 CODEC(ZSTD(1)),
    `Max` Float64 CODEC(ZSTD(1)),
    `AggregationTemporality` Int32 CODEC(ZSTD(1)),
    INDEX idx_res_attr_key mapKeys(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_res_attr_value mapValues(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_scope_attr_key mapKeys(ScopeAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_scope_attr_value mapValues(ScopeAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_attr_key mapKeys(Attributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_attr_value mapValues(Attributes) TYPE bloom_filter(0.01) GRANULARITY 1
)
ENGINE = MergeTree
PARTITION BY toDate(TimeUnix)
ORDER BY (ServiceName, MetricName, Attributes, toUnixTimestamp64Nano(TimeUnix))
TTL toDateTime(TimeUnix) + toIntervalDay({{retention_days}})
SETTINGS ttl_only_drop_parts = 1, non_replicated_deduplication_window = 1000;

-- the materialized view below unnests resource -> scope -> span and writes otel_traces rows in the
-- contrib ClickHouse exporter's layout (which in turn feeds llm_calls_mv). Decoding in ClickHouse
-- is ~10x faster than a Python loop over spans (benchmarks/bench_ingest.py).
-- Attribute values are stringified as the exporter's pcommon Value.AsString does: strings as is,
-- bools true/false, ints decimal, doubles shortest round-trip form (ClickHouse toString), bytes
-- base64, arrays/kvlists as JSON (one nesting level; deeper values become JSON null).
-- `value` columns are the oneof-presence enums (which field of AnyValue.value was set).
CREATE TABLE IF NOT EXISTS otlp_traces_in
(
    `resource_spans` Array(Tuple(
        resource Tuple(attributes Array(Tuple(
            key String,
            value Tuple(
                string_value String,
                bool_value Bool,
                int_value Int64,
                double_value Float64,
                array_value Tuple(`values` Array(Tuple(
                    string_value String,
                    bool_value Bool,
                    int_value Int64,
                    double_value Float64,
                    bytes_value String,
                    value Enum8('none' = 0, 'string_value' = 1, 'bool_value' = 2, 'int_value' = 3, 'double_value' = 4, 'array_value' = 5, 'kvlist_value' = 6, 'bytes_value' = 7)))),
                kvlist_value Tuple(`values` Array(Tuple(
                    key String,
                    value Tuple(
                        string_value String,
                        bool_value Bool,
                        int_value Int64,
                        double_value Float64,
                        bytes_value String,
                        value Enum8('none' = 0, 'string_value' = 1, 'bool_value' = 2, 'int_value' = 3, 'double_value' = 4, 'array_value' = 5, 'kvlist_value' = 6, 'bytes_value' = 7))))),
                bytes_value String,
                value Enum8('none' = 0, 'string_value' = 1, 'bool_value' = 2, 'int_value' = 3, 'double_value' = 4, 'array_value' = 5, 'kvlist_value' = 6, 'bytes_value' = 7))))),
        scope_spans Array(Tuple(
            scope Tuple(
                name String,
                version String),
            spans Array(Tuple(
                trace_id String,
                span_id String,
                trace_state String,
                parent_span_id String,
                name String,
                kind Int32,
                start_time_unix_nano UInt64,
                end_time_unix_nano UInt64,
                attributes Array(Tuple(
                    key String,
                    value Tuple(
                        string_value String,
                        bool_value Bool,
                        int_value Int64,
                        double_value Float64,
                        array_value Tuple(`values` Array(Tuple(
                            string_value String,
                            bool_value Bool,
                            int_value Int64,
                            double_value Float64,
                            bytes_value String,
                            value Enum8('none' = 0, 'string_value' = 1, 'bool_value' = 2, 'int_value' = 3, 'double_value' = 4, 'array_value' = 5, 'kvlist_value' = 6, 'bytes_value' = 7)))),
                        kvlist_value Tuple(`values` Array(Tuple(
                            key String,
                            value Tuple(
                                string_value String,
                                bool_value Bool,
                                int_value Int64,
                                double_value Float64,
                                bytes_value String,
                                value Enum8('none' = 0, 'string_value' = 1, 'bool_value' = 2, 'int_value' = 3, 'double_value' = 4, 'array_value' = 5, 'kvlist_value' = 6, 'bytes_value' = 7))))),
                        bytes_value String,
                        value Enum8('none' = 0, 'string_value' = 1, 'bool_value' = 2, 'int_value' = 3, 'double_value' = 4, 'array_value' = 5, 'kvlist_value' = 6, 'bytes_value' = 7)))),
                events Array(Tuple(
                    time_unix_nano UInt64,
                    name String,
                    attributes Array(Tuple(
                        key String,
                        value Tuple(
                            string_value String,
                            bool_value Bool,
                            int_value Int64,
                            double_value Float64,
                            array_value Tuple(`values` Array(Tuple(
                                string_value String,
                                bool_value Bool,
                                int_value Int64,
                                double_value Float64,
                                bytes_value String,
                                value Enum8('none' = 0, 'string_value' = 1, 'bool_value' = 2, 'int_value' = 3, 'double_value' = 4, 'array_value' = 5, 'kvlist_value' = 6, 'bytes_value' = 7)))),
                            kvlist_value Tuple(`values` Array(Tuple(
                                key String,
                                value Tuple(
                                    string_value String,
                                    bool_value Bool,
                                    int_value Int64,
                                    double_value Float64,
                                    bytes_value String,
                                    value Enum8('none' = 0, 'string_value' = 1, 'bool_value' = 2, 'int_value' = 3, 'double_value' = 4, 'array_value' = 5, 'kvlist_value' = 6, 'bytes_value' = 7))))),
                            bytes_value String,
                            value Enum8('none' = 0, 'string_value' = 1, 'bool_value' = 2, 'int_value' = 3, 'double_value' = 4, 'array_value' = 5, 'kvlist_value' = 6, 'bytes_value' = 7)))))),
                links Array(Tuple(
                    trace_id String,
                    span_id String,
                    trace_state String,
                    attributes Array(Tuple(
                        key String,
                        value Tuple(
                            string_value String,
                            bool_value Bool,
                            int_value Int64,
                            double_value Float64,
                            array_value Tuple(`values` Array(Tuple(
                                string_value String,
                                bool_value Bool,
                                int_value Int64,
                                double_value Float64,
                                bytes_value String,
                                value Enum8('none' = 0, 'string_value' = 1, 'bool_value' = 2, 'int_value' = 3, 'double_value' = 4, 'array_value' = 5, 'kvlist_value' = 6, 'bytes_value' = 7)))),
                            kvlist_value Tuple(`values` Array(Tuple(
                                key String,
                                value Tuple(
                                    string_value String,
                                    bool_value Bool,
                                    int_value Int64,
                                    double_value Float64,
                                    bytes_value String,
                                    value Enum8('none' = 0, 'string_value' = 1, 'bool_value' = 2, 'int_value' = 3, 'double_value' = 4, 'array_value' = 5, 'kvlist_value' = 6, 'bytes_value' = 7))))),
                            bytes_value String,
                            value Enum8('none' = 0, 'string_value' = 1, 'bool_value' = 2, 'int_value' = 3, 'double_value' = 4, 'array_value' = 5, 'kvlist_value' = 6, 'bytes_value' = 7)))))),
                status Tuple(
                    message String,
                    code Int32)))))))
)
ENGINE = `Null`;

-- Keys of stored spans. SpanKey = cityHash64(TraceId, SpanId); compared only among spans with the
-- same start time (ns), so a 64-bit hash collision between two real spans is not a concern.
CREATE TABLE IF NOT EXISTS otel_span_keys
(
    `Timestamp` DateTime64(9) CODEC(Delta(8), ZSTD(1)),
    `SpanKey` UInt64 CODEC(ZSTD(1)),
    `InsertToken` String CODEC(ZSTD(1))
)
ENGINE = MergeTree
PARTITION BY toDate(Timestamp)
ORDER BY (Timestamp, SpanKey)
TTL toDateTime(Timestamp) + toIntervalDay({{retention_days}})
SETTINGS index_granularity = 1024, ttl_only_drop_parts = 1, non_replicated_deduplication_window = 1000;

CREATE MATERIALIZED VIEW IF NOT EXISTS otel_span_keys_mv TO otel_span_keys
AS SELECT Timestamp, cityHash64(TraceId, SpanId) AS SpanKey,
          getSetting('insert_deduplication_token') AS InsertToken
FROM otel_traces;

-- Decoded spans on their way to otel_traces (nothing is stored here).
CREATE TABLE IF NOT EXISTS otlp_spans_in
(
    `Timestamp` DateTime64(9) CODEC(Delta(8), ZSTD(1)),
    `TraceId` String CODEC(ZSTD(1)),
    `SpanId` String CODEC(ZSTD(1)),
    `ParentSpanId` String CODEC(ZSTD(1)),
    `TraceState` String CODEC(ZSTD(1)),
    `SpanName` LowCardinality(String) CODEC(ZSTD(1)),
    `SpanKind` LowCardinality(String) CODEC(ZSTD(1)),
    `ServiceName` LowCardinality(String) CODEC(ZSTD(1)),
    `ResourceAttributes` Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    `ScopeName` String CODEC(ZSTD(1)),
    `ScopeVersion` String CODEC(ZSTD(1)),
    `SpanAttributes` Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    `Duration` UInt64 CODEC(T64, ZSTD(1)),
    `StatusCode` LowCardinality(String) CODEC(ZSTD(1)),
    `StatusMessage` String CODEC(ZSTD(1)),
    `Events.Timestamp` Array(DateTime64(9)) CODEC(ZSTD(1)),
    `Events.Name` Array(LowCardinality(String)) CODEC(ZSTD(1)),
    `Events.Attributes` Array(Map(LowCardinality(String), String)) CODEC(ZSTD(1)),
    `Links.TraceId` Array(String) CODEC(ZSTD(1)),
    `Links.SpanId` Array(String) CODEC(ZSTD(1)),
    `Links.TraceState` Array(String) CODEC(ZSTD(1)),
    `Links.Attributes` Array(Map(LowCardinality(String), String)) CODEC(ZSTD(1))
)
ENGINE = `Null`;

CREATE MATERIALIZED VIEW IF NOT EXISTS otlp_spans_dedup_mv TO otel_traces
AS SELECT *
FROM otlp_spans_in
WHERE (Timestamp, cityHash64(TraceId, SpanId)) NOT IN (
    SELECT Timestamp, SpanKey
    FROM otel_span_keys
    WHERE (Timestamp, SpanKey) IN (SELECT Timestamp, cityHash64(TraceId, SpanId) FROM otlp_spans_in)
      AND NOT (getSetting('insert_deduplication_token') != '' AND InsertToken = getSetting('insert_deduplication_token')))
LIMIT 1 BY TraceId, SpanId;

-- The decoder: OTLP/JSON bodies of otlp_traces_in into span rows, written into otlp_spans_in (which
-- drops the spans already stored) rather than into otel_traces directly.
CREATE MATERIALIZED VIEW IF NOT EXISTS otlp_traces_decode_mv TO otlp_spans_in
AS WITH
    -- one JSON element of an array/kvlist (scalars only: deeper nesting becomes null)
    (x -> multiIf(x.value = 'string_value', toJSONString(x.string_value),
                  x.value = 'bool_value', if(x.bool_value, 'true', 'false'),
                  x.value = 'int_value', toString(x.int_value),
                  x.value = 'double_value', if(isFinite(x.double_value), toString(x.double_value), toJSONString(toString(x.double_value))),
                  x.value = 'bytes_value', toJSONString(base64Encode(x.bytes_value)),
                  'null')) AS json_scalar,
    (v -> multiIf(v.value = 'string_value', v.string_value,
                  v.value = 'bool_value', if(v.bool_value, 'true', 'false'),
                  v.value = 'int_value', toString(v.int_value),
                  v.value = 'double_value', toString(v.double_value),
                  v.value = 'array_value', concat('[', arrayStringConcat(arrayMap(x -> json_scalar(x), v.array_value.values), ','), ']'),
                  v.value = 'kvlist_value', concat('{', arrayStringConcat(arrayMap(kv -> concat(toJSONString(kv.key), ':', json_scalar(kv.value)), v.kvlist_value.values), ','), '}'),
                  v.value = 'bytes_value', base64Encode(v.bytes_value),
                  '')) AS any_to_string,
    (attrs -> CAST((arrayMap(a -> a.key, attrs), arrayMap(a -> any_to_string(a.value), attrs)), 'Map(LowCardinality(String), String)')) AS to_map,
    -- Flatten resource -> scope -> span into one array before the single arrayJoin, so only each
    -- span (not its whole enclosing scope, with every sibling span) is copied per output row.
    arrayMap(r -> to_map(r.resource.attributes), resource_spans) AS resource_maps,
    arrayJoin(arrayFlatten(arrayMap((r, ri) -> arrayFlatten(arrayMap(s -> arrayMap(p -> (p, s.scope.name, s.scope.version, ri), s.spans), r.scope_spans)),
                                    resource_spans, arrayEnumerate(resource_spans)))) AS row,
    row.1 AS sp,
    resource_maps[row.4] AS resource_map
SELECT
    fromUnixTimestamp64Nano(toInt64(sp.start_time_unix_nano), 'UTC') AS Timestamp,
    lower(hex(sp.trace_id)) AS TraceId,
    lower(hex(sp.span_id)) AS SpanId,
    lower(hex(sp.parent_span_id)) AS ParentSpanId,
    sp.trace_state AS TraceState,
    sp.name AS SpanName,
    arrayElement(['Unspecified', 'Internal', 'Server', 'Client', 'Producer', 'Consumer'], sp.kind + 1) AS SpanKind,
    resource_map['service.name'] AS ServiceName,
    resource_map AS ResourceAttributes,
    row.2 AS ScopeName,
    row.3 AS ScopeVersion,
    to_map(sp.attributes) AS SpanAttributes,
    sp.end_time_unix_nano - sp.start_time_unix_nano AS Duration,
    arrayElement(['Unset', 'Ok', 'Error'], sp.status.code + 1) AS StatusCode,
    sp.status.message AS StatusMessage,
    arrayMap(e -> fromUnixTimestamp64Nano(toInt64(e.time_unix_nano), 'UTC'), sp.events) AS `Events.Timestamp`,
    arrayMap(e -> e.name, sp.events) AS `Events.Name`,
    arrayMap(e -> to_map(e.attributes), sp.events) AS `Events.Attributes`,
    arrayMap(l -> lower(hex(l.trace_id)), sp.links) AS `Links.TraceId`,
    arrayMap(l -> lower(hex(l.span_id)), sp.links) AS `Links.SpanId`,
    arrayMap(l -> l.trace_state, sp.links) AS `Links.TraceState`,
    arrayMap(l -> to_map(l.attributes), sp.links) AS `Links.Attributes`
FROM otlp_traces_in;
