-- Hourly companion of ops_gauge_minutes (migrations 0050, 0066) for the live page's multi-day gauge
-- series: on 10M calls the 7-day series summed ~480k minute rows (50-70 ms of the
-- page). Same columns and semantics as ops_gauge_minutes with hour = toStartOfHour(minute): sums of
-- the minutes' sums, so a whole hour gives the same ratios (value_sum / scrapes, value_sum / points)
-- as its minutes. Filled on insert from the minute rows (a materialized view on ops_gauge_minutes:
-- a few rows per scrape batch), back-filled once from them.
CREATE TABLE IF NOT EXISTS ops_gauge_hours (
    hour DateTime('UTC'),
    replica LowCardinality(String),
    model LowCardinality(String),
    metric LowCardinality(String),
    value_sum SimpleAggregateFunction(sum, Float64),
    points SimpleAggregateFunction(sum, UInt64),
    scrapes SimpleAggregateFunction(sum, UInt64)
) ENGINE = AggregatingMergeTree()
PARTITION BY toYYYYMM(hour)
ORDER BY (hour, metric, replica, model)
TTL hour + toIntervalDay({{retention_days}})
SETTINGS ttl_only_drop_parts = 1;

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

INSERT INTO ops_gauge_hours
SELECT toStartOfHour(m.minute) AS hour, m.replica, m.model, m.metric, sum(m.value_sum), toUInt64(sum(m.points)),
       toUInt64(sum(m.scrapes))
FROM ops_gauge_minutes AS m
GROUP BY hour, m.replica, m.model, m.metric;
