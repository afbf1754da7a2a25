-- Live-operations pre-aggregations (0050/0051) on the error taxonomy and data-parallel replicas:
--   * errors = engine rows that were the replica's fault (error_class upstream_error or timeout,
--     0060) instead of status error / finish abort (a client abort is not a replica error);
--   * gateway_attempts / gateway_errors per replica: the gateway's view (failed before or while
--     streaming, crashed replicas included), read instead of the engine's where the gateway routed;
--   * ops_gauge_minutes.scrapes: a count gauge of a replica is the sum over its engines per scrape
--     (vLLM's data parallel: one series per `engine` label), so readers divide by scrapes, not points.
ALTER TABLE ops_engine_minutes
    ADD COLUMN IF NOT EXISTS gateway_attempts SimpleAggregateFunction(sum, UInt64),
    ADD COLUMN IF NOT EXISTS gateway_errors SimpleAggregateFunction(sum, UInt64);
ALTER TABLE ops_engine_hours
    ADD COLUMN IF NOT EXISTS gateway_attempts SimpleAggregateFunction(sum, UInt64),
    ADD COLUMN IF NOT EXISTS gateway_errors SimpleAggregateFunction(sum, UInt64);
ALTER TABLE ops_gauge_minutes
    ADD COLUMN IF NOT EXISTS scrapes SimpleAggregateFunction(sum, UInt64)
    COMMENT 'scrapes in the minute (distinct scrape times): a count gauge''s per-scrape sum over engines = value_sum / scrapes';

DROP VIEW IF EXISTS ops_engine_minutes_mv;

CREATE MATERIALIZED VIEW IF NOT EXISTS ops_engine_minutes_mv TO ops_engine_minutes
AS SELECT
    toStartOfMinute(c.end_time) AS minute,
    c.replica AS replica,
    c.model AS model,
    toUInt64(count()) AS requests,
    toUInt64(sum(ifNull(c.output_tokens, 0))) AS output_tokens,
    toUInt64(countIf(c.error_class IN ('upstream_error', 'timeout'))) AS errors,
    quantilesTDigestStateIf(0.5, 0.95, 0.99)(ifNull(c.ttft_s, 0), c.ttft_s IS NOT NULL) AS ttft_q,
    quantileTDigestStateIf(0.95)(ifNull(c.decode_s, 0) / greatest(ifNull(c.output_tokens, 0) - 1, 1),
        ifNull(c.output_tokens, 0) > 1 AND c.decode_s IS NOT NULL) AS itl_q,
    quantileTDigestState(0.95)(c.e2e_s) AS e2e_q
FROM llm_calls AS c
WHERE c.call_source = 'engine'
GROUP BY minute, replica, model;

DROP VIEW IF EXISTS ops_engine_hours_mv;

CREATE MATERIALIZED VIEW IF NOT EXISTS ops_engine_hours_mv TO ops_engine_hours
AS SELECT
    toStartOfHour(c.end_time) AS hour,
    c.replica AS replica,
    c.model AS model,
    toUInt64(count()) AS requests,
    toUInt64(sum(ifNull(c.output_tokens, 0))) AS output_tokens,
    toUInt64(countIf(c.error_class IN ('upstream_error', 'timeout'))) AS errors,
    quantilesTDigestStateIf(0.5, 0.95, 0.99)(ifNull(c.ttft_s, 0), c.ttft_s IS NOT NULL) AS ttft_q,
    quantileTDigestStateIf(0.95)(ifNull(c.decode_s, 0) / greatest(ifNull(c.output_tokens, 0) - 1, 1),
        ifNull(c.output_tokens, 0) > 1 AND c.decode_s IS NOT NULL) AS itl_q,
    quantileTDigestState(0.95)(c.e2e_s) AS e2e_q
FROM llm_calls AS c
WHERE c.call_source = 'engine'
GROUP BY hour, replica, model;

-- The gateway's attempts per replica and minute / hour (the other columns stay empty on these rows;
-- AggregatingMergeTree merges them with the engine rows of the same key).
CREATE MATERIALIZED VIEW IF NOT EXISTS ops_gateway_minutes_mv TO ops_engine_minutes
AS SELECT
    toStartOfMinute(end_time) AS minute, replica, model,
    toUInt64(count()) AS gateway_attempts,
    toUInt64(countIf(error_class IN ('upstream_error', 'timeout'))) AS gateway_errors
FROM llm_calls
WHERE call_source = 'gateway' AND replica != ''
GROUP BY minute, replica, model;

CREATE MATERIALIZED VIEW IF NOT EXISTS ops_gateway_hours_mv TO ops_engine_hours
AS SELECT
    toStartOfHour(end_time) AS hour, replica, model,
    toUInt64(count()) AS gateway_attempts,
    toUInt64(countIf(error_class IN ('upstream_error', 'timeout'))) AS gateway_errors
FROM llm_calls
WHERE call_source = 'gateway' AND replica != ''
GROUP BY hour, replica, model;

-- Back-fill the gateway columns once from the rows already stored (this file runs once).
INSERT INTO ops_engine_minutes (minute, replica, model, gateway_attempts, gateway_errors)
SELECT toStartOfMinute(end_time) AS minute, replica, model, toUInt64(count()),
       toUInt64(countIf(error_class IN ('upstream_error', 'timeout')))
FROM llm_calls WHERE call_source = 'gateway' AND replica != ''
GROUP BY minute, replica, model;

INSERT INTO ops_engine_hours (hour, replica, model, gateway_attempts, gateway_errors)
SELECT toStartOfHour(end_time) AS hour, replica, model, toUInt64(count()),
       toUInt64(countIf(error_class IN ('upstream_error', 'timeout')))
FROM llm_calls WHERE call_source = 'gateway' AND replica != ''
GROUP BY hour, replica, model;

DROP VIEW IF EXISTS ops_gauge_minutes_mv;

CREATE MATERIALIZED VIEW IF NOT EXISTS ops_gauge_minutes_mv TO ops_gauge_minutes
AS SELECT
    toStartOfMinute(TimeUnix) AS minute,
    if(ResourceAttributes['service.instance.id'] != '', ResourceAttributes['service.instance.id'], ServiceName) AS replica,
    Attributes['model_name'] AS model,
    if(MetricName = 'vllm:gpu_cache_usage_perc', 'vllm:kv_cache_usage_perc', MetricName) AS metric,
    sum(Value) AS value_sum,
    toUInt64(count()) AS points,
    toUInt64(uniqExact(TimeUnix)) AS scrapes
FROM otel_metrics_gauge
WHERE MetricName IN ('vllm:num_requests_running', 'vllm:num_requests_waiting',
                     'vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc')
GROUP BY minute, replica, model, metric;
