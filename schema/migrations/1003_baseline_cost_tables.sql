-- Outputs of the cost jobs and their scratch tables. Each output is stored in two tables and read through
-- one view:
--   <name>_live     the trailing window (default 2 h), replaced wholesale by the periodic chain on every
--                   run (atomic swap), so late spans are absorbed and nothing is double-counted;
--   <name>_history  minutes older than the window, appended once each by a copy view (and rewritten per
--                   range by the explicit runner / `infercost cost --recompute`);
--   <name>          the view every reader uses: history below the watermark, live from it on.
-- Money: Float64 USD, unrounded (conservation holds to float rounding); round only for display.
-- Times: UTC; `minute` = toStartOfMinute of the bucket the row describes.

--   <name>          the view every reader uses: history up to its last minute (the watermark),
--                   then live after it. No FINAL, no de-duplication on read paths.
-- Money: Float64 USD, unrounded (conservation holds to float rounding); round only for display.
-- Times: UTC; `minute` = toStartOfMinute of the bucket the row describes.

-- One row per (unit of GPU work, minute it overlaps): the allocated cost of a call.
CREATE TABLE IF NOT EXISTS call_costs_history
(
    `minute` DateTime('UTC') COMMENT 'minute bucket of this piece of the call',
    `call_id` String COMMENT 'span id of the evidence span (engine, else gateway attempt, else client attempt)' CODEC(ZSTD(1)),
    `trace_id` String CODEC(ZSTD(1)),
    `call_source` LowCardinality(String) COMMENT 'evidence: engine | gateway | client',
    `replica` LowCardinality(String) COMMENT 'replica id (\'\' when only the client saw the call)',
    `gpu_type` LowCardinality(String),
    `model` LowCardinality(String),
    `task_id` String COMMENT '\'\'= no task context (unattributed)' CODEC(ZSTD(1)),
    `task_type` LowCardinality(String),
    `tenant_id` LowCardinality(String),
    `task_step` String CODEC(ZSTD(1)),
    `task_attempt` UInt16 COMMENT 'task.attempt (client retries), 0 when absent',
    `task_call` UInt16 COMMENT 'task.call: the call within its step (0 when not sent); useful/retry is decided per (step, call)',
    `start_time` DateTime64(9, 'UTC') COMMENT 'call start',
    `end_time` DateTime64(9, 'UTC') COMMENT 'call end',
    `status` LowCardinality(String) COMMENT 'ok | error | unset',
    `error_type` LowCardinality(String),
    `error_class` LowCardinality(String) COMMENT '\'\' | client_error | client_cancel | upstream_error | timeout | rejected (llm_calls.error_class of the call)',
    `finish_reason` LowCardinality(String),
    `partial` UInt8 COMMENT '1 = tokens streamed, then the call broke',
    `first_piece` UInt8 COMMENT '1 on the piece of the minute the call started (token and request counts live there)',
    `requests` UInt8 COMMENT '1 on the first piece, else 0',
    `prompt_tokens` UInt32 COMMENT 'tokens, call total on the first piece, else 0 (includes cached)',
    `cached_tokens` UInt32 COMMENT 'prefix-cached prompt tokens, first piece only',
    `cached_estimated` UInt8 COMMENT '1 = no span counted cached tokens: estimated from the replica-minute\'s counter hit rate',
    `output_tokens` UInt32 COMMENT 'tokens, first piece only (streamed tokens for partial calls)',
    `ttft_s` Nullable(Float64) COMMENT 'seconds, the call\'s time to first token',
    `user_ttft_s` Nullable(Float64) COMMENT 'seconds, TTFT the user waited: client span, else gateway, else engine',
    `user_ttft_source` LowCardinality(String) COMMENT 'client | gateway | engine | \'\' (no TTFT)',
    `e2e_s` Float64 COMMENT 'seconds, the call\'s end-to-end latency',
    `overlap_s` Float64 COMMENT 'seconds of the call inside this minute',
    `work` Float64 COMMENT 'work units of this piece: (w_prefill x uncached prompt + w_decode x output) x overlap share',
    `gap_work` Float64 COMMENT 'work units of engine-counter tokens no span explains, charged to this piece (inside work)',
    `minute_work` Float64 COMMENT 'work units of every call on this replica-minute (the allocation denominator)',
    `capacity_work` Float64 COMMENT 'work units per minute the replica sustains; allocated share of spend = min(1, minute_work / capacity_work)',
    `capacity_source` LowCardinality(String) COMMENT 'fleet (fleet.yaml) | saturated (median work of its saturated minutes, 7 days) | peak (its busiest minute)',
    `spend_usd` Float64 COMMENT 'USD, spend of this replica-minute',
    `cost_usd` Float64 COMMENT 'USD allocated to this piece = spend_usd x work / greatest(minute_work, capacity_work)',
    `category` LowCardinality(String) COMMENT 'useful | retry_waste | failed_task_waste | pending (task outcome not known yet) | unattributed | unspanned (engine work no span explains)',
    `task_outcome` LowCardinality(String) COMMENT 'success | failure | abandoned | unknown, as known when computed',
    `computed_at` DateTime('UTC') COMMENT 'when the job wrote this row',
    INDEX idx_task_id task_id TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_call_id call_id TYPE bloom_filter(0.01) GRANULARITY 1
)
ENGINE = MergeTree
PARTITION BY toDate(minute)
ORDER BY (minute, replica, call_id)
TTL minute + toIntervalDay({{retention_days}})
SETTINGS ttl_only_drop_parts = 1, enable_block_number_column = 1, enable_block_offset_column = 1;

