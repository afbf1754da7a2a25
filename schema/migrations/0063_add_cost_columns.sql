-- Columns of the cost model's second shape (shared/DESIGN.md "Cost model"), added where
-- the explicit runner's positional INSERTs need them (the job views of 0064 emit them in this
-- order). Reader views and the refreshable views that write these tables are restated in 0064.
-- One ALTER per table (each ALTER is a metadata round trip).

-- The chain stays paused while its tables change (as in 0061, for a store that applied 0061
-- before it paused the chain); 0064 resumes it.
SYSTEM STOP VIEW cost_copy_call_costs_mv;
SYSTEM STOP VIEW cost_copy_replica_minutes_mv;
SYSTEM STOP VIEW cost_copy_tasks_mv;
SYSTEM STOP VIEW cost_watermark_mv;
SYSTEM STOP VIEW cost_clock_mv;
SYSTEM STOP VIEW cost_resolved_calls_mv;
SYSTEM STOP VIEW cost_call_costs_mv;
SYSTEM STOP VIEW cost_replica_minutes_mv;
SYSTEM STOP VIEW cost_tasks_mv;
SYSTEM CANCEL VIEW cost_copy_call_costs_mv;
SYSTEM CANCEL VIEW cost_copy_replica_minutes_mv;
SYSTEM CANCEL VIEW cost_copy_tasks_mv;
SYSTEM CANCEL VIEW cost_watermark_mv;
SYSTEM CANCEL VIEW cost_clock_mv;
SYSTEM CANCEL VIEW cost_resolved_calls_mv;
SYSTEM CANCEL VIEW cost_call_costs_mv;
SYSTEM CANCEL VIEW cost_replica_minutes_mv;
SYSTEM CANCEL VIEW cost_tasks_mv;


-- fleet.yaml: per replica billing mode and sustainable work per minute.
ALTER TABLE replicas
    ADD COLUMN IF NOT EXISTS billing LowCardinality(String) DEFAULT 'on_demand' COMMENT 'on_demand: paid while up | reserved: paid every minute, up or not' AFTER gpu_count,
    ADD COLUMN IF NOT EXISTS capacity_work Float64 DEFAULT 0 COMMENT 'sustainable work units per minute (0 = learned from its saturated minutes)' AFTER billing;

-- Resolved calls (scratch tables of the call_costs job; both keep the same column order, the job
-- reads them with UNION ALL). cached_source: span (a span counted them) | estimate (counter hit
-- rate) | '' (unknown: 0).
ALTER TABLE resolved_calls_live
    ADD COLUMN IF NOT EXISTS task_call UInt16 AFTER task_attempt,
    ADD COLUMN IF NOT EXISTS cached_source LowCardinality(String) AFTER cached_tokens,
    ADD COLUMN IF NOT EXISTS choices UInt16 AFTER output_tokens,
    ADD COLUMN IF NOT EXISTS user_ttft_s Nullable(Float64) AFTER ttft_s,
    ADD COLUMN IF NOT EXISTS user_ttft_source LowCardinality(String) AFTER user_ttft_s;
ALTER TABLE resolved_calls_runs
    ADD COLUMN IF NOT EXISTS task_call UInt16 AFTER task_attempt,
    ADD COLUMN IF NOT EXISTS cached_source LowCardinality(String) AFTER cached_tokens,
    ADD COLUMN IF NOT EXISTS choices UInt16 AFTER output_tokens,
    ADD COLUMN IF NOT EXISTS user_ttft_s Nullable(Float64) AFTER ttft_s,
    ADD COLUMN IF NOT EXISTS user_ttft_source LowCardinality(String) AFTER user_ttft_s;

