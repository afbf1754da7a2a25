-- Alert state changes written by the alert evaluator (alerts/): one row per change of one alert
-- (pending, firing, resolved, cancelled = a pending alert whose condition cleared before it fired),
-- with the evidence that caused it. An alert is identified by alert_id (stable hash of rule + key);
-- one incident of it by (alert_id, started_at). Read through schema/queries/alerts.py only.
-- No TTL: the alert history is small and the weekly review reads past periods.
CREATE TABLE IF NOT EXISTS alerts (
    event_time DateTime64(3, 'UTC'),
    alert_id String,
    rule LowCardinality(String),
    alert_key String,
    severity LowCardinality(String),
    replica LowCardinality(String),
    state LowCardinality(String),
    started_at DateTime64(3, 'UTC'),
    fired_at Nullable(DateTime64(3, 'UTC')),
    resolved_at Nullable(DateTime64(3, 'UTC')),
    summary String,
    description String,
    evidence String CODEC(ZSTD(3)),
    est_cost_usd Nullable(Float64),
    cost_source LowCardinality(String),
    labels Map(LowCardinality(String), String),
    evaluator String
) ENGINE = MergeTree()
PARTITION BY toYYYYMM(event_time)
ORDER BY (rule, alert_id, event_time)
SETTINGS index_granularity = 8192;
