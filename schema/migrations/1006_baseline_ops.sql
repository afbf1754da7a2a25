-- Live operations rollups: per-minute and per-hour engine, gateway and gauge aggregates the Live page
-- reads, and the pre-cut series blocks of long windows.

-- Pre-aggregations for the dashboard's live-operations page over long ranges (benchmark:
-- on 10M calls a 7-day latency series read every engine row). Filled on insert by materialized
-- views chained on llm_calls / otel_metrics_gauge, and back-filled once from existing rows below.
-- Read only by schema/queries/ops_*_rollup.sql (schema/queries/ops.py picks them for wide ranges).

-- Engine requests per minute (by request end), replica and model: counts and quantile states.
-- t-digest states (quantilesTDigest): compact and mergeable across minutes; ~1 % rank error.
CREATE TABLE IF NOT EXISTS ops_engine_minutes
(
    `minute` DateTime('UTC'),
    `replica` LowCardinality(String),
    `model` LowCardinality(String),
    `requests` SimpleAggregateFunction(sum, UInt64),
    `output_tokens` SimpleAggregateFunction(sum, UInt64),
    `errors` SimpleAggregateFunction(sum, UInt64),
    `ttft_q` AggregateFunction(quantilesTDigest(0.5, 0.95, 0.99), Float64),
    `itl_q` AggregateFunction(quantileTDigest(0.95), Float64),
    `e2e_q` AggregateFunction(quantileTDigest(0.95), Float64),
    `gateway_attempts` SimpleAggregateFunction(sum, UInt64),
    `gateway_errors` SimpleAggregateFunction(sum, UInt64)
)
ENGINE = AggregatingMergeTree
PARTITION BY toDate(minute)
ORDER BY (minute, replica, model)
TTL minute + toIntervalDay({{retention_days}})
SETTINGS ttl_only_drop_parts = 1, non_replicated_deduplication_window = 1000;

-- vLLM engine gauges per minute, replica, model label and metric: sum and count of the points.
CREATE TABLE IF NOT EXISTS ops_gauge_minutes
(
    `minute` DateTime('UTC'),
    `replica` LowCardinality(String),
    `model` LowCardinality(String),
    `metric` LowCardinality(String),
    `value_sum` SimpleAggregateFunction(sum, Float64),
    `points` SimpleAggregateFunction(sum, UInt64),
    `scrapes` SimpleAggregateFunction(sum, UInt64) COMMENT 'scrapes in the minute (distinct scrape times): a count gauge\'s per-scrape sum over engines = value_sum / scrapes'
)
ENGINE = AggregatingMergeTree
PARTITION BY toDate(minute)
ORDER BY (minute, metric, replica, model)
TTL minute + toIntervalDay({{retention_days}})
SETTINGS ttl_only_drop_parts = 1, non_replicated_deduplication_window = 1000;

