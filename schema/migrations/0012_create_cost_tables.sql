-- Outputs of the cost jobs. Each is stored in two tables and read through one view:
--   <name>_live     the trailing window (default 2 h), REPLACED wholesale by the periodic
--                   refreshable materialized view on every run (atomic swap), so late spans are
--                   absorbed and nothing is ever double-counted;
--   <name>_history  minutes older than the window, appended once each by a copy view (and
--                   rewritten per range by the explicit runner / `infercost cost --recompute`);
--   <name>          the view every reader uses: history up to its last minute (the watermark),
--                   then live after it. No FINAL, no de-duplication on read paths.
-- Money: Float64 USD, unrounded (conservation holds to float rounding); round only for display.
-- Times: UTC; `minute` = toStartOfMinute of the bucket the row describes.

-- One row per (unit of GPU work, minute it overlaps): the allocated cost of a call.
CREATE TABLE IF NOT EXISTS call_costs_history (
    minute DateTime('UTC') COMMENT 'minute bucket of this piece of the call',
    call_id String CODEC(ZSTD(1)) COMMENT 'span id of the evidence span (engine, else gateway attempt, else client attempt)',
    trace_id String CODEC(ZSTD(1)),
    call_source LowCardinality(String) COMMENT 'evidence: engine | gateway | client',
    replica LowCardinality(String) COMMENT 'replica id ('''' when only the client saw the call)',
    gpu_type LowCardinality(String),
    model LowCardinality(String),
    task_id String CODEC(ZSTD(1)) COMMENT '''''= no task context (unattributed)',
    task_type LowCardinality(String),
    tenant_id LowCardinality(String),
    task_step String CODEC(ZSTD(1)),
    task_attempt UInt16 COMMENT 'task.attempt (client retries), 0 when absent',
    start_time DateTime64(9, 'UTC') COMMENT 'call start',
    end_time DateTime64(9, 'UTC') COMMENT 'call end',
    status LowCardinality(String) COMMENT 'ok | error | unset',
    error_type LowCardinality(String),
    finish_reason LowCardinality(String),
    partial UInt8 COMMENT '1 = tokens streamed, then the call broke',
    first_piece UInt8 COMMENT '1 on the piece of the minute the call started (token and request counts live there)',
    requests UInt8 COMMENT '1 on the first piece, else 0',
    prompt_tokens UInt32 COMMENT 'tokens, call total on the first piece, else 0 (includes cached)',
    cached_tokens UInt32 COMMENT 'prefix-cached prompt tokens, first piece only',
    output_tokens UInt32 COMMENT 'tokens, first piece only (streamed tokens for partial calls)',
    ttft_s Nullable(Float64) COMMENT 'seconds, the call''s time to first token',
    e2e_s Float64 COMMENT 'seconds, the call''s end-to-end latency',
    overlap_s Float64 COMMENT 'seconds of the call inside this minute',
    work Float64 COMMENT 'work units of this piece: (w_prefill x uncached prompt + w_decode x output) x overlap share',
    minute_work Float64 COMMENT 'work units of every call on this replica-minute (the allocation denominator)',
    spend_usd Float64 COMMENT 'USD, spend of this replica-minute',
    cost_usd Float64 COMMENT 'USD allocated to this piece = spend_usd x work / minute_work',
    category LowCardinality(String) COMMENT 'useful | retry_waste | failed_task_waste | pending (task outcome not known yet) | unattributed',
    task_outcome LowCardinality(String) COMMENT 'success | failure | abandoned | unknown, as known when computed',
    computed_at DateTime('UTC') COMMENT 'when the job wrote this row',
    INDEX idx_task_id task_id TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_call_id call_id TYPE bloom_filter(0.01) GRANULARITY 1
) ENGINE = MergeTree()
PARTITION BY toDate(minute)
ORDER BY (minute, replica, call_id)
TTL minute + toIntervalDay({{retention_days}})
SETTINGS ttl_only_drop_parts = 1;

CREATE TABLE IF NOT EXISTS call_costs_live AS call_costs_history;

CREATE VIEW IF NOT EXISTS call_costs AS
SELECT * FROM call_costs_history
UNION ALL
SELECT * FROM call_costs_live WHERE minute > (SELECT max(minute) FROM call_costs_history);