-- call_costs (history and live keep the same column order: the readers' view is a UNION ALL)
ALTER TABLE call_costs_history
    ADD COLUMN IF NOT EXISTS task_call UInt16 COMMENT 'task.call: the call within its step (0 when not sent); useful/retry is decided per (step, call)' AFTER task_attempt,
    ADD COLUMN IF NOT EXISTS cached_estimated UInt8 COMMENT '1 = no span counted cached tokens: estimated from the replica-minute''s counter hit rate' AFTER cached_tokens,
    ADD COLUMN IF NOT EXISTS user_ttft_s Nullable(Float64) COMMENT 'seconds, TTFT the user waited: client span, else gateway, else engine' AFTER ttft_s,
    ADD COLUMN IF NOT EXISTS user_ttft_source LowCardinality(String) COMMENT 'client | gateway | engine | '''' (no TTFT)' AFTER user_ttft_s,
    ADD COLUMN IF NOT EXISTS gap_work Float64 COMMENT 'work units of engine-counter tokens no span explains, charged to this piece (inside work)' AFTER work,
    ADD COLUMN IF NOT EXISTS capacity_work Float64 COMMENT 'work units per minute the replica sustains; allocated share of spend = min(1, minute_work / capacity_work)' AFTER minute_work,
    ADD COLUMN IF NOT EXISTS capacity_source LowCardinality(String) COMMENT 'fleet (fleet.yaml) | saturated (median work of its saturated minutes, 7 days) | peak (its busiest minute)' AFTER capacity_work,
    COMMENT COLUMN category 'useful | retry_waste | failed_task_waste | pending (task outcome not known yet) | unattributed | unspanned (engine work no span explains)',
    COMMENT COLUMN cost_usd 'USD allocated to this piece = spend_usd x work / greatest(minute_work, capacity_work)';
ALTER TABLE call_costs_live
    ADD COLUMN IF NOT EXISTS task_call UInt16 COMMENT 'task.call: the call within its step (0 when not sent); useful/retry is decided per (step, call)' AFTER task_attempt,
    ADD COLUMN IF NOT EXISTS cached_estimated UInt8 COMMENT '1 = no span counted cached tokens: estimated from the replica-minute''s counter hit rate' AFTER cached_tokens,
    ADD COLUMN IF NOT EXISTS user_ttft_s Nullable(Float64) COMMENT 'seconds, TTFT the user waited: client span, else gateway, else engine' AFTER ttft_s,
    ADD COLUMN IF NOT EXISTS user_ttft_source LowCardinality(String) COMMENT 'client | gateway | engine | '''' (no TTFT)' AFTER user_ttft_s,
    ADD COLUMN IF NOT EXISTS gap_work Float64 COMMENT 'work units of engine-counter tokens no span explains, charged to this piece (inside work)' AFTER work,
    ADD COLUMN IF NOT EXISTS capacity_work Float64 COMMENT 'work units per minute the replica sustains; allocated share of spend = min(1, minute_work / capacity_work)' AFTER minute_work,
    ADD COLUMN IF NOT EXISTS capacity_source LowCardinality(String) COMMENT 'fleet (fleet.yaml) | saturated (median work of its saturated minutes, 7 days) | peak (its busiest minute)' AFTER capacity_work,
    COMMENT COLUMN category 'useful | retry_waste | failed_task_waste | pending (task outcome not known yet) | unattributed | unspanned (engine work no span explains)',
    COMMENT COLUMN cost_usd 'USD allocated to this piece = spend_usd x work / greatest(minute_work, capacity_work)';

-- replica_minutes
ALTER TABLE replica_minutes_history
    ADD COLUMN IF NOT EXISTS billing LowCardinality(String) COMMENT 'on_demand | reserved (fleet.yaml)' AFTER in_fleet,
    ADD COLUMN IF NOT EXISTS up UInt8 COMMENT '1 = a successful scrape or work in this minute; 0 = a reserved replica that was down (its spend is idle)' AFTER up_spans,
    ADD COLUMN IF NOT EXISTS unspanned_usd Float64 COMMENT 'USD allocated to engine work no span explains (no call to charge it to)' AFTER unattributed_usd,
    ADD COLUMN IF NOT EXISTS cached_estimated_tokens UInt64 COMMENT 'tokens, the part of cached_tokens estimated from the counter hit rate' AFTER cached_tokens,
    ADD COLUMN IF NOT EXISTS gap_work Float64 COMMENT 'work units of engine-counter tokens no span explains (charged to calls without engine spans, else unspanned)' AFTER work,
    ADD COLUMN IF NOT EXISTS capacity_work Float64 COMMENT 'work units per minute the replica sustains' AFTER gap_work,
    ADD COLUMN IF NOT EXISTS capacity_source LowCardinality(String) COMMENT 'fleet (fleet.yaml capacity) | saturated (median work of its saturated minutes) | peak (its busiest minute)' AFTER capacity_work,
    ADD COLUMN IF NOT EXISTS saturated UInt8 COMMENT '1 = requests waited for capacity in this minute (vllm:num_requests_waiting_by_reason{reason=capacity}, else vllm:num_requests_waiting)' AFTER kv_usage_max,
    ADD COLUMN IF NOT EXISTS counter_cached_tokens Nullable(Float64) COMMENT 'tokens, increase of vllm:prompt_tokens_cached (else vllm:prefix_cache_hits) in this minute' AFTER counter_generation_tokens,
    ADD COLUMN IF NOT EXISTS counter_hit_rate Nullable(Float64) COMMENT 'fraction 0..1 of prompt tokens served from the prefix cache (counters)' AFTER counter_cached_tokens,
    ADD COLUMN IF NOT EXISTS preemptions Nullable(Float64) COMMENT 'increase of vllm:num_preemptions in this minute' AFTER counter_hit_rate,
    ADD COLUMN IF NOT EXISTS counted_tokens Nullable(Float64) COMMENT 'tokens of calls the counters of this minute observed (prompt at first token, output spread to the end)' AFTER preemptions,
    COMMENT COLUMN token_gap 'tokens = engine counters - counted_tokens (work no span explains, e.g. aborted requests); data quality',
    COMMENT COLUMN queue_waiting_avg 'requests, mean over scrapes of vllm:num_requests_waiting summed over the replica''s engines',
    COMMENT COLUMN running_avg 'requests, mean over scrapes of vllm:num_requests_running summed over the replica''s engines',
    COMMENT COLUMN kv_usage_avg 'fraction 0..1, mean over scrapes of vllm:kv_cache_usage_perc, engines weighted by their KV blocks';
ALTER TABLE replica_minutes_live
    ADD COLUMN IF NOT EXISTS billing LowCardinality(String) COMMENT 'on_demand | reserved (fleet.yaml)' AFTER in_fleet,
    ADD COLUMN IF NOT EXISTS up UInt8 COMMENT '1 = a successful scrape or work in this minute; 0 = a reserved replica that was down (its spend is idle)' AFTER up_spans,
    ADD COLUMN IF NOT EXISTS unspanned_usd Float64 COMMENT 'USD allocated to engine work no span explains (no call to charge it to)' AFTER unattributed_usd,
    ADD COLUMN IF NOT EXISTS cached_estimated_tokens UInt64 COMMENT 'tokens, the part of cached_tokens estimated from the counter hit rate' AFTER cached_tokens,
    ADD COLUMN IF NOT EXISTS gap_work Float64 COMMENT 'work units of engine-counter tokens no span explains (charged to calls without engine spans, else unspanned)' AFTER work,
    ADD COLUMN IF NOT EXISTS capacity_work Float64 COMMENT 'work units per minute the replica sustains' AFTER gap_work,
    ADD COLUMN IF NOT EXISTS capacity_source LowCardinality(String) COMMENT 'fleet (fleet.yaml capacity) | saturated (median work of its saturated minutes) | peak (its busiest minute)' AFTER capacity_work,
    ADD COLUMN IF NOT EXISTS saturated UInt8 COMMENT '1 = requests waited for capacity in this minute (vllm:num_requests_waiting_by_reason{reason=capacity}, else vllm:num_requests_waiting)' AFTER kv_usage_max,
    ADD COLUMN IF NOT EXISTS counter_cached_tokens Nullable(Float64) COMMENT 'tokens, increase of vllm:prompt_tokens_cached (else vllm:prefix_cache_hits) in this minute' AFTER counter_generation_tokens,
    ADD COLUMN IF NOT EXISTS counter_hit_rate Nullable(Float64) COMMENT 'fraction 0..1 of prompt tokens served from the prefix cache (counters)' AFTER counter_cached_tokens,
    ADD COLUMN IF NOT EXISTS preemptions Nullable(Float64) COMMENT 'increase of vllm:num_preemptions in this minute' AFTER counter_hit_rate,
    ADD COLUMN IF NOT EXISTS counted_tokens Nullable(Float64) COMMENT 'tokens of calls the counters of this minute observed (prompt at first token, output spread to the end)' AFTER preemptions,
    COMMENT COLUMN token_gap 'tokens = engine counters - counted_tokens (work no span explains, e.g. aborted requests); data quality',
    COMMENT COLUMN queue_waiting_avg 'requests, mean over scrapes of vllm:num_requests_waiting summed over the replica''s engines',
    COMMENT COLUMN running_avg 'requests, mean over scrapes of vllm:num_requests_running summed over the replica''s engines',
    COMMENT COLUMN kv_usage_avg 'fraction 0..1, mean over scrapes of vllm:kv_cache_usage_perc, engines weighted by their KV blocks';

-- tasks
ALTER TABLE tasks_history
    ADD COLUMN IF NOT EXISTS step_calls UInt16 COMMENT 'calls the steps asked for: distinct (step, call); attempts - step_calls = client retries' AFTER steps,
    COMMENT COLUMN attempts 'calls sent, client retries included: distinct (step, call, attempt)',
    ADD COLUMN IF NOT EXISTS ttft_source LowCardinality(String) COMMENT 'whose clock ttft_s is: client | gateway | engine' AFTER ttft_s,
    COMMENT COLUMN ttft_s 'seconds, worst TTFT the user waited among its accepted calls (client, else gateway, else engine)';
ALTER TABLE tasks_live
    ADD COLUMN IF NOT EXISTS step_calls UInt16 COMMENT 'calls the steps asked for: distinct (step, call); attempts - step_calls = client retries' AFTER steps,
    COMMENT COLUMN attempts 'calls sent, client retries included: distinct (step, call, attempt)',
    ADD COLUMN IF NOT EXISTS ttft_source LowCardinality(String) COMMENT 'whose clock ttft_s is: client | gateway | engine' AFTER ttft_s,
    COMMENT COLUMN ttft_s 'seconds, worst TTFT the user waited among its accepted calls (client, else gateway, else engine)';

-- Reconciliation of a run's resolved calls with the engine counters, per replica-minute (scratch
-- tables of the chain, like resolved_calls_*): what the call_costs and replica_minutes jobs read.
CREATE TABLE IF NOT EXISTS reconciliation_live (
    replica LowCardinality(String),
    minute DateTime('UTC'),
    covers_from DateTime64(9, 'UTC') COMMENT 'the minute''s counters cover (covers_from, covers_to]: previous and last scrape',
    covers_to DateTime64(9, 'UTC'),
    counter_prompt_tokens Nullable(Float64) COMMENT 'tokens, increase of vllm:prompt_tokens',
    counter_generation_tokens Nullable(Float64) COMMENT 'tokens, increase of vllm:generation_tokens',
    counter_cached_tokens Nullable(Float64) COMMENT 'tokens, increase of vllm:prompt_tokens_cached (else prefix_cache_hits)',
    hit_rate Nullable(Float64) COMMENT 'fraction of prompt tokens served from the prefix cache',
    preemptions Nullable(Float64) COMMENT 'increase of vllm:num_preemptions',
    counted_tokens Float64 COMMENT 'tokens of the resolved calls these counters observed',
    residual_prompt Float64 COMMENT 'prompt tokens no span explains (>= 0)',
    residual_output Float64 COMMENT 'output tokens no span explains (>= 0)',
    gap_work Float64 COMMENT 'work units of the residual tokens',
    span_work Float64 COMMENT 'work units of the calls'' pieces in this minute',
    total_work Float64 COMMENT 'span_work + gap_work: the allocation denominator',
    saturated UInt8 COMMENT '1 = requests waited for capacity in this minute'
) ENGINE = MergeTree()
ORDER BY (replica, minute);

CREATE TABLE IF NOT EXISTS reconciliation_runs (
    run_id UInt64 COMMENT 'the explicit run (chunk) that wrote the row',
    replica LowCardinality(String), minute DateTime('UTC'), covers_from DateTime64(9, 'UTC'),
    covers_to DateTime64(9, 'UTC'), counter_prompt_tokens Nullable(Float64), counter_generation_tokens Nullable(Float64),
    counter_cached_tokens Nullable(Float64), hit_rate Nullable(Float64), preemptions Nullable(Float64),
    counted_tokens Float64, residual_prompt Float64, residual_output Float64, gap_work Float64, span_work Float64,
    total_work Float64, saturated UInt8,
    written_at DateTime('UTC') DEFAULT now()
) ENGINE = MergeTree()
ORDER BY (run_id, replica, minute)
TTL written_at + INTERVAL 1 DAY;
