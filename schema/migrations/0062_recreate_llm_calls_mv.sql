-- llm_calls, second shape (issues 12 and 13), re-created materialized view; everything 0004's view
-- did is kept, plus:
--   * task_call: the call index within its step (task.call, 1..; the task SDK sets it, attempts of
--     one call share it), so parallel calls of one step are told apart; NULL when not sent;
--   * 'repetition' (vLLM 0.32's repetition detection) is a normal finish reason, not a partial call;
--   * model of an engine row without a model attribute (vLLM 0.32 spans carry none): the
--     model_name label scraped from that replica's /metrics (replica_models), with model_scraped = 1
--     so the cost job prefers the gateway's / client's model and falls back to this one.
-- error_class (0060) stays the column's DEFAULT: this view does not write it.
ALTER TABLE llm_calls ADD COLUMN IF NOT EXISTS task_call Nullable(UInt16)
    COMMENT 'task.call: call index within its step (1..), NULL when not sent' AFTER task_attempt;
ALTER TABLE llm_calls ADD COLUMN IF NOT EXISTS model_scraped UInt8
    COMMENT '1 = model is the scraped vllm model_name label of the replica (no model on the span)' AFTER model;

-- The model each replica serves, from its scraped gauges' model_name label (latest wins).
CREATE TABLE IF NOT EXISTS replica_models (
    replica LowCardinality(String) COMMENT 'service.instance.id',
    model LowCardinality(String) COMMENT 'vLLM model_name label (the served model name)',
    seen DateTime64(9, 'UTC') COMMENT 'scrape time of that label'
) ENGINE = ReplacingMergeTree(seen)
ORDER BY replica;

CREATE MATERIALIZED VIEW IF NOT EXISTS replica_models_mv TO replica_models
AS SELECT
    ResourceAttributes['service.instance.id'] AS replica,
    argMax(Attributes['model_name'], TimeUnix) AS model,
    max(TimeUnix) AS seen
FROM otel_metrics_gauge
WHERE MetricName = 'vllm:num_requests_running' AND Attributes['model_name'] != ''
  AND ResourceAttributes['service.instance.id'] != ''
GROUP BY replica;

INSERT INTO replica_models
SELECT ResourceAttributes['service.instance.id'] AS replica, argMax(Attributes['model_name'], TimeUnix), max(TimeUnix)
FROM otel_metrics_gauge
WHERE MetricName = 'vllm:num_requests_running' AND Attributes['model_name'] != ''
  AND ResourceAttributes['service.instance.id'] != ''
  AND (SELECT count() FROM replica_models) = 0
GROUP BY replica;

DROP VIEW IF EXISTS llm_calls_mv;

CREATE MATERIALIZED VIEW IF NOT EXISTS llm_calls_mv TO llm_calls
AS SELECT
    start_time, end_time, trace_id, span_id, parent_span_id, call_source, service_name, span_name,
    replica, gpu_type,
    if(span_model = '' AND call_source = 'engine', sm.served, span_model) AS model,
    toUInt8(span_model = '' AND call_source = 'engine' AND sm.served != '') AS model_scraped,
    request_id, task_id, task_type, task_step, task_attempt, task_call, tenant_id,
    tenant_priority, prompt_tokens, cached_tokens, output_tokens, ttft_s, e2e_s, queue_s, prefill_s,
    decode_s, inference_s, finish_reason, status, error_type,
    toUInt8(ifNull(output_tokens, 0) > 0 AND (
        status = 'error'
        OR (finish_reason != ''
            AND finish_reason NOT IN ('stop', 'length', 'tool_calls', 'content_filter', 'function_call', 'repetition'))
        OR client_partial IN ('true', '1'))) AS partial,
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
                ResourceAttributes['gen_ai.request.model']) AS span_model,
        if(SpanAttributes['gen_ai.request.id'] != '', SpanAttributes['gen_ai.request.id'], SpanAttributes['gen_ai.response.id']) AS request_id,
        SpanAttributes['task.id'] AS task_id,
        SpanAttributes['task.type'] AS task_type,
        SpanAttributes['task.step'] AS task_step,
        toUInt16OrNull(SpanAttributes['task.attempt']) AS task_attempt,
        toUInt16OrNull(SpanAttributes['task.call']) AS task_call,
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
        SpanAttributes['gen_ai.client.partial'] AS client_partial
    FROM otel_traces
    WHERE SpanName = 'llm_request'
       OR (SpanKind IN ('Server', 'SPAN_KIND_SERVER') AND mapContains(SpanAttributes, 'gen_ai.latency.e2e'))
       OR mapContains(SpanAttributes, 'gateway.attempt')
       OR (SpanKind IN ('Client', 'SPAN_KIND_CLIENT') AND mapContains(SpanAttributes, 'gen_ai.operation.name'))
) AS c
LEFT JOIN (SELECT replica AS sm_replica, argMax(model, seen) AS served FROM replica_models GROUP BY replica) AS sm
    ON sm.sm_replica = c.replica;
