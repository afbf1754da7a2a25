-- What the cost model reads from the spans: one row per LLM call (llm_calls, from engine, gateway and
-- client spans), the task context (task_spans: SDK task roots, derived roots of standard instrumentation,
-- evaluation verdicts), the gateway's requests and the model each replica serves.

-- One row per LLM call span, typed: vLLM `llm_request` engine spans (both the deprecated
-- gen_ai.usage.prompt_tokens/completion_tokens names and the semconv input/output names), and the
-- gateway's and client's GenAI call spans. Filled on insert into otel_traces; attribute values
-- that do not parse become NULL (the *OrNull functions), never a failed insert.
-- call_source: 'engine' (the evidence of GPU work), 'gateway' (one upstream attempt of the
-- gateway: spans with gateway.attempt), 'client' (one attempt of the task SDK's client). Gateway
-- and client rows give task context, hidden retries, and the only evidence of work when a crashed
-- replica never exported its spans. See docs/telemetry.md for the span contract.
CREATE TABLE IF NOT EXISTS llm_calls
(
    `start_time` DateTime64(9) CODEC(Delta(8), ZSTD(1)),
    `end_time` DateTime64(9) CODEC(Delta(8), ZSTD(1)),
    `trace_id` String CODEC(ZSTD(1)),
    `span_id` String CODEC(ZSTD(1)),
    `parent_span_id` String CODEC(ZSTD(1)),
    `call_source` LowCardinality(String),
    `service_name` LowCardinality(String),
    `span_name` LowCardinality(String),
    `replica` LowCardinality(String),
    `gpu_type` LowCardinality(String),
    `model` LowCardinality(String),
    `model_scraped` UInt8 COMMENT '1 = model is the scraped vllm model_name label of the replica (no model on the span)',
    `request_id` String CODEC(ZSTD(1)),
    `task_id` String CODEC(ZSTD(1)),
    `task_type` LowCardinality(String),
    `task_step` String CODEC(ZSTD(1)),
    `task_attempt` Nullable(UInt16),
    `task_call` Nullable(UInt16) COMMENT 'task.call: call index within its step (1..), NULL when not sent',
    `tenant_id` LowCardinality(String),
    `tenant_priority` LowCardinality(String),
    `prompt_tokens` Nullable(UInt32),
    `cached_tokens` Nullable(UInt32),
    `output_tokens` Nullable(UInt32),
    `ttft_s` Nullable(Float64),
    `e2e_s` Float64,
    `queue_s` Nullable(Float64),
    `prefill_s` Nullable(Float64),
    `decode_s` Nullable(Float64),
    `inference_s` Nullable(Float64),
    `finish_reason` LowCardinality(String),
    `status` LowCardinality(String),
    `error_type` LowCardinality(String),
    `error_class` LowCardinality(String) DEFAULT multiIf((error_type = '') AND (status != 'error') AND (finish_reason NOT IN ('abort', 'error')), '', (lower(error_type) IN ('client_cancel', 'client_disconnect', 'client_disconnected', 'client_abort', 'cancelled', 'canceled', 'cancellederror', 'abandoned', 'abort', 'aborted', 'shutdown')), 'client_cancel', (lower(error_type) IN ('client_error', 'invalid_request', 'invalid_request_error', 'badrequesterror', 'notfounderror', 'unprocessableentityerror', 'conflicterror', 'authenticationerror', 'permissiondeniederror', 'context_length_exceeded')), 'client_error', (lower(error_type) IN ('rejected', 'admission_rejected', 'ratelimiterror', 'rate_limited')), 'rejected', (positionCaseInsensitive(error_type, 'timeout') > 0) OR (positionCaseInsensitive(error_type, 'timed_out') > 0) OR (lower(error_type) = 'deadline_exceeded'), 'timeout', ((if(match(error_type, '^(http\\.)?[1-5][0-9][0-9]$'), toUInt16OrZero(right(error_type, 3)), ifNull(upstream_status, 0)) AS error_http_status) IN (408, 504)), 'timeout', error_http_status = 429, 'rejected', (error_http_status >= 400) AND (error_http_status < 500), 'client_error', error_http_status >= 500, 'upstream_error', (error_type = '') AND (finish_reason = 'abort'), 'client_cancel', 'upstream_error') COMMENT 'whose fault a failure was: \'\' | client_error | client_cancel | upstream_error | timeout | rejected (docs/telemetry.md)',
    `partial` UInt8,
    `gateway_retries` Nullable(UInt16),
    `upstream_status` Nullable(UInt16),
    `policy` LowCardinality(String)
)
ENGINE = MergeTree
PARTITION BY toDate(start_time)
ORDER BY (call_source, toStartOfMinute(start_time), replica, span_id)
TTL toDateTime(start_time) + toIntervalDay({{retention_days}})
SETTINGS ttl_only_drop_parts = 1, non_replicated_deduplication_window = 1000;

-- Compact copies of the spans the cost jobs need besides llm_calls, filled on insert into
-- otel_traces so the jobs never scan the raw span table.

-- Task root spans ("task {task.type}", INTERNAL, with task.id): outcome, SLO, start and end.
CREATE TABLE IF NOT EXISTS task_spans
(
    `trace_id` String CODEC(ZSTD(1)),
    `span_id` String CODEC(ZSTD(1)),
    `task_id` String CODEC(ZSTD(1)),
    `task_type` LowCardinality(String),
    `tenant_id` LowCardinality(String),
    `tenant_priority` LowCardinality(String),
    `outcome` LowCardinality(String) COMMENT 'task.outcome as sent: success | failure | abandoned (other values read as unknown)',
    `start_time` DateTime64(9, 'UTC'),
    `end_time` DateTime64(9, 'UTC'),
    `slo_ttft_ms` Nullable(Float64) COMMENT 'milliseconds',
    `slo_e2e_ms` Nullable(Float64) COMMENT 'milliseconds',
    `status` LowCardinality(String) COMMENT 'ok | error | unset',
    `error_type` LowCardinality(String),
    `context_source` LowCardinality(String) DEFAULT 'sdk' COMMENT 'sdk (task SDK root) | genai_agent (invoke_agent / gen_ai.agent.name) | openinference | traceloop | genai_call (the LLM call is the root) | request_root (any other root span)',
    `session_id` String DEFAULT '' COMMENT 'gen_ai.conversation.id, session.id',
    INDEX idx_task_id task_id TYPE bloom_filter(0.01) GRANULARITY 1
)
ENGINE = MergeTree
PARTITION BY toDate(end_time)
ORDER BY (toStartOfMinute(end_time), task_id)
TTL toDateTime(end_time) + toIntervalDay({{retention_days}})
SETTINGS ttl_only_drop_parts = 1, non_replicated_deduplication_window = 1000;

-- Gateway request spans ("gateway chat", SERVER): the link client attempt -> gateway attempts
-- (a gateway attempt's parent is this span, whose parent is the client attempt).
CREATE TABLE IF NOT EXISTS gateway_requests
(
    `trace_id` String CODEC(ZSTD(1)),
    `span_id` String CODEC(ZSTD(1)),
    `parent_span_id` String CODEC(ZSTD(1)),
    `start_time` DateTime64(9, 'UTC'),
    `replica` LowCardinality(String) COMMENT 'gateway.replica: the final replica',
    `retries` Nullable(UInt16) COMMENT 'gateway.retries: hidden retries the gateway performed',
    `admission` LowCardinality(String) COMMENT 'gateway.admission: admitted | rejected'
)
ENGINE = MergeTree
PARTITION BY toDate(start_time)
ORDER BY (toStartOfMinute(start_time), trace_id, span_id)
TTL toDateTime(start_time) + toIntervalDay({{retention_days}})
SETTINGS ttl_only_drop_parts = 1, non_replicated_deduplication_window = 1000;

CREATE MATERIALIZED VIEW IF NOT EXISTS gateway_requests_mv TO gateway_requests
AS SELECT
    TraceId AS trace_id,
    SpanId AS span_id,
    ParentSpanId AS parent_span_id,
    Timestamp AS start_time,
    SpanAttributes['gateway.replica'] AS replica,
    toUInt16OrNull(SpanAttributes['gateway.retries']) AS retries,
    SpanAttributes['gateway.admission'] AS admission
FROM otel_traces
WHERE SpanKind IN ('Server', 'SPAN_KIND_SERVER')
  AND NOT mapContains(SpanAttributes, 'gateway.attempt')
  AND (SpanName = 'gateway chat' OR mapContains(SpanAttributes, 'gateway.policy'));

-- The model each replica serves, from its scraped gauges' model_name label (latest wins).
CREATE TABLE IF NOT EXISTS replica_models
(
    `replica` LowCardinality(String) COMMENT 'service.instance.id',
    `model` LowCardinality(String) COMMENT 'vLLM model_name label (the served model name)',
    `seen` DateTime64(9, 'UTC') COMMENT 'scrape time of that label'
)
ENGINE = ReplacingMergeTree(seen)
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

CREATE MATERIALIZED VIEW IF NOT EXISTS llm_calls_mv
TO llm_calls
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
            NOT mapContains(SpanAttributes, 'gen_ai.operation.name') AND NOT mapContains(SpanAttributes, 'llm.request.type')
                AND NOT mapContains(SpanAttributes, 'openinference.span.kind'), 'http',
            'client') AS call_source,
        ServiceName AS service_name,
        SpanName AS span_name,
        multiIf(call_source = 'engine', if(ResourceAttributes['service.instance.id'] != '', ResourceAttributes['service.instance.id'], ServiceName),
                call_source = 'gateway', SpanAttributes['gateway.replica'],
                '') AS replica,
        ResourceAttributes['gpu.type'] AS gpu_type,
        multiIf(SpanAttributes['gen_ai.request.model'] != '', SpanAttributes['gen_ai.request.model'],
                SpanAttributes['gen_ai.response.model'] != '', SpanAttributes['gen_ai.response.model'],
                call_source != 'engine' AND SpanAttributes['llm.model_name'] != '', SpanAttributes['llm.model_name'],
                call_source != 'engine' AND SpanAttributes['llm.request.model'] != '', SpanAttributes['llm.request.model'],
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
                 toUInt32OrNull(SpanAttributes['gen_ai.usage.input_tokens']),
                 if(call_source = 'engine', NULL, toUInt32OrNull(SpanAttributes['llm.token_count.prompt']))) AS prompt_tokens,
        coalesce(toUInt32OrNull(SpanAttributes['gen_ai.usage.cache_read.input_tokens']),
                 toUInt32OrNull(SpanAttributes['gen_ai.usage.cached_tokens']),
                 if(call_source = 'engine', NULL, toUInt32OrNull(SpanAttributes['llm.token_count.prompt_details.cache_read'])),
                 if(mapContains(SpanAttributes, 'gen_ai.usage.cache_write.input_tokens')
                        OR mapContains(SpanAttributes, 'gen_ai.usage.cache_creation.input_tokens'),
                    toUInt32(0), NULL)) AS cached_tokens,
        coalesce(toUInt32OrNull(SpanAttributes['gen_ai.usage.completion_tokens']),
                 toUInt32OrNull(SpanAttributes['gen_ai.usage.output_tokens']),
                 if(call_source = 'engine', NULL, toUInt32OrNull(SpanAttributes['llm.token_count.completion'])),
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
        call_source = 'client' AND SpanAttributes['gen_ai.is_streaming'] = 'true'
            AND NOT mapContains(SpanAttributes, 'gen_ai.response.finish_reasons') AS stream_incomplete,
        multiIf(StatusCode IN ('Error', 'STATUS_CODE_ERROR') OR stream_incomplete, 'error',
                StatusCode IN ('Ok', 'STATUS_CODE_OK'), 'ok', 'unset') AS status,
        if(SpanAttributes['error.type'] = '' AND stream_incomplete, 'stream_incomplete', SpanAttributes['error.type'])
            AS error_type,
        toUInt16OrNull(SpanAttributes['gateway.retries']) AS gateway_retries,
        toUInt16OrNull(SpanAttributes['gateway.upstream.status_code']) AS upstream_status,
        SpanAttributes['gateway.policy'] AS policy,
        SpanAttributes['gen_ai.client.partial'] AS client_partial
    FROM otel_traces
    WHERE SpanName = 'llm_request'
       OR (SpanKind IN ('Server', 'SPAN_KIND_SERVER') AND mapContains(SpanAttributes, 'gen_ai.latency.e2e'))
       OR mapContains(SpanAttributes, 'gateway.attempt')
       OR (SpanKind IN ('Client', 'SPAN_KIND_CLIENT')
           AND SpanAttributes['gen_ai.operation.name'] IN ('chat', 'text_completion', 'generate_content'))
       OR (SpanKind IN ('Client', 'SPAN_KIND_CLIENT') AND NOT mapContains(SpanAttributes, 'gen_ai.operation.name')
           AND SpanAttributes['llm.request.type'] IN ('chat', 'completion'))
       OR SpanAttributes['openinference.span.kind'] = 'LLM'
       OR (SpanKind IN ('Client', 'SPAN_KIND_CLIENT')
           AND match(multiIf(SpanAttributes['url.full'] != '', SpanAttributes['url.full'], SpanAttributes['http.url']),
                     '/(chat/)?completions([?#]|$)'))
) AS c
LEFT JOIN (SELECT replica AS sm_replica, argMax(model, seen) AS served FROM replica_models GROUP BY replica) AS sm
    ON sm.sm_replica = c.replica;

CREATE MATERIALIZED VIEW task_spans_mv TO task_spans
AS WITH
    row.1 = 1 AS is_evaluation,
    startsWith(SpanName, 'task ') AND SpanAttributes['task.id'] != '' AS is_sdk
SELECT
    TraceId AS trace_id,
    SpanId AS span_id,
    if(is_sdk AND NOT is_evaluation, SpanAttributes['task.id'], TraceId) AS task_id,
    multiIf(is_evaluation, '', is_sdk, SpanAttributes['task.type'],
            SpanAttributes['gen_ai.agent.name'] != '', SpanAttributes['gen_ai.agent.name'],
            SpanAttributes['traceloop.workflow.name'] != '', SpanAttributes['traceloop.workflow.name'],
            SpanAttributes['agent.name'] != '', SpanAttributes['agent.name'],
            SpanName) AS task_type,
    multiIf(is_evaluation, '', SpanAttributes['tenant.id'] != '' OR is_sdk, SpanAttributes['tenant.id'],
            SpanAttributes['enduser.id'] != '', SpanAttributes['enduser.id'],
            SpanAttributes['user.id']) AS tenant_id,
    if(is_evaluation, '', SpanAttributes['tenant.priority']) AS tenant_priority,
    multiIf(NOT is_evaluation, SpanAttributes['task.outcome'],
            row.3 IN ('fail', 'failed', 'failure'), 'failure',
            row.3 IN ('pass', 'passed', 'success'), 'success', '') AS outcome,
    if(is_evaluation, row.2, Timestamp) AS start_time,
    if(is_evaluation, row.2, fromUnixTimestamp64Nano(toUnixTimestamp64Nano(Timestamp) + toInt64(Duration), 'UTC')) AS end_time,
    if(is_evaluation, NULL, toFloat64OrNull(SpanAttributes['slo.ttft_ms'])) AS slo_ttft_ms,
    if(is_evaluation, NULL, toFloat64OrNull(SpanAttributes['slo.e2e_ms'])) AS slo_e2e_ms,
    multiIf(is_evaluation, '', StatusCode IN ('Error', 'STATUS_CODE_ERROR'), 'error',
            StatusCode IN ('Ok', 'STATUS_CODE_OK'), 'ok', 'unset') AS status,
    if(is_evaluation, '', SpanAttributes['error.type']) AS error_type,
    multiIf(is_evaluation, 'evaluation', is_sdk, 'sdk',
            SpanAttributes['gen_ai.operation.name'] = 'invoke_agent' OR SpanAttributes['gen_ai.agent.name'] != '', 'genai_agent',
            SpanAttributes['openinference.span.kind'] != '', 'openinference',
            SpanAttributes['traceloop.span.kind'] != '' OR SpanAttributes['traceloop.workflow.name'] != '', 'traceloop',
            SpanAttributes['gen_ai.operation.name'] != '', 'genai_call',
            'request_root') AS context_source,
    multiIf(is_evaluation OR is_sdk, '', SpanAttributes['gen_ai.conversation.id'] != '', SpanAttributes['gen_ai.conversation.id'],
            SpanAttributes['session.id']) AS session_id
FROM otel_traces
-- one row for a root span (kind 0), one per evaluation event (kind 1)
ARRAY JOIN arrayConcat(
    if((startsWith(SpanName, 'task ') AND SpanAttributes['task.id'] != '')
       OR (ParentSpanId = '' AND SpanName != 'llm_request'
           AND NOT (SpanKind IN ('Server', 'SPAN_KIND_SERVER') AND mapContains(SpanAttributes, 'gen_ai.latency.e2e'))
           AND NOT mapContains(SpanAttributes, 'gateway.attempt') AND NOT mapContains(SpanAttributes, 'task.id')
           AND SpanName != 'gateway chat' AND NOT mapContains(SpanAttributes, 'gateway.policy')),
       [(toUInt8(0), toDateTime64(Timestamp, 9, 'UTC'), '')], []),
    arrayMap(e -> (toUInt8(1), toDateTime64(e.1, 9, 'UTC'), lower(e.2['gen_ai.evaluation.score.label'])),
             arrayFilter(e -> e.3 = 'gen_ai.evaluation.result',
                         arrayZip(Events.Timestamp, Events.Attributes, Events.Name)))) AS row
WHERE (startsWith(SpanName, 'task ') AND SpanAttributes['task.id'] != '')
   OR (ParentSpanId = '' AND SpanName != 'llm_request'
       AND NOT (SpanKind IN ('Server', 'SPAN_KIND_SERVER') AND mapContains(SpanAttributes, 'gen_ai.latency.e2e'))
       AND NOT mapContains(SpanAttributes, 'gateway.attempt') AND NOT mapContains(SpanAttributes, 'task.id')
       AND SpanName != 'gateway chat' AND NOT mapContains(SpanAttributes, 'gateway.policy'))
   OR has(Events.Name, 'gen_ai.evaluation.result');