-- Which models, tenants and task types were seen each hour (the sidebar's filter values).
CREATE TABLE IF NOT EXISTS ops_dims_hours
(
    `hour` DateTime('UTC'),
    `model` LowCardinality(String),
    `tenant_id` LowCardinality(String),
    `task_type` LowCardinality(String),
    `calls` SimpleAggregateFunction(sum, UInt64)
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(hour)
ORDER BY (hour, model, tenant_id, task_type)
TTL hour + toIntervalDay({{retention_days}})
SETTINGS ttl_only_drop_parts = 1, non_replicated_deduplication_window = 1000;

CREATE MATERIALIZED VIEW IF NOT EXISTS ops_dims_hours_mv TO ops_dims_hours
AS SELECT
    toStartOfHour(start_time) AS hour, model, tenant_id, task_type, toUInt64(count()) AS calls
FROM llm_calls
GROUP BY hour, model, tenant_id, task_type;

-- Hourly companion of ops_engine_minutes for multi-day live-operations series:
-- on 10M calls a 7-day series merged ~300k minute t-digests (seconds); hours cut that 60-fold.
-- Same columns and semantics as ops_engine_minutes, with hour = toStartOfHour(request end).
CREATE TABLE IF NOT EXISTS ops_engine_hours
(
    `hour` DateTime('UTC'),
    `replica` LowCardinality(String),
    `model` LowCardinality(String),
    `requests` SimpleAggregateFunction(sum, UInt64),
    `output_tokens` SimpleAggregateFunction(sum, UInt64),
    `errors` SimpleAggregateFunction(sum, UInt64),
    `ttft_q` AggregateFunction(quantilesTDigest(0.5, 0.95, 0.99), Float64),
    `itl_q` AggregateFunction(quantileTDigest(0.95), Float64),
    `e2e_q` AggregateFunction(quantileTDigest(0.95), Float64),
    `gateway_attempts` SimpleAggregateFunction(sum, UInt64),
    `gateway_errors` SimpleAggregateFunction(sum, UInt64)
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(hour)
ORDER BY (hour, replica, model)
TTL hour + toIntervalDay({{retention_days}})
SETTINGS ttl_only_drop_parts = 1, non_replicated_deduplication_window = 1000;

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

-- The live page's multi-day latency series per block of hours: the t-digest
-- quantiles of every 2-hour and 12-hour bucket (the series buckets of the 7-day and 30-day ranges,
-- app.charts.series_bucket), fleet (replica '') and per replica, computed once by the rollup step
-- (schema/jobs/run_series_blocks.sql) by the very merge ops_latency_series_hours.sql does over the
-- bucket's rows of ops_engine_hours. On 10M calls that merge of ~10,700 hour states
-- was ~250-500 ms of the 7-day live page; a block is the same numbers (the merge of the same rows
-- reads them in the same order: checked equal to the last bit on the 10M bench store).
-- ops_engine_hours is written on insert (late spans too) and merged in the background, so a block
-- carries the fingerprint of the rows it was computed from (their count and summed requests); the
-- reader takes a block only while the bucket's rows have that fingerprint now, else it merges the
-- hours as before. Insert-only: a rewrite adds a newer version; plain MergeTree (a merge must not
-- drop a version a reader may still be reading).
CREATE TABLE IF NOT EXISTS ops_series_blocks
(
    `block_start` DateTime('UTC') COMMENT 'toStartOfInterval(hour, block_seconds)',
    `block_seconds` UInt32 COMMENT '7200 (7-day range) or 43200 (30-day range)',
    `version` UInt64 COMMENT 'run id of the rollup step that wrote it',
    `fp_rows` UInt64 COMMENT 'rows of ops_engine_hours in the block when it was computed (all models)',
    `fp_requests` UInt64 COMMENT 'their summed requests',
    `fp_output_tokens` UInt64 DEFAULT 0 COMMENT 'their summed output tokens',
    `replica` LowCardinality(String) COMMENT 'empty = the fleet',
    `ttft_q` Array(Float32) COMMENT 'seconds: quantilesTDigestMerge(0.5, 0.95, 0.99) of the hours ttft_q',
    `itl_p95_s` Float32 COMMENT 'seconds: quantileTDigestMerge(0.95) of itl_q',
    `e2e_p95_s` Float32 COMMENT 'seconds: quantileTDigestMerge(0.95) of e2e_q'
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(block_start)
ORDER BY (block_seconds, block_start, version, replica)
TTL block_start + toIntervalDay({{retention_days}});

-- Hourly companion of ops_gauge_minutes for the live page's multi-day gauge
-- series: on 10M calls the 7-day series summed ~480k minute rows (50-70 ms of the
-- page). Same columns and semantics as ops_gauge_minutes with hour = toStartOfHour(minute): sums of
-- the minutes' sums, so a whole hour gives the same ratios (value_sum / scrapes, value_sum / points)
-- as its minutes. Filled on insert from the minute rows (a materialized view on ops_gauge_minutes:
-- a few rows per scrape batch), back-filled once from them.
CREATE TABLE IF NOT EXISTS ops_gauge_hours
(
    `hour` DateTime('UTC'),
    `replica` LowCardinality(String),
    `model` LowCardinality(String),
    `metric` LowCardinality(String),
    `value_sum` SimpleAggregateFunction(sum, Float64),
    `points` SimpleAggregateFunction(sum, UInt64),
    `scrapes` SimpleAggregateFunction(sum, UInt64)
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(hour)
ORDER BY (hour, metric, replica, model)
TTL hour + toIntervalDay({{retention_days}})
SETTINGS ttl_only_drop_parts = 1, index_granularity = 8192;

CREATE MATERIALIZED VIEW IF NOT EXISTS ops_gauge_hours_mv TO ops_gauge_hours
AS SELECT
    toStartOfHour(m.minute) AS hour,
    m.replica AS replica,
    m.model AS model,
    m.metric AS metric,
    sum(m.value_sum) AS value_sum,
    toUInt64(sum(m.points)) AS points,
    toUInt64(sum(m.scrapes)) AS scrapes
FROM ops_gauge_minutes AS m
GROUP BY hour, replica, model, metric;

CREATE TABLE IF NOT EXISTS ops_series_marks
(
    `hour` DateTime('UTC') COMMENT 'an hour of ops_engine_hours an insert wrote rows for',
    `marked_at` DateTime64(6, 'UTC') COMMENT 'the store\'s clock when the insert wrote them'
)
ENGINE = MergeTree
ORDER BY marked_at
TTL toDateTime(marked_at) + toIntervalDay(3);

CREATE MATERIALIZED VIEW IF NOT EXISTS ops_series_marks_mv TO ops_series_marks
AS SELECT DISTINCT hour, now64(6, 'UTC') AS marked_at
FROM ops_engine_hours;

CREATE TABLE IF NOT EXISTS ops_series_runs
(
    `block_seconds` UInt32 COMMENT 'as ops_series_blocks',
    `since` DateTime('UTC') COMMENT 'the first bucket the run covered',
    `marks_from` DateTime64(6, 'UTC') COMMENT 'the next run reads the marks from here (its start less a margin)',
    `complete_to` DateTime('UTC') COMMENT 'toStartOfHour(we) of the run: blocks ending at or before it were complete'
)
ENGINE = MergeTree
ORDER BY (block_seconds, marks_from)
TTL toDateTime(marks_from) + toIntervalDay(3);
