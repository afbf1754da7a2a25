-- Alerts: the alert log, its rules' state and the per-minute task counts the SLO burn rules read.

-- one incident of it by (alert_id, started_at). Read through schema/queries/alerts.py only.
-- No TTL: the alert history is small and the weekly review reads past periods.
CREATE TABLE IF NOT EXISTS alerts
(
    `event_time` DateTime64(3, 'UTC'),
    `alert_id` String,
    `rule` LowCardinality(String),
    `alert_key` String,
    `severity` LowCardinality(String),
    `replica` LowCardinality(String),
    `state` LowCardinality(String),
    `started_at` DateTime64(3, 'UTC'),
    `fired_at` Nullable(DateTime64(3, 'UTC')),
    `resolved_at` Nullable(DateTime64(3, 'UTC')),
    `summary` String,
    `description` String,
    `evidence` String CODEC(ZSTD(3)),
    `est_cost_usd` Nullable(Float64),
    `cost_source` LowCardinality(String),
    `labels` Map(LowCardinality(String), String),
    `evaluator` String
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(event_time)
ORDER BY (rule, alert_id, event_time);

-- Pre-aggregation for the SLO burn-rate rule (alerts/rules_health.py): task outcomes per minute of
-- task END, from task root spans ("task {task.type}", docs/telemetry.md) as they are inserted, so
-- the rule's 3-day windows sum a few thousand rows instead of re-reading three days of spans every
-- evaluation. Columns: tasks; failed = outcome failure or abandoned; not_good = not (success and
-- within slo.e2e_ms when the task has one). SummingMergeTree: readers always sum().
CREATE TABLE IF NOT EXISTS alerts_task_minutes
(
    `minute` DateTime('UTC'),
    `tasks` UInt64,
    `failed` UInt64,
    `not_good` UInt64
)
ENGINE = SummingMergeTree
PARTITION BY toYYYYMM(minute)
ORDER BY minute
TTL minute + toIntervalDay({{retention_days}})
SETTINGS non_replicated_deduplication_window = 1000;

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

-- The alert evaluator's lifecycle state (alerts/state.py), so an evaluation resumes exactly where
-- the previous one stopped: pending/firing alerts with their clear countdown, no-data time, frozen
-- baselines and notification status, the frozen retry baseline and the time evaluated up to.
-- `infercost alerts --once` (cron-style or a replay) loads it, evaluates once and saves it; the
-- service saves it after every evaluation, so a restart loses no countdown.
-- One row per save; readers take the newest per evaluator (argMax on saved_at), and the
-- ReplacingMergeTree keeps only the newest per evaluator once parts merge. state: JSON.
CREATE TABLE IF NOT EXISTS alerts_state
(
    `evaluator` String,
    `saved_at` DateTime64(3, 'UTC'),
    `evaluated_at` DateTime64(3, 'UTC'),
    `state` String CODEC(ZSTD(3))
)
ENGINE = ReplacingMergeTree(saved_at)
ORDER BY evaluator;
