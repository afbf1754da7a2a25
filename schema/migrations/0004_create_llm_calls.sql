-- One row per LLM call span, typed: vLLM `llm_request` engine spans (both the deprecated
-- gen_ai.usage.prompt_tokens/completion_tokens names and the semconv input/output names), and the
-- gateway's and client's GenAI call spans. Filled on insert into otel_traces; attribute values
-- that do not parse become NULL (the *OrNull functions), never a failed insert.
-- call_source: 'engine' (the evidence of GPU work), 'gateway' (one upstream attempt of the
-- gateway: spans with gateway.attempt), 'client' (one attempt of the task SDK's client). Gateway
-- and client rows give task context, hidden retries, and the only evidence of work when a crashed
-- replica never exported its spans. See docs/telemetry.md for the span contract.
CREATE TABLE IF NOT EXISTS llm_calls (
    start_time DateTime64(9) CODEC(Delta(8), ZSTD(1)),
    end_time DateTime64(9) CODEC(Delta(8), ZSTD(1)),
    trace_id String CODEC(ZSTD(1)),
    span_id String CODEC(ZSTD(1)),
    parent_span_id String CODEC(ZSTD(1)),
    call_source LowCardinality(String),
    service_name LowCardinality(String),
    span_name LowCardinality(String),
    replica LowCardinality(String),
    gpu_type LowCardinality(String),
    model LowCardinality(String),
    request_id String CODEC(ZSTD(1)),
    task_id String CODEC(ZSTD(1)),
    task_type LowCardinality(String),
    task_step String CODEC(ZSTD(1)),
    task_attempt Nullable(UInt16),
    tenant_id LowCardinality(String),
    tenant_priority LowCardinality(String),
    prompt_tokens Nullable(UInt32),
    cached_tokens Nullable(UInt32),
    output_tokens Nullable(UInt32),
    ttft_s Nullable(Float64),
    e2e_s Float64,
    queue_s Nullable(Float64),
    prefill_s Nullable(Float64),
    decode_s Nullable(Float64),
    inference_s Nullable(Float64),
    finish_reason LowCardinality(String),
    status LowCardinality(String),
    error_type LowCardinality(String),
    partial UInt8,
    gateway_retries Nullable(UInt16),
    upstream_status Nullable(UInt16),
    policy LowCardinality(String)
) ENGINE = MergeTree()
PARTITION BY toDate(start_time)
ORDER BY (call_source, toStartOfMinute(start_time), replica, span_id)
TTL toDateTime(start_time) + toIntervalDay({{retention_days}})
SETTINGS index_granularity = 8192, ttl_only_drop_parts = 1;

CREATE MATERIALIZED VIEW IF NOT EXISTS llm_calls_mv TO llm_calls
AS SELECT
    start_time, end_time, trace_id, span_id, parent_span_id, call_source, service_name, span_name,
    replica, gpu_type, model, request_id, task_id, task_type, task_step, task_attempt, tenant_id,
    tenant_priority, prompt_tokens, cached_tokens, output_tokens, ttft_s, e2e_s, queue_s, prefill_s,
    decode_s, inference_s, finish_reason, status, error_type,
    toUInt8(ifNull(output_tokens, 0) > 0 AND (
        status = 'error'
        OR (finish_reason != '' AND finish_reason NOT IN ('stop', 'length', 'tool_calls', 'content_filter', 'function_call'))
        OR SpanAttributes['gen_ai.client.partial'] IN ('true', '1'))) AS partial,
    gateway_retries, upstream_status, policy
FROM (
    SELECT
        Timestamp AS start_time,
        fromUnixTimestamp64Nano(toUnixTimestamp64Nano(Timestamp) + toInt64(Duration), 'UTC') AS end_time,
        TraceId AS trace_id,
        SpanId AS span_id,
        ParentSpanId AS parent_span_id,
        multiIf(
            SpanName = 'llm_request'
                OR (SpanKind IN ('Server', 'SPAN_KIND_SERVER') AND mapContains(SpanAttributes, 'gen_ai.latency.e2e')),
            'engine',
            mapContains(SpanAttributes, 'gateway.attempt'), 'gateway',
            'client') AS call_source,
        ServiceName AS service_name,
        SpanName AS span_name,
        multiIf(call_source = 'engine', if(ResourceAttributes['service.instance.id'] != '', ResourceAttributes['service.instance.id'], ServiceName),
                call_source = 'gateway', SpanAttributes['gateway.replica'],
                '') AS replica,
        ResourceAttributes['gpu.type'] AS gpu_type,
        multiIf(SpanAttributes['gen_ai.request.model'] != '', SpanAttributes['gen_ai.request.model'],
                SpanAttributes['gen_ai.response.model'] != '', SpanAttributes['gen_ai.response.model'],
                ResourceAttributes['gen_ai.request.model']) AS model,
        if(SpanAttributes['gen_ai.request.id'] != '', SpanAttributes['gen_ai.request.id'], SpanAttributes['gen_ai.response.id']) AS request_id,
        SpanAttributes['task.id'] AS task_id,
        SpanAttributes['task.type'] AS task_type,
        SpanAttributes['task.step'] AS task_step,
        toUInt16OrNull(SpanAttributes['task.attempt']) AS task_attempt,
        SpanAttributes['tenant.id'] AS tenant_id,
        SpanAttributes['tenant.priority'] AS tenant_priority,
        coalesce(toUInt32OrNull(SpanAttributes['gen_ai.usage.prompt_tokens']),
                 toUInt32OrNull(SpanAttributes['gen_ai.usage.input_tokens'])) AS prompt_tokens,
        coalesce(toUInt32OrNull(SpanAttributes['gen_ai.usage.cache_read.input_tokens']),
                 toUInt32OrNull(SpanAttributes['gen_ai.usage.cached_tokens'])) AS cached_tokens,
        coalesce(toUInt32OrNull(SpanAttributes['gen_ai.usage.completion_tokens']),
                 toUInt32OrNull(SpanAttributes['gen_ai.usage.output_tokens']),
                 toUInt32OrNull(SpanAttributes['gateway.tokens_streamed']),
                 toUInt32OrNull(SpanAttributes['gen_ai.client.tokens_received'])) AS output_tokens,
        coalesce(toFloat64OrNull(SpanAttributes['gen_ai.latency.time_to_first_token']),
                 toFloat64OrNull(SpanAttributes['gen_ai.response.time_to_first_chunk'])) AS ttft_s,
        ifNull(toFloat64OrNull(SpanAttributes['gen_ai.latency.e2e']), Duration / 1e9) AS e2e_s,
        toFloat64OrNull(SpanAttributes['gen_ai.latency.time_in_queue']) AS queue_s,
        toFloat64OrNull(SpanAttributes['gen_ai.latency.time_in_model_prefill']) AS prefill_s,
        toFloat64OrNull(SpanAttributes['gen_ai.latency.time_in_model_decode']) AS decode_s,
        toFloat64OrNull(SpanAttributes['gen_ai.latency.time_in_model_inference']) AS inference_s,
        if(startsWith(SpanAttributes['gen_ai.response.finish_reasons'], '['),
           JSONExtractString(SpanAttributes['gen_ai.response.finish_reasons'], 1),
           SpanAttributes['gen_ai.response.finish_reasons']) AS finish_reason,
        multiIf(StatusCode IN ('Error', 'STATUS_CODE_ERROR'), 'error',
                StatusCode IN ('Ok', 'STATUS_CODE_OK'), 'ok', 'unset') AS status,
        SpanAttributes['error.type'] AS error_type,
        toUInt16OrNull(SpanAttributes['gateway.retries']) AS gateway_retries,
        toUInt16OrNull(SpanAttributes['gateway.upstream.status_code']) AS upstream_status,
        SpanAttributes['gateway.policy'] AS policy,
        SpanAttributes
    FROM otel_traces
    WHERE SpanName = 'llm_request'
       OR (SpanKind IN ('Server', 'SPAN_KIND_SERVER') AND mapContains(SpanAttributes, 'gen_ai.latency.e2e'))
       OR mapContains(SpanAttributes, 'gateway.attempt')
       OR (SpanKind IN ('Client', 'SPAN_KIND_CLIENT') AND mapContains(SpanAttributes, 'gen_ai.operation.name'))
);