-- One row per replica and minute it was up (produced metric points or did work in that minute).
CREATE TABLE IF NOT EXISTS replica_minutes_history (
    minute DateTime('UTC') COMMENT 'minute bucket',
    replica LowCardinality(String) COMMENT 'replica id',
    gpu_type LowCardinality(String),
    gpu_count UInt16 COMMENT 'GPUs',
    usd_per_gpu_hour Float64 COMMENT 'USD per GPU-hour valid at this minute (0 when no price is configured)',
    in_fleet UInt8 COMMENT '0 = replica absent from fleet.yaml, priced at the configured default (flag)',
    priced UInt8 COMMENT '0 = no price valid at this minute for its GPU type (spend 0, flag)',
    up_metrics UInt8 COMMENT '1 = metric points in this minute',
    up_spans UInt8 COMMENT '1 = a call with work overlapped this minute',
    spend_usd Float64 COMMENT 'USD = usd_per_gpu_hour x gpu_count / 60',
    allocated_usd Float64 COMMENT 'USD allocated to calls (sum of call_costs.cost_usd of this replica-minute)',
    idle_usd Float64 COMMENT 'USD = spend_usd - allocated_usd (all of it when no call ran)',
    unattributed_usd Float64 COMMENT 'USD allocated to calls without task context',
    calls_active UInt32 COMMENT 'calls overlapping this minute',
    requests UInt32 COMMENT 'calls that started in this minute',
    prompt_tokens UInt64 COMMENT 'tokens of calls started in this minute (includes cached)',
    cached_tokens UInt64 COMMENT 'tokens',
    output_tokens UInt64 COMMENT 'tokens',
    work Float64 COMMENT 'work units in this minute',
    ttft_p50_s Nullable(Float64) COMMENT 'seconds, engine-measured TTFT of calls started this minute',
    ttft_p90_s Nullable(Float64) COMMENT 'seconds',
    ttft_p99_s Nullable(Float64) COMMENT 'seconds',
    itl_p50_s Nullable(Float64) COMMENT 'seconds, mean inter-token latency per call = (e2e - ttft) / (output - 1)',
    itl_p99_s Nullable(Float64) COMMENT 'seconds',
    e2e_p50_s Nullable(Float64) COMMENT 'seconds',
    e2e_p90_s Nullable(Float64) COMMENT 'seconds',
    e2e_p99_s Nullable(Float64) COMMENT 'seconds',
    queue_waiting_avg Nullable(Float64) COMMENT 'requests, mean of vllm:num_requests_waiting points',
    queue_waiting_max Nullable(Float64) COMMENT 'requests',
    running_avg Nullable(Float64) COMMENT 'requests, mean of vllm:num_requests_running points',
    kv_usage_avg Nullable(Float64) COMMENT 'fraction 0..1, mean of vllm:kv_cache_usage_perc points',
    kv_usage_max Nullable(Float64) COMMENT 'fraction 0..1',
    counter_prompt_tokens Nullable(Float64) COMMENT 'tokens, increase of vllm:prompt_tokens in this minute',
    counter_generation_tokens Nullable(Float64) COMMENT 'tokens, increase of vllm:generation_tokens in this minute',
    token_gap Nullable(Float64) COMMENT 'tokens = engine counters - span tokens (work the spans missed, e.g. aborted requests); data quality',
    computed_at DateTime('UTC')
) ENGINE = MergeTree()
PARTITION BY toYYYYMM(minute)
ORDER BY (minute, replica);

CREATE TABLE IF NOT EXISTS replica_minutes_live AS replica_minutes_history;

CREATE VIEW IF NOT EXISTS replica_minutes AS
SELECT * FROM replica_minutes_history
UNION ALL
SELECT * FROM replica_minutes_live WHERE minute > (SELECT max(minute) FROM replica_minutes_history);

-- One row per task, in the minute it ended (root span end; for a task whose root span never
-- came, its last call's end + abandon timeout once that has passed, else its last call's end).
CREATE TABLE IF NOT EXISTS tasks_history (
    minute DateTime('UTC') COMMENT 'toStartOfMinute(end_time): the period a task belongs to',
    task_id String CODEC(ZSTD(1)),
    task_type LowCardinality(String),
    tenant_id LowCardinality(String),
    tenant_priority LowCardinality(String),
    model LowCardinality(String) COMMENT 'model of most of its calls',
    outcome LowCardinality(String) COMMENT 'success | failure | abandoned | unknown (no outcome yet)',
    has_root UInt8 COMMENT '1 = the task root span arrived',
    start_time DateTime64(9, 'UTC'),
    end_time DateTime64(9, 'UTC'),
    steps UInt16 COMMENT 'distinct task.step values',
    attempts UInt16 COMMENT 'client-visible attempts: distinct (step, attempt)',
    calls UInt32 COMMENT 'units of GPU work (includes the gateway''s hidden retries)',
    prompt_tokens UInt64 COMMENT 'tokens',
    cached_tokens UInt64 COMMENT 'tokens',
    output_tokens UInt64 COMMENT 'tokens',
    cost_usd Float64 COMMENT 'USD = sum of its calls'' cost = useful + retry_waste + failed_task_waste + pending',
    useful_usd Float64 COMMENT 'USD, calls that produced an accepted step result of a successful task',
    retry_waste_usd Float64 COMMENT 'USD, failed or superseded attempts of a successful task (partial streams included)',
    failed_task_waste_usd Float64 COMMENT 'USD, every call of a failed or abandoned task',
    pending_usd Float64 COMMENT 'USD, calls of a task whose outcome is unknown',
    partial_calls UInt32 COMMENT 'calls that streamed tokens then broke',
    partial_tokens UInt64 COMMENT 'output tokens streamed by those calls',
    partial_usd Float64 COMMENT 'USD of those calls (already inside a category)',
    ttft_s Nullable(Float64) COMMENT 'seconds, worst TTFT among its accepted calls',
    e2e_s Float64 COMMENT 'seconds, end_time - start_time',
    slo_ttft_ms Nullable(Float64) COMMENT 'milliseconds (root span, else task_slos)',
    slo_e2e_ms Nullable(Float64) COMMENT 'milliseconds (root span, else task_slos)',
    slo_met UInt8 COMMENT '1 = success and every configured budget met',
    computed_at DateTime('UTC'),
    INDEX idx_task_id task_id TYPE bloom_filter(0.01) GRANULARITY 1
) ENGINE = MergeTree()
PARTITION BY toYYYYMM(minute)
ORDER BY (minute, task_type, tenant_id, task_id);

CREATE TABLE IF NOT EXISTS tasks_live AS tasks_history;

CREATE VIEW IF NOT EXISTS tasks AS
SELECT * FROM tasks_history
UNION ALL
SELECT * FROM tasks_live WHERE minute > (SELECT max(minute) FROM tasks_history);