-- The same columns as call_costs_history (the readers' view is a UNION ALL of the two); no patch-part
-- columns: the chain replaces this table whole.
CREATE TABLE IF NOT EXISTS call_costs_live AS call_costs_history
ENGINE = MergeTree
PARTITION BY toDate(minute)
ORDER BY (minute, replica, call_id)
TTL minute + toIntervalDay({{retention_days}})
SETTINGS ttl_only_drop_parts = 1;

-- One row per replica and minute it was up (produced metric points or did work in that minute).
CREATE TABLE IF NOT EXISTS replica_minutes_history
(
    `minute` DateTime('UTC') COMMENT 'minute bucket',
    `replica` LowCardinality(String) COMMENT 'replica id',
    `gpu_type` LowCardinality(String),
    `gpu_count` UInt16 COMMENT 'GPUs',
    `usd_per_gpu_hour` Float64 COMMENT 'USD per GPU-hour valid at this minute (0 when no price is configured)',
    `in_fleet` UInt8 COMMENT '0 = replica absent from fleet.yaml, priced at the configured default (flag)',
    `billing` LowCardinality(String) COMMENT 'on_demand | reserved (fleet.yaml)',
    `priced` UInt8 COMMENT '0 = no price valid at this minute for its GPU type (spend 0, flag)',
    `up_metrics` UInt8 COMMENT '1 = metric points in this minute',
    `up_spans` UInt8 COMMENT '1 = a call with work overlapped this minute',
    `up` UInt8 COMMENT '1 = a successful scrape or work in this minute; 0 = a reserved replica that was down (its spend is idle)',
    `spend_usd` Float64 COMMENT 'USD = usd_per_gpu_hour x gpu_count / 60',
    `allocated_usd` Float64 COMMENT 'USD allocated to calls (sum of call_costs.cost_usd of this replica-minute)',
    `idle_usd` Float64 COMMENT 'USD = spend_usd - allocated_usd (all of it when no call ran)',
    `unattributed_usd` Float64 COMMENT 'USD allocated to calls without task context',
    `unspanned_usd` Float64 COMMENT 'USD allocated to engine work no span explains (no call to charge it to)',
    `calls_active` UInt32 COMMENT 'calls overlapping this minute',
    `requests` UInt32 COMMENT 'calls that started in this minute',
    `prompt_tokens` UInt64 COMMENT 'tokens of calls started in this minute (includes cached)',
    `cached_tokens` UInt64 COMMENT 'tokens',
    `cached_estimated_tokens` UInt64 COMMENT 'tokens, the part of cached_tokens estimated from the counter hit rate',
    `output_tokens` UInt64 COMMENT 'tokens',
    `work` Float64 COMMENT 'work units in this minute',
    `gap_work` Float64 COMMENT 'work units of engine-counter tokens no span explains (charged to calls without engine spans, else unspanned)',
    `capacity_work` Float64 COMMENT 'work units per minute the replica sustains',
    `capacity_source` LowCardinality(String) COMMENT 'fleet (fleet.yaml capacity) | saturated (median work of its saturated minutes) | peak (its busiest minute)',
    `ttft_p50_s` Nullable(Float64) COMMENT 'seconds, engine-measured TTFT of calls started this minute',
    `ttft_p90_s` Nullable(Float64) COMMENT 'seconds',
    `ttft_p99_s` Nullable(Float64) COMMENT 'seconds',
    `itl_p50_s` Nullable(Float64) COMMENT 'seconds, mean inter-token latency per call = (e2e - ttft) / (output - 1)',
    `itl_p99_s` Nullable(Float64) COMMENT 'seconds',
    `e2e_p50_s` Nullable(Float64) COMMENT 'seconds',
    `e2e_p90_s` Nullable(Float64) COMMENT 'seconds',
    `e2e_p99_s` Nullable(Float64) COMMENT 'seconds',
    `queue_waiting_avg` Nullable(Float64) COMMENT 'requests, mean over scrapes of vllm:num_requests_waiting summed over the replica\'s engines',
    `queue_waiting_max` Nullable(Float64) COMMENT 'requests',
    `running_avg` Nullable(Float64) COMMENT 'requests, mean over scrapes of vllm:num_requests_running summed over the replica\'s engines',
    `kv_usage_avg` Nullable(Float64) COMMENT 'fraction 0..1, mean over scrapes of vllm:kv_cache_usage_perc, engines weighted by their KV blocks',
    `kv_usage_max` Nullable(Float64) COMMENT 'fraction 0..1',
    `saturated` UInt8 COMMENT '1 = requests waited for capacity in this minute (vllm:num_requests_waiting_by_reason{reason=capacity}, else vllm:num_requests_waiting)',
    `counter_prompt_tokens` Nullable(Float64) COMMENT 'tokens, increase of vllm:prompt_tokens in this minute',
    `counter_generation_tokens` Nullable(Float64) COMMENT 'tokens, increase of vllm:generation_tokens in this minute',
    `counter_cached_tokens` Nullable(Float64) COMMENT 'tokens, increase of vllm:prompt_tokens_cached (else vllm:prefix_cache_hits) in this minute',
    `counter_hit_rate` Nullable(Float64) COMMENT 'fraction 0..1 of prompt tokens served from the prefix cache (counters)',
    `preemptions` Nullable(Float64) COMMENT 'increase of vllm:num_preemptions in this minute',
    `counted_tokens` Nullable(Float64) COMMENT 'tokens of calls the counters of this minute observed (prompt at first token, output spread to the end)',
    `token_gap` Nullable(Float64) COMMENT 'tokens = engine counters - counted_tokens (work no span explains, e.g. aborted requests); data quality',
    `computed_at` DateTime('UTC')
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(minute)
ORDER BY (minute, replica)
SETTINGS enable_block_number_column = 1, enable_block_offset_column = 1;

-- The same columns as replica_minutes_history (the readers' view is a UNION ALL of the two); no patch-part
-- columns: the chain replaces this table whole.
CREATE TABLE IF NOT EXISTS replica_minutes_live AS replica_minutes_history
ENGINE = MergeTree
PARTITION BY toYYYYMM(minute)
ORDER BY (minute, replica);

-- One row per task, in the minute it ended (root span end; for a task whose root span never
-- came, its last call's end + abandon timeout once that has passed, else its last call's end).
CREATE TABLE IF NOT EXISTS tasks_history
(
    `minute` DateTime('UTC') COMMENT 'toStartOfMinute(end_time): the period a task belongs to',
    `task_id` String CODEC(ZSTD(1)),
    `task_type` LowCardinality(String),
    `tenant_id` LowCardinality(String),
    `tenant_priority` LowCardinality(String),
    `model` LowCardinality(String) COMMENT 'model of most of its calls',
    `outcome` LowCardinality(String) COMMENT 'success | failure | abandoned | unknown (no outcome yet)',
    `has_root` UInt8 COMMENT '1 = the task root span arrived',
    `start_time` DateTime64(9, 'UTC'),
    `end_time` DateTime64(9, 'UTC'),
    `steps` UInt16 COMMENT 'distinct task.step values',
    `step_calls` UInt16 COMMENT 'calls the steps asked for: distinct (step, call); attempts - step_calls = client retries',
    `attempts` UInt16 COMMENT 'calls sent, client retries included: distinct (step, call, attempt)',
    `calls` UInt32 COMMENT 'units of GPU work (includes the gateway\'s hidden retries)',
    `prompt_tokens` UInt64 COMMENT 'tokens',
    `cached_tokens` UInt64 COMMENT 'tokens',
    `output_tokens` UInt64 COMMENT 'tokens',
    `cost_usd` Float64 COMMENT 'USD = sum of its calls\' cost = useful + retry_waste + failed_task_waste + pending',
    `useful_usd` Float64 COMMENT 'USD, calls that produced an accepted step result of a successful task',
    `retry_waste_usd` Float64 COMMENT 'USD, failed or superseded attempts of a successful task (partial streams included)',
    `failed_task_waste_usd` Float64 COMMENT 'USD, every call of a failed or abandoned task',
    `pending_usd` Float64 COMMENT 'USD, calls of a task whose outcome is unknown',
    `partial_calls` UInt32 COMMENT 'calls that streamed tokens then broke',
    `partial_tokens` UInt64 COMMENT 'output tokens streamed by those calls',
    `partial_usd` Float64 COMMENT 'USD of those calls (already inside a category)',
    `ttft_s` Nullable(Float64) COMMENT 'seconds, worst TTFT the user waited among its accepted calls (client, else gateway, else engine)',
    `ttft_source` LowCardinality(String) COMMENT 'whose clock ttft_s is: client | gateway | engine',
    `e2e_s` Float64 COMMENT 'seconds, end_time - start_time',
    `slo_ttft_ms` Nullable(Float64) COMMENT 'milliseconds (root span, else task_slos)',
    `slo_e2e_ms` Nullable(Float64) COMMENT 'milliseconds (root span, else task_slos)',
    `slo_met` UInt8 COMMENT '1 = success and every configured budget met',
    `computed_at` DateTime('UTC'),
    `context_source` LowCardinality(String) DEFAULT '' COMMENT 'sdk | genai_agent | openinference | traceloop | genai_call | request_root | trace_without_root (calls of a trace whose root never arrived)',
    INDEX idx_task_id task_id TYPE bloom_filter(0.01) GRANULARITY 1
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(minute)
ORDER BY (minute, task_type, tenant_id, task_id)
SETTINGS enable_block_number_column = 1, enable_block_offset_column = 1;

-- The same columns as tasks_history (the readers' view is a UNION ALL of the two); no patch-part
-- columns: the chain replaces this table whole.
CREATE TABLE IF NOT EXISTS tasks_live AS tasks_history
ENGINE = MergeTree
PARTITION BY toYYYYMM(minute)
ORDER BY (minute, task_type, tenant_id, task_id);

-- The resolved calls of a run are materialized once (resolution is the costliest step), then
-- read by job_call_costs: the periodic chain replaces resolved_calls_live on every cycle
-- (run_id 0); the explicit runner writes its chunk into resolved_calls_runs under a fresh run_id
-- and deletes it afterwards.
CREATE TABLE IF NOT EXISTS resolved_calls_live
(
    `call_id` String,
    `trace_id` String,
    `call_source` LowCardinality(String),
    `replica` LowCardinality(String),
    `gpu_type` LowCardinality(String),
    `model` LowCardinality(String),
    `task_id` String,
    `task_type` LowCardinality(String),
    `tenant_id` LowCardinality(String),
    `task_step` String,
    `task_attempt` UInt16,
    `task_call` UInt16,
    `prompt_tokens` UInt32,
    `cached_tokens` UInt32,
    `cached_source` LowCardinality(String),
    `output_tokens` UInt32,
    `choices` UInt16,
    `ttft_s` Nullable(Float64),
    `user_ttft_s` Nullable(Float64),
    `user_ttft_source` LowCardinality(String),
    `e2e_s` Float64,
    `status` LowCardinality(String),
    `error_type` LowCardinality(String),
    `error_class` LowCardinality(String),
    `finish_reason` LowCardinality(String),
    `partial` UInt8,
    `start_time` DateTime64(9, 'UTC'),
    `end_time` DateTime64(9, 'UTC'),
    `call_work` Float64 COMMENT 'work units = w_prefill x uncached prompt + w_decode x output',
    `reached_engine` UInt8
)
ENGINE = MergeTree
ORDER BY (replica, start_time);

--   -> cost_resolved_calls_mv -> cost_call_costs_mv -> cost_replica_minutes_mv -> cost_tasks_mv
--     (replace resolved_calls_live and *_live) the job views (1004) over [ws, we) from
--     job_clock: the same SQL the explicit runner uses.
-- Readers see history below the watermark and live from it on (views below): every minute is
-- read from exactly one table; a minute's late spans are absorbed until it is copied. A copy
-- skips minutes history already holds, so an extra run (SYSTEM REFRESH VIEW while the schedule
-- fires) never duplicates rows.
CREATE TABLE IF NOT EXISTS cost_watermark
(
    `watermark` DateTime('UTC') COMMENT 'minutes before this are read from *_history, from it on from *_live',
    `updated_at` DateTime('UTC') DEFAULT now()
)
ENGINE = MergeTree
ORDER BY watermark;

CREATE TABLE IF NOT EXISTS job_clock
(
    `ws` DateTime('UTC') COMMENT 'first minute of the live window',
    `we` DateTime('UTC') COMMENT 'end of the live window (exclusive); "now" of the run',
    `window_s` UInt32 COMMENT 'job_window_s when computed, seconds'
)
ENGINE = MergeTree
ORDER BY ws;

-- Reconciliation of a run's resolved calls with the engine counters, per replica-minute (scratch
-- tables of the chain, like resolved_calls_*): what the call_costs and replica_minutes jobs read.
CREATE TABLE IF NOT EXISTS reconciliation_live
(
    `replica` LowCardinality(String),
    `minute` DateTime('UTC'),
    `covers_from` DateTime64(9, 'UTC') COMMENT 'the minute\'s counters cover (covers_from, covers_to]: previous and last scrape',
    `covers_to` DateTime64(9, 'UTC'),
    `counter_prompt_tokens` Nullable(Float64) COMMENT 'tokens, increase of vllm:prompt_tokens',
    `counter_generation_tokens` Nullable(Float64) COMMENT 'tokens, increase of vllm:generation_tokens',
    `counter_cached_tokens` Nullable(Float64) COMMENT 'tokens, increase of vllm:prompt_tokens_cached (else prefix_cache_hits)',
    `hit_rate` Nullable(Float64) COMMENT 'fraction of prompt tokens served from the prefix cache',
    `preemptions` Nullable(Float64) COMMENT 'increase of vllm:num_preemptions',
    `counted_tokens` Float64 COMMENT 'tokens of the resolved calls these counters observed',
    `residual_prompt` Float64 COMMENT 'prompt tokens no span explains (>= 0)',
    `residual_output` Float64 COMMENT 'output tokens no span explains (>= 0)',
    `gap_work` Float64 COMMENT 'work units of the residual tokens',
    `span_work` Float64 COMMENT 'work units of the calls\' pieces in this minute',
    `total_work` Float64 COMMENT 'span_work + gap_work: the allocation denominator',
    `saturated` UInt8 COMMENT '1 = requests waited for capacity in this minute'
)
ENGINE = MergeTree
ORDER BY (replica, minute);

-- The readers' views. A view expands `*` when created: a new column of the tables needs the view again.
CREATE VIEW IF NOT EXISTS call_costs AS
SELECT * FROM call_costs_history WHERE minute < (SELECT max(watermark) FROM cost_watermark)
UNION ALL
SELECT * FROM call_costs_live WHERE minute >= (SELECT max(watermark) FROM cost_watermark);

CREATE VIEW IF NOT EXISTS replica_minutes AS
SELECT * FROM replica_minutes_history WHERE minute < (SELECT max(watermark) FROM cost_watermark)
UNION ALL
SELECT * FROM replica_minutes_live WHERE minute >= (SELECT max(watermark) FROM cost_watermark);

-- Late data (DESIGN.md "Cost model" 7): spans and metric points that arrive for a
-- minute below the cost watermark (already copied to *_history: the periodic chain no longer
-- recomputes it) are recorded here at ingest, per minute, replica and source. schema.jobs
-- .recompute_late re-runs the cost jobs over those minutes (bounded by retention) and records the
-- recompute as a newer version of the row; the data-quality view counts the minutes recomputed.
-- Versioned rows, read with argMax(..., updated_at) (no FINAL on read paths).
CREATE TABLE IF NOT EXISTS late_minutes
(
    `minute` DateTime('UTC') COMMENT 'the minute that received late data',
    `replica` LowCardinality(String) COMMENT 'service.instance.id (gateway.replica for gateway spans); \'\' when none',
    `source` LowCardinality(String) COMMENT 'spans | metrics',
    `rows` UInt64 COMMENT 'rows that arrived late in this detection',
    `updated_at` DateTime64(3, 'UTC') COMMENT 'version: detection or recompute time',
    `recomputed_at` Nullable(DateTime('UTC')) COMMENT 'NULL = pending; set when the cost jobs re-ran the minute'
)
ENGINE = ReplacingMergeTree(updated_at)
PARTITION BY toYYYYMM(minute)
ORDER BY (minute, replica, source)
TTL minute + toIntervalDay({{retention_days}})
SETTINGS ttl_only_drop_parts = 1, index_granularity = 8192;

CREATE MATERIALIZED VIEW IF NOT EXISTS late_minutes_spans_mv
TO late_minutes
AS SELECT
    toStartOfMinute(Timestamp) AS minute,
    if(ResourceAttributes['service.instance.id'] != '', ResourceAttributes['service.instance.id'],
       SpanAttributes['gateway.replica']) AS replica,
    'spans' AS source,
    toUInt64(count()) AS rows,
    now64(3, 'UTC') AS updated_at,
    CAST(NULL, 'Nullable(DateTime(\'UTC\'))') AS recomputed_at
FROM otel_traces
WHERE Timestamp < greatest((SELECT max(watermark) FROM cost_watermark),
                           (SELECT max(we) + toIntervalSecond(660 - max(window_s)) FROM job_clock))
GROUP BY minute, replica;

CREATE MATERIALIZED VIEW IF NOT EXISTS late_minutes_gauge_mv
TO late_minutes
AS SELECT
    toStartOfMinute(TimeUnix) AS minute, ResourceAttributes['service.instance.id'] AS replica, 'metrics' AS source,
    toUInt64(count()) AS rows, now64(3, 'UTC') AS updated_at, CAST(NULL, 'Nullable(DateTime(\'UTC\'))') AS recomputed_at
FROM otel_metrics_gauge
WHERE TimeUnix < greatest((SELECT max(watermark) FROM cost_watermark),
                          (SELECT max(we) + toIntervalSecond(660 - max(window_s)) FROM job_clock))
GROUP BY minute, replica;

CREATE MATERIALIZED VIEW IF NOT EXISTS late_minutes_sum_mv
TO late_minutes
AS SELECT
    toStartOfMinute(TimeUnix) AS minute, ResourceAttributes['service.instance.id'] AS replica, 'metrics' AS source,
    toUInt64(count()) AS rows, now64(3, 'UTC') AS updated_at, CAST(NULL, 'Nullable(DateTime(\'UTC\'))') AS recomputed_at
FROM otel_metrics_sum
WHERE TimeUnix < greatest((SELECT max(watermark) FROM cost_watermark),
                          (SELECT max(we) + toIntervalSecond(660 - max(window_s)) FROM job_clock))
GROUP BY minute, replica;

CREATE MATERIALIZED VIEW IF NOT EXISTS late_minutes_histogram_mv
TO late_minutes
AS SELECT
    toStartOfMinute(TimeUnix) AS minute, ResourceAttributes['service.instance.id'] AS replica, 'metrics' AS source,
    toUInt64(count()) AS rows, now64(3, 'UTC') AS updated_at, CAST(NULL, 'Nullable(DateTime(\'UTC\'))') AS recomputed_at
FROM otel_metrics_histogram
WHERE TimeUnix < greatest((SELECT max(watermark) FROM cost_watermark),
                          (SELECT max(we) + toIntervalSecond(660 - max(window_s)) FROM job_clock))
GROUP BY minute, replica;

CREATE TABLE IF NOT EXISTS resolved_calls_runs
(
    `run_id` UInt64 COMMENT 'the explicit run (chunk) that wrote the row',
    `call_id` String,
    `trace_id` String,
    `call_source` LowCardinality(String),
    `replica` LowCardinality(String),
    `gpu_type` LowCardinality(String),
    `model` LowCardinality(String),
    `task_id` String,
    `task_type` LowCardinality(String),
    `tenant_id` LowCardinality(String),
    `task_step` String,
    `task_attempt` UInt16,
    `task_call` UInt16,
    `prompt_tokens` UInt32,
    `cached_tokens` UInt32,
    `cached_source` LowCardinality(String),
    `output_tokens` UInt32,
    `choices` UInt16,
    `ttft_s` Nullable(Float64),
    `user_ttft_s` Nullable(Float64),
    `user_ttft_source` LowCardinality(String),
    `e2e_s` Float64,
    `status` LowCardinality(String),
    `error_type` LowCardinality(String),
    `error_class` LowCardinality(String),
    `finish_reason` LowCardinality(String),
    `partial` UInt8,
    `start_time` DateTime64(9, 'UTC'),
    `end_time` DateTime64(9, 'UTC'),
    `call_work` Float64,
    `reached_engine` UInt8,
    `written_at` DateTime('UTC') DEFAULT now()
)
ENGINE = MergeTree
PARTITION BY run_id
ORDER BY (run_id, replica, start_time)
TTL written_at + toIntervalDay(1);

CREATE TABLE IF NOT EXISTS reconciliation_runs
(
    `run_id` UInt64 COMMENT 'the explicit run (chunk) that wrote the row',
    `replica` LowCardinality(String),
    `minute` DateTime('UTC'),
    `covers_from` DateTime64(9, 'UTC'),
    `covers_to` DateTime64(9, 'UTC'),
    `counter_prompt_tokens` Nullable(Float64),
    `counter_generation_tokens` Nullable(Float64),
    `counter_cached_tokens` Nullable(Float64),
    `hit_rate` Nullable(Float64),
    `preemptions` Nullable(Float64),
    `counted_tokens` Float64,
    `residual_prompt` Float64,
    `residual_output` Float64,
    `gap_work` Float64,
    `span_work` Float64,
    `total_work` Float64,
    `saturated` UInt8,
    `written_at` DateTime('UTC') DEFAULT now()
)
ENGINE = MergeTree
PARTITION BY run_id
ORDER BY (run_id, replica, minute)
TTL written_at + toIntervalDay(1);

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
CREATE TABLE IF NOT EXISTS cost_rollup_hours
(
    `hour` DateTime('UTC') COMMENT 'start of the hour',
    `version` UInt64 COMMENT 'run_id of the chunk that wrote it (grows with time)',
    `complete` UInt8 COMMENT '1 = the whole hour was below the watermark: its rollup rows hold every row of the hour',
    `written_at` DateTime('UTC') DEFAULT now()
)
ENGINE = ReplacingMergeTree(version)
ORDER BY hour
TTL hour + toIntervalDay({{retention_days}});

-- call_costs by hour and by the keys the cost page groups and filters by.
CREATE TABLE IF NOT EXISTS cost_hours
(
    `hour` DateTime('UTC'),
    `version` UInt64,
    `replica` LowCardinality(String),
    `model` LowCardinality(String),
    `task_type` LowCardinality(String),
    `tenant_id` LowCardinality(String),
    `category` LowCardinality(String),
    `call_source` LowCardinality(String),
    `partial` UInt8,
    `cached_estimated` UInt8,
    `cost_usd` Float64 COMMENT 'USD, sum of call_costs.cost_usd',
    `requests` UInt64,
    `prompt_tokens` UInt64,
    `cached_tokens` UInt64,
    `output_tokens` UInt64
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(hour)
ORDER BY (hour, version, replica, model, task_type, tenant_id, category)
TTL hour + toIntervalDay({{retention_days}});

-- replica_minutes by hour and replica.
CREATE TABLE IF NOT EXISTS cost_replica_hours
(
    `hour` DateTime('UTC'),
    `version` UInt64,
    `replica` LowCardinality(String),
    `minutes` UInt64 COMMENT 'replica_minutes rows',
    `spend_usd` Float64,
    `allocated_usd` Float64,
    `idle_usd` Float64,
    `down_usd` Float64 COMMENT 'idle_usd of rows with up = 0',
    `down_minutes` UInt64,
    `running_sum` Float64 COMMENT 'sum of the non-NULL running_avg',
    `running_n` UInt64 COMMENT 'count of the non-NULL running_avg',
    `span_tokens` UInt64 COMMENT 'prompt_tokens + output_tokens',
    `counter_tokens` Float64 COMMENT 'counter prompt + generation tokens of the minutes with counters',
    `counter_minutes` UInt64,
    `counted_tokens` Float64 COMMENT 'counted_tokens of the minutes with counters',
    `default_priced_minutes` UInt64,
    `unpriced_minutes` UInt64,
    `unspanned_usd` Float64,
    `cached_estimated_tokens` UInt64
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(hour)
ORDER BY (hour, version, replica)
TTL hour + toIntervalDay({{retention_days}});

-- tasks by the hour they ended and the keys the cost page groups and filters by.
CREATE TABLE IF NOT EXISTS cost_task_hours
(
    `hour` DateTime('UTC'),
    `version` UInt64,
    `task_type` LowCardinality(String),
    `tenant_id` LowCardinality(String),
    `model` LowCardinality(String),
    `tasks` UInt64,
    `successes` UInt64,
    `failures` UInt64,
    `abandoned` UInt64,
    `slo_met` UInt64 COMMENT 'successes with slo_met = 1',
    `success_attempts` UInt64,
    `success_step_calls` UInt64,
    `success_steps` UInt64
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(hour)
ORDER BY (hour, version, task_type, tenant_id, model)
TTL hour + toIntervalDay({{retention_days}});

-- The triangle per hour and replica: engine calls that ENDED in the hour (llm_calls, started at
-- most a day before the hour) with their latencies as quantile states (merged exactly), and the
-- successful tasks that ended in the hour with a call on the replica from the day before the hour
-- to its end (call_costs), counted distinct (a task ends in one hour, so hours add up). Two kinds
-- of rows: part 'engine' (requests, tokens, latency states; successes 0) and part 'successes'
-- (successes only; empty latency states).
CREATE TABLE IF NOT EXISTS cost_triangle_hours
(
    `hour` DateTime('UTC'),
    `version` UInt64,
    `replica` LowCardinality(String),
    `part` LowCardinality(String) COMMENT 'engine | successes',
    `requests` UInt64,
    `tokens` UInt64 COMMENT 'prompt + output',
    `out_tokens` UInt64,
    `ttft_state` AggregateFunction(quantileExact(0.99), Nullable(Float64)),
    `e2e_state` AggregateFunction(quantileExact(0.99), Float64),
    `successes` UInt64 COMMENT 'distinct successful tasks ended in the hour with a call on the replica'
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(hour)
ORDER BY (hour, version, replica)
TTL hour + toIntervalDay({{retention_days}});

-- The triangle's engine figures per block of hours: the exact p99 of every
-- 6-hour and 1-day block (the triangle's windows at 7 days and at longer ranges), computed once by the
-- rollup step (schema/jobs/run_cost_blocks.sql) when every hour of the block has a complete rollup
-- (cost_rollup_hours), by merging the hours' quantile states (cost_triangle_hours, part 'engine') of
-- their current versions. The reader (cost_replica_windows.sql) takes a block's row instead of
-- merging its hours' states (which hold every call's TTFT and e2e) when the window is the block and
-- the block's mark names exactly the versions its hours have now; otherwise it merges the hours.
-- Same insert-only scheme as the hour rollups: rows first with a new version (the chunk's run_id), then the
-- mark; older versions are never read (a recompute of an hour gives it a new version, so the block's
-- mark no longer matches until the next rollup step writes the block again). Plain MergeTree: a
-- merge must not drop a version a reader may still be reading.

-- Which blocks are written, from which hour versions.
CREATE TABLE IF NOT EXISTS cost_triangle_block_marks
(
    `block_start` DateTime('UTC') COMMENT 'start of the block (toStartOfInterval(hour, block_seconds))',
    `block_seconds` UInt32 COMMENT '21600 (6 h) or 86400 (1 day)',
    `version` UInt64 COMMENT 'run_id of the chunk that wrote it',
    `hour_versions` Array(UInt64) COMMENT 'the version of each hour of the block it was computed from, in hour order',
    `written_at` DateTime('UTC') DEFAULT now()
)
ENGINE = MergeTree
ORDER BY (block_seconds, block_start, version)
TTL block_start + toIntervalDay({{retention_days}});

-- Engine calls that ended in the block per replica: the sums of cost_triangle_hours and the exact p99.
CREATE TABLE IF NOT EXISTS cost_triangle_blocks
(
    `block_start` DateTime('UTC'),
    `block_seconds` UInt32,
    `version` UInt64,
    `replica` LowCardinality(String),
    `requests` UInt64,
    `tokens` UInt64 COMMENT 'prompt + output',
    `out_tokens` UInt64,
    `ttft_p99_s` Nullable(Float64) COMMENT 'seconds, quantileExact(0.99) (nearest rank) over the calls of the block',
    `e2e_p99_s` Nullable(Float64) COMMENT 'seconds, quantileExact(0.99)'
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(block_start)
ORDER BY (block_seconds, block_start, version, replica)
TTL block_start + toIntervalDay({{retention_days}});

--   * job_replica_gauges joins its per-minute gauges and other points once, by a FULL OUTER JOIN
--     (both are grouped by replica and minute).
CREATE TABLE IF NOT EXISTS engine_counters_live
(
    `replica` String,
    `minute` DateTime,
    `prompt_increase` Float64,
    `generation_increase` Float64,
    `cached_increase` Float64,
    `hits_increase` Float64,
    `queries_increase` Float64,
    `preemptions_increase` Float64,
    `n_prompt` UInt64,
    `n_generation` UInt64,
    `n_cached` UInt64,
    `n_queries` UInt64,
    `n_preemptions` UInt64,
    `hit_rate` Nullable(Float64),
    `covers_from` DateTime64(9),
    `covers_to` DateTime64(9)
)
ENGINE = MergeTree
ORDER BY (replica, minute);

CREATE TABLE IF NOT EXISTS engine_counters_runs
(
    `run_id` UInt64,
    `replica` String,
    `minute` DateTime,
    `prompt_increase` Float64,
    `generation_increase` Float64,
    `cached_increase` Float64,
    `hits_increase` Float64,
    `queries_increase` Float64,
    `preemptions_increase` Float64,
    `n_prompt` UInt64,
    `n_generation` UInt64,
    `n_cached` UInt64,
    `n_queries` UInt64,
    `n_preemptions` UInt64,
    `hit_rate` Nullable(Float64),
    `covers_from` DateTime64(9),
    `covers_to` DateTime64(9),
    `written_at` DateTime('UTC')
)
ENGINE = MergeTree
PARTITION BY run_id
ORDER BY (run_id, replica, minute)
TTL written_at + toIntervalDay(1);

CREATE TABLE IF NOT EXISTS replica_gauges_live
(
    `replica` String,
    `minute` DateTime,
    `up_metrics` UInt8,
    `queue_waiting_avg` Nullable(Float64),
    `queue_waiting_max` Nullable(Float64),
    `running_avg` Nullable(Float64),
    `kv_usage_avg` Nullable(Float64),
    `kv_usage_max` Nullable(Float64),
    `saturated` UInt8
)
ENGINE = MergeTree
ORDER BY (replica, minute);

CREATE TABLE IF NOT EXISTS replica_gauges_runs
(
    `run_id` UInt64,
    `replica` String,
    `minute` DateTime,
    `up_metrics` UInt8,
    `queue_waiting_avg` Nullable(Float64),
    `queue_waiting_max` Nullable(Float64),
    `running_avg` Nullable(Float64),
    `kv_usage_avg` Nullable(Float64),
    `kv_usage_max` Nullable(Float64),
    `saturated` UInt8,
    `written_at` DateTime('UTC')
)
ENGINE = MergeTree
PARTITION BY run_id
ORDER BY (run_id, replica, minute)
TTL written_at + toIntervalDay(1);

CREATE VIEW IF NOT EXISTS tasks AS
SELECT * FROM tasks_history WHERE minute < (SELECT max(watermark) FROM cost_watermark)
UNION ALL
SELECT * FROM tasks_live WHERE minute >= (SELECT max(watermark) FROM cost_watermark);
