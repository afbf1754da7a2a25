-- Hourly companion of ops_engine_minutes (migration 0050) for multi-day live-operations series:
-- on 10M calls a 7-day series merged ~300k minute t-digests (seconds); hours cut that 60-fold.
-- Same columns and semantics as ops_engine_minutes, with hour = toStartOfHour(request end).
CREATE TABLE IF NOT EXISTS ops_engine_hours (
    hour DateTime('UTC'),
    replica LowCardinality(String),
    model LowCardinality(String),
    requests SimpleAggregateFunction(sum, UInt64),
    output_tokens SimpleAggregateFunction(sum, UInt64),
    errors SimpleAggregateFunction(sum, UInt64),
    ttft_q AggregateFunction(quantilesTDigest(0.5, 0.95, 0.99), Float64),
    itl_q AggregateFunction(quantileTDigest(0.95), Float64),
    e2e_q AggregateFunction(quantileTDigest(0.95), Float64)
) ENGINE = AggregatingMergeTree()
PARTITION BY toYYYYMM(hour)
ORDER BY (hour, replica, model)
TTL hour + toIntervalDay({{retention_days}})
SETTINGS ttl_only_drop_parts = 1;

CREATE MATERIALIZED VIEW IF NOT EXISTS ops_engine_hours_mv TO ops_engine_hours
AS SELECT
    toStartOfHour(c.end_time) AS hour,
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
GROUP BY hour, replica, model;

INSERT INTO ops_engine_hours
SELECT
    toStartOfHour(m.minute) AS hour,
    m.replica AS replica,
    m.model AS model,
    sum(m.requests),
    sum(m.output_tokens),
    sum(m.errors),
    quantilesTDigestMergeState(0.5, 0.95, 0.99)(m.ttft_q),
    quantileTDigestMergeState(0.95)(m.itl_q),
    quantileTDigestMergeState(0.95)(m.e2e_q)
FROM ops_engine_minutes AS m
GROUP BY hour, replica, model;
