-- Hourly rollups of the cost jobs' outputs for the cost page and the triangle.
-- Written by the explicit runner's `rollup` step (schema/jobs/run_cost_rollup.sql) for every hour a
-- chunk touched, from the *_history tables (and llm_calls for the triangle's engine figures); never
-- by a materialized view on the history tables (a recompute would add its rows a second time).
-- Insert-only, no mutation and no delete on the hot path: every rewrite of an hour writes its rows
-- with a new `version` (the chunk's run_id), then a row in cost_rollup_hours saying whether that
-- version of the hour is complete (the whole hour below the watermark). Readers take an hour from
-- the rollups only when its newest cost_rollup_hours row says complete, and then only the rows of
-- that version; every other minute (partial edge hours, the live window, hours no run rolled up)
-- comes from the raw tables. Older versions stay until the TTL and are never read (a merge must not
-- drop them: a reader keeps the old version until the new one's cost_rollup_hours row is written, so
-- the rollups are plain MergeTree); an hour is rewritten only by a run over it (a recompute, late
-- data), so they add up to a few times the newest version at most.
-- Each rollup holds exactly the sums the readers take of the raw rows of that hour, grouped by the
-- keys they group or filter by.

-- Which version of an hour is current, and whether it is complete.
CREATE TABLE IF NOT EXISTS cost_rollup_hours (
    hour DateTime('UTC') COMMENT 'start of the hour',
    version UInt64 COMMENT 'run_id of the chunk that wrote it (grows with time)',
    complete UInt8 COMMENT '1 = the whole hour was below the watermark: its rollup rows hold every row of the hour',
    written_at DateTime('UTC') DEFAULT now()
) ENGINE = ReplacingMergeTree(version)
ORDER BY hour
TTL hour + toIntervalDay({{retention_days}});

-- call_costs by hour and by the keys the cost page groups and filters by.
CREATE TABLE IF NOT EXISTS cost_hours (
    hour DateTime('UTC'),
    version UInt64,
    replica LowCardinality(String),
    model LowCardinality(String),
    task_type LowCardinality(String),
    tenant_id LowCardinality(String),
    category LowCardinality(String),
    call_source LowCardinality(String),
    partial UInt8,
    cached_estimated UInt8,
    cost_usd Float64 COMMENT 'USD, sum of call_costs.cost_usd',
    requests UInt64,
    prompt_tokens UInt64,
    cached_tokens UInt64,
    output_tokens UInt64
) ENGINE = MergeTree()
PARTITION BY toYYYYMM(hour)
ORDER BY (hour, version, replica, model, task_type, tenant_id, category)
TTL hour + toIntervalDay({{retention_days}});

-- replica_minutes by hour and replica.
CREATE TABLE IF NOT EXISTS cost_replica_hours (
    hour DateTime('UTC'),
    version UInt64,
    replica LowCardinality(String),
    minutes UInt64 COMMENT 'replica_minutes rows',
    spend_usd Float64,
    allocated_usd Float64,
    idle_usd Float64,
    down_usd Float64 COMMENT 'idle_usd of rows with up = 0',
    down_minutes UInt64,
    running_sum Float64 COMMENT 'sum of the non-NULL running_avg',
    running_n UInt64 COMMENT 'count of the non-NULL running_avg',
    span_tokens UInt64 COMMENT 'prompt_tokens + output_tokens',
    counter_tokens Float64 COMMENT 'counter prompt + generation tokens of the minutes with counters',
    counter_minutes UInt64,
    counted_tokens Float64 COMMENT 'counted_tokens of the minutes with counters',
    default_priced_minutes UInt64,
    unpriced_minutes UInt64,
    unspanned_usd Float64,
    cached_estimated_tokens UInt64
) ENGINE = MergeTree()
PARTITION BY toYYYYMM(hour)
ORDER BY (hour, version, replica)
TTL hour + toIntervalDay({{retention_days}});

-- tasks by the hour they ended and the keys the cost page groups and filters by.
CREATE TABLE IF NOT EXISTS cost_task_hours (
    hour DateTime('UTC'),
    version UInt64,
    task_type LowCardinality(String),
    tenant_id LowCardinality(String),
    model LowCardinality(String),
    tasks UInt64,
    successes UInt64,
    failures UInt64,
    abandoned UInt64,
    slo_met UInt64 COMMENT 'successes with slo_met = 1',
    success_attempts UInt64,
    success_step_calls UInt64,
    success_steps UInt64
) ENGINE = MergeTree()
PARTITION BY toYYYYMM(hour)
ORDER BY (hour, version, task_type, tenant_id, model)
TTL hour + toIntervalDay({{retention_days}});

-- The triangle per hour and replica: engine calls that ENDED in the hour (llm_calls, started at
-- most a day before the hour) with their latencies as quantile states (merged exactly), and the
-- successful tasks that ended in the hour with a call on the replica from the day before the hour
-- to its end (call_costs), counted distinct (a task ends in one hour, so hours add up). Two kinds
-- of rows: part 'engine' (requests, tokens, latency states; successes 0) and part 'successes'
-- (successes only; empty latency states).
CREATE TABLE IF NOT EXISTS cost_triangle_hours (
    hour DateTime('UTC'),
    version UInt64,
    replica LowCardinality(String),
    part LowCardinality(String) COMMENT 'engine | successes',
    requests UInt64,
    tokens UInt64 COMMENT 'prompt + output',
    out_tokens UInt64,
    ttft_state AggregateFunction(quantileExact(0.99), Nullable(Float64)),
    e2e_state AggregateFunction(quantileExact(0.99), Float64),
    successes UInt64 COMMENT 'distinct successful tasks ended in the hour with a call on the replica'
) ENGINE = MergeTree()
PARTITION BY toYYYYMM(hour)
ORDER BY (hour, version, replica)
TTL hour + toIntervalDay({{retention_days}});

