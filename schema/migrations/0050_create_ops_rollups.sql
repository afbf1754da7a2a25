-- Pre-aggregations for the dashboard's live-operations page over long ranges (benchmark:
-- on 10M calls a 7-day latency series read every engine row). Filled on insert by materialized
-- views chained on llm_calls / otel_metrics_gauge, and back-filled once from existing rows below.
-- Read only by schema/queries/ops_*_rollup.sql (schema/queries/ops.py picks them for wide ranges).

-- Engine requests per minute (by request end), replica and model: counts and quantile states.
-- t-digest states (quantilesTDigest): compact and mergeable across minutes; ~1 % rank error.
CREATE TABLE IF NOT EXISTS ops_engine_minutes (
    minute DateTime('UTC'),
    replica LowCardinality(String),
    model LowCardinality(String),
    requests SimpleAggregateFunction(sum, UInt64),
    output_tokens SimpleAggregateFunction(sum, UInt64),
    errors SimpleAggregateFunction(sum, UInt64),
    ttft_q AggregateFunction(quantilesTDigest(0.5, 0.95, 0.99), Float64),
    itl_q AggregateFunction(quantileTDigest(0.95), Float64),
    e2e_q AggregateFunction(quantileTDigest(0.95), Float64)
) ENGINE = AggregatingMergeTree()
PARTITION BY toDate(minute)
ORDER BY (minute, replica, model)
TTL minute + toIntervalDay({{retention_days}})
SETTINGS ttl_only_drop_parts = 1;

CREATE MATERIALIZED VIEW IF NOT EXISTS ops_engine_minutes_mv TO ops_engine_minutes
AS SELECT
    toStartOfMinute(c.end_time) AS minute,
    c.replica AS replica,
    c.model AS model,
    toUInt64(count()) AS requests,
    toUInt64(sum(ifNull(c.output_tokens, 0))) AS output_tokens,
    toUInt64(countIf(c.status = 'error' OR c.finish_reason IN ('abort', 'error'))) AS errors,
    quantilesTDigestStateIf(0.5, 0.95, 0.99)(ifNull(c.ttft_s, 0), c.ttft_s IS NOT NULL) AS ttft_q,
    quantileTDigestStateIf(0.95)(ifNull(c.decode_s, 0) / greatest(ifNull(c.output_tokens, 0) - 1, 1),
        ifNull(c.output_tokens, 0) > 1 AND c.decode_s IS NOT NULL) AS itl_q,
    quantileTDigestState(0.95)(c.e2e_s) AS e2e_q
FROM llm_calls AS c
WHERE c.call_source = 'engine'
GROUP BY minute, replica, model;

INSERT INTO ops_engine_minutes
SELECT
    toStartOfMinute(end_time) AS minute,
    replica,
    model,
    toUInt64(count()),
    toUInt64(sum(ifNull(output_tokens, 0))),
    toUInt64(countIf(status = 'error' OR finish_reason IN ('abort', 'error'))),
    quantilesTDigestStateIf(0.5, 0.95, 0.99)(ifNull(ttft_s, 0), ttft_s IS NOT NULL),
    quantileTDigestStateIf(0.95)(ifNull(decode_s, 0) / greatest(ifNull(output_tokens, 0) - 1, 1),
        ifNull(output_tokens, 0) > 1 AND decode_s IS NOT NULL),
    quantileTDigestState(0.95)(e2e_s)
FROM llm_calls
WHERE call_source = 'engine'
GROUP BY minute, replica, model;

-- vLLM engine gauges per minute, replica, model label and metric: sum and count of the points.
CREATE TABLE IF NOT EXISTS ops_gauge_minutes (
    minute DateTime('UTC'),
    replica LowCardinality(String),
    model LowCardinality(String),
    metric LowCardinality(String),
    value_sum SimpleAggregateFunction(sum, Float64),
    points SimpleAggregateFunction(sum, UInt64)
) ENGINE = AggregatingMergeTree()
PARTITION BY toDate(minute)
ORDER BY (minute, metric, replica, model)
TTL minute + toIntervalDay({{retention_days}})
SETTINGS ttl_only_drop_parts = 1;

CREATE MATERIALIZED VIEW IF NOT EXISTS ops_gauge_minutes_mv TO ops_gauge_minutes
AS SELECT
    toStartOfMinute(TimeUnix) AS minute,
    if(ResourceAttributes['service.instance.id'] != '', ResourceAttributes['service.instance.id'], ServiceName) AS replica,
    Attributes['model_name'] AS model,
    if(MetricName = 'vllm:gpu_cache_usage_perc', 'vllm:kv_cache_usage_perc', MetricName) AS metric,
    sum(Value) AS value_sum,
    toUInt64(count()) AS points
FROM otel_metrics_gauge
WHERE MetricName IN ('vllm:num_requests_running', 'vllm:num_requests_waiting',
                     'vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc')
GROUP BY minute, replica, model, metric;

INSERT INTO ops_gauge_minutes
SELECT
    toStartOfMinute(TimeUnix) AS minute,
    if(ResourceAttributes['service.instance.id'] != '', ResourceAttributes['service.instance.id'], ServiceName) AS replica,
    Attributes['model_name'] AS model,
    if(MetricName = 'vllm:gpu_cache_usage_perc', 'vllm:kv_cache_usage_perc', MetricName) AS metric,
    sum(Value),
    toUInt64(count())
FROM otel_metrics_gauge
WHERE MetricName IN ('vllm:num_requests_running', 'vllm:num_requests_waiting',
                     'vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc')
GROUP BY minute, replica, model, metric;

-- Which models, tenants and task types were seen each hour (the sidebar's filter values).
CREATE TABLE IF NOT EXISTS ops_dims_hours (
    hour DateTime('UTC'),
    model LowCardinality(String),
    tenant_id LowCardinality(String),
    task_type LowCardinality(String),
    calls SimpleAggregateFunction(sum, UInt64)
) ENGINE = AggregatingMergeTree()
PARTITION BY toYYYYMM(hour)
ORDER BY (hour, model, tenant_id, task_type)
TTL hour + toIntervalDay({{retention_days}})
SETTINGS ttl_only_drop_parts = 1;

CREATE MATERIALIZED VIEW IF NOT EXISTS ops_dims_hours_mv TO ops_dims_hours
AS SELECT
    toStartOfHour(start_time) AS hour, model, tenant_id, task_type, toUInt64(count()) AS calls
FROM llm_calls
GROUP BY hour, model, tenant_id, task_type;

INSERT INTO ops_dims_hours
SELECT toStartOfHour(start_time) AS hour, model, tenant_id, task_type, toUInt64(count())
FROM llm_calls
GROUP BY hour, model, tenant_id, task_type;
