-- Pre-aggregation for the SLO burn-rate rule (alerts/rules_health.py): task outcomes per minute of
-- task END, from task root spans ("task {task.type}", docs/telemetry.md) as they are inserted, so
-- the rule's 3-day windows sum a few thousand rows instead of re-reading three days of spans every
-- evaluation. Columns: tasks; failed = outcome failure or abandoned; not_good = not (success and
-- within slo.e2e_ms when the task has one). SummingMergeTree: readers always sum().
-- Spans stored before this migration ran are not backfilled (burn rates start from then).
CREATE TABLE IF NOT EXISTS alerts_task_minutes (
    minute DateTime('UTC'),
    tasks UInt64,
    failed UInt64,
    not_good UInt64
) ENGINE = SummingMergeTree()
PARTITION BY toYYYYMM(minute)
ORDER BY minute
TTL minute + toIntervalDay({{retention_days}});

CREATE MATERIALIZED VIEW IF NOT EXISTS alerts_task_minutes_mv TO alerts_task_minutes
AS SELECT
    toStartOfMinute(end_time) AS minute,
    count() AS tasks,
    countIf(outcome != 'success') AS failed,
    countIf(NOT (outcome = 'success' AND (slo_e2e_ms IS NULL OR duration_ms <= slo_e2e_ms))) AS not_good
FROM (
    SELECT
        fromUnixTimestamp64Nano(toUnixTimestamp64Nano(Timestamp) + toInt64(Duration), 'UTC') AS end_time,
        SpanAttributes['task.outcome'] AS outcome,
        Duration / 1e6 AS duration_ms,
        toFloat64OrNull(SpanAttributes['slo.e2e_ms']) AS slo_e2e_ms
    FROM otel_traces
    WHERE startsWith(SpanName, 'task ') AND mapContains(SpanAttributes, 'task.outcome')
)
GROUP BY minute;
