-- Once only (DESIGN.md cost model 8): OTLP delivery is at-least-once (exporters
-- retry, the receiver's spool replays a batch whose insert outcome it never learnt), so the same
-- span can reach the store twice -- in the same request, in a differently batched request, or
-- after a receiver restart. Every reader must count a span once, by (TraceId, SpanId). The span
-- chain therefore gains one dedup step BEFORE otel_traces, so otel_traces and everything chained on
-- it (otel_traces_trace_id_ts, llm_calls and its ops rollups, task_spans, gateway_requests,
-- alerts_task_minutes) hold each span once and no reader needs FINAL or DISTINCT:
--
--   otlp_traces_in (Null, protobuf) -> otlp_traces_decode_mv -> otlp_spans_in (Null, exporter rows)
--     -> otlp_spans_dedup_mv -> otel_traces -> otel_span_keys_mv -> otel_span_keys
--
-- otlp_spans_dedup_mv drops (1) a second copy inside the same insert (LIMIT 1 BY TraceId, SpanId)
-- and (2) spans whose key was stored by an EARLIER insert: otel_span_keys holds (start time,
-- cityHash64(TraceId, SpanId)) of every stored span, ordered by start time, so the lookup reads
-- only the granules around the batch's own start times (a duplicate is the same span sent again:
-- same ids, same start). The key of an insert made with insert_deduplication_token T is stored with
-- T and does not filter a later insert with the same T: that is the receiver replaying the very
-- batch (same records, same token) after a partly failed insert, and ClickHouse's own block
-- deduplication (non_replicated_deduplication_window below, deduplicate_blocks_in_dependent_
-- materialized_views) then skips exactly the blocks each table already holds and writes the rest.
--
-- otel_traces keeps the contrib exporter's columns, engine and keys (only a table setting is added),
-- so the contrib collector can still write into it directly. What then holds: an exporter retry of
-- the same batch is one identical block, dropped by the deduplication window (and the views chained
-- on otel_traces skip it too); spans re-sent in a different batch are NOT dropped on that path.
-- See docs/reliability.md.

-- Block deduplication windows (per table, last 1000 inserts) on every MergeTree the span and
-- metric chains write, so a replayed insert with the same insert_deduplication_token is idempotent
-- table by table even when the first attempt failed half way (e.g. out of disk space after
-- otel_traces was written but before llm_calls was).
ALTER TABLE otel_traces MODIFY SETTING non_replicated_deduplication_window = 1000;
ALTER TABLE otel_traces_trace_id_ts MODIFY SETTING non_replicated_deduplication_window = 1000;
ALTER TABLE llm_calls MODIFY SETTING non_replicated_deduplication_window = 1000;
ALTER TABLE task_spans MODIFY SETTING non_replicated_deduplication_window = 1000;
ALTER TABLE gateway_requests MODIFY SETTING non_replicated_deduplication_window = 1000;
ALTER TABLE alerts_task_minutes MODIFY SETTING non_replicated_deduplication_window = 1000;
ALTER TABLE ops_engine_minutes MODIFY SETTING non_replicated_deduplication_window = 1000;
ALTER TABLE ops_engine_hours MODIFY SETTING non_replicated_deduplication_window = 1000;
ALTER TABLE ops_dims_hours MODIFY SETTING non_replicated_deduplication_window = 1000;
ALTER TABLE otel_metrics_gauge MODIFY SETTING non_replicated_deduplication_window = 1000;
ALTER TABLE otel_metrics_sum MODIFY SETTING non_replicated_deduplication_window = 1000;
ALTER TABLE otel_metrics_histogram MODIFY SETTING non_replicated_deduplication_window = 1000;
ALTER TABLE ops_gauge_minutes MODIFY SETTING non_replicated_deduplication_window = 1000;

-- Keys of stored spans. SpanKey = cityHash64(TraceId, SpanId); compared only among spans with the
-- same start time (ns), so a 64-bit hash collision between two real spans is not a concern.
CREATE TABLE IF NOT EXISTS otel_span_keys (
    Timestamp DateTime64(9) CODEC(Delta(8), ZSTD(1)),
    SpanKey UInt64 CODEC(ZSTD(1)),
    InsertToken String CODEC(ZSTD(1))
) ENGINE = MergeTree()
PARTITION BY toDate(Timestamp)
ORDER BY (Timestamp, SpanKey)
TTL toDateTime(Timestamp) + toIntervalDay({{retention_days}})
SETTINGS index_granularity = 1024, ttl_only_drop_parts = 1, non_replicated_deduplication_window = 1000;

CREATE MATERIALIZED VIEW IF NOT EXISTS otel_span_keys_mv TO otel_span_keys
AS SELECT Timestamp, cityHash64(TraceId, SpanId) AS SpanKey,
          getSetting('insert_deduplication_token') AS InsertToken
FROM otel_traces;

-- Decoded spans on their way to otel_traces (nothing is stored here).
CREATE TABLE IF NOT EXISTS otlp_spans_in AS otel_traces ENGINE = Null;

CREATE MATERIALIZED VIEW IF NOT EXISTS otlp_spans_dedup_mv TO otel_traces
AS SELECT *
FROM otlp_spans_in
WHERE (Timestamp, cityHash64(TraceId, SpanId)) NOT IN (
    SELECT Timestamp, SpanKey
    FROM otel_span_keys
    WHERE (Timestamp, SpanKey) IN (SELECT Timestamp, cityHash64(TraceId, SpanId) FROM otlp_spans_in)
      AND NOT (getSetting('insert_deduplication_token') != '' AND InsertToken = getSetting('insert_deduplication_token')))
LIMIT 1 BY TraceId, SpanId;

-- The decoder of migration 0030, now writing into otlp_spans_in. Created before the old view is
-- dropped, so an insert racing this migration is stored twice (and counted once) rather than lost.
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

DROP VIEW IF EXISTS otlp_traces_in_mv;
