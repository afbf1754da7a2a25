-- The cost jobs' SQL, ONE definition per job as a parameterized view over a window of whole
-- minutes [ws, we). Both runners call these same views:
--   * the refreshable materialized views (0014) with ws/we from job_clock (trailing window),
--   * schema/jobs (run_jobs: explicit window for tests; `infercost cost --recompute --since`).
-- "now" for abandonment is we. Prices, replicas and weights are read at run time, so re-running a
-- window re-prices it. Sources: shared/DESIGN.md "Cost model", docs/telemetry.md "Call resolution".

-- 1. Call resolution: one row per unit of GPU work overlapping [ws, we).
-- Rows of llm_calls are grouped into units by (trace, unit key): an engine row's key is its
-- parent span (the gateway attempt, or the client attempt when called directly), every other
-- row's key is its own span id. In a unit the engine row is the evidence (tokens, times,
-- replica) and the gateway/client row gives task context and is not counted again; a unit
-- without an engine row (crashed replica) takes the gateway attempt's streamed tokens as
-- evidence. A client attempt with a gateway request below it (gateway_requests.parent) is covered
-- by the gateway's attempts and dropped; otherwise it is the evidence of last resort (no replica).
-- A unit is 'error' when any of its rows failed, partial when any is partial.
CREATE VIEW IF NOT EXISTS job_resolved_calls AS
WITH
    {ws:DateTime} AS ws,
    {we:DateTime} AS we,
    (SELECT argMax(w_prefill, synced_at) FROM cost_settings) AS w_prefill,
    (SELECT argMax(w_decode, synced_at) FROM cost_settings) AS w_decode,
    (SELECT argMax(max_call_s, synced_at) FROM cost_settings) AS max_call_s,
    units AS (
        SELECT
            any(trace_id) AS u_trace_id,
            -- one 64-bit key per (trace, unit): hashing two strings once is cheaper than grouping by them
            cityHash64(trace_id, if(call_source = 'engine' AND parent_span_id != '', parent_span_id, span_id)) AS unit_key,
            max(call_source = 'engine') AS has_engine,
            max(call_source = 'gateway') AS has_gateway,
            -- evidence row: engine (3) > gateway (2) > client (1); context row: gateway > client > engine
            argMax(tuple(span_id, call_source, replica, gpu_type, model,
                         ifNull(prompt_tokens, 0), ifNull(cached_tokens, 0), ifNull(output_tokens, 0),
                         ttft_s, e2e_s, finish_reason, start_time, end_time),
                   multiIf(call_source = 'engine', 3, call_source = 'gateway', 2, 1)) AS ev,
            argMax(tuple(task_id, task_type, tenant_id, task_step, ifNull(task_attempt, 0), model),
                   multiIf(call_source = 'gateway', 3, call_source = 'client', 2, 1)) AS ctx,
            max(status = 'error') AS any_error,
            max(partial) AS any_partial,
            argMax(error_type, error_type != '') AS first_error_type
        FROM llm_calls
        WHERE start_time >= ws - toIntervalSecond(max_call_s + 60) AND start_time < we
          AND NOT (call_source = 'client'
                   AND (trace_id, span_id) IN (SELECT trace_id, parent_span_id FROM gateway_requests
                                               WHERE start_time >= ws - toIntervalSecond(max_call_s + 60) AND start_time < we))
        GROUP BY unit_key
    )
SELECT
    ev.1 AS call_id, u_trace_id AS trace_id, ev.2 AS call_source, ev.3 AS replica, ev.4 AS gpu_type,
    if(ev.5 != '', ev.5, ctx.6) AS model,
    ctx.1 AS task_id, ctx.2 AS task_type, ctx.3 AS tenant_id, ctx.4 AS task_step, toUInt16(ctx.5) AS task_attempt,
    toUInt32(ev.6) AS prompt_tokens, toUInt32(ev.7) AS cached_tokens, toUInt32(ev.8) AS output_tokens,
    ev.9 AS ttft_s, ev.10 AS e2e_s,
    if(any_error, 'error', 'ok') AS status, first_error_type AS error_type, ev.11 AS finish_reason,
    toUInt8(any_partial) AS partial, ev.12 AS start_time, ev.13 AS end_time,
    w_prefill * greatest(toInt64(ev.6) - toInt64(ev.7), 0) + w_decode * ev.8 AS call_work
FROM units
WHERE ev.12 < we AND (ev.13 > ws OR ev.12 >= ws);

-- The resolved calls of a run are materialized once (resolution is the costliest step), then
-- read by job_call_costs: the periodic chain replaces resolved_calls_live on every cycle
-- (run_id 0); the explicit runner writes its chunk into resolved_calls_runs under a fresh run_id
-- and deletes it afterwards.
CREATE TABLE IF NOT EXISTS resolved_calls_live (
    call_id String, trace_id String, call_source LowCardinality(String), replica LowCardinality(String),
    gpu_type LowCardinality(String), model LowCardinality(String), task_id String,
    task_type LowCardinality(String), tenant_id LowCardinality(String), task_step String, task_attempt UInt16,
    prompt_tokens UInt32, cached_tokens UInt32, output_tokens UInt32, ttft_s Nullable(Float64), e2e_s Float64,
    status LowCardinality(String), error_type LowCardinality(String), finish_reason LowCardinality(String),
    partial UInt8, start_time DateTime64(9, 'UTC'), end_time DateTime64(9, 'UTC'),
    call_work Float64 COMMENT 'work units = w_prefill x uncached prompt + w_decode x output'
) ENGINE = MergeTree()
ORDER BY (replica, start_time);

CREATE TABLE IF NOT EXISTS resolved_calls_runs (
    run_id UInt64 COMMENT 'the explicit run (chunk) that wrote the row',
    call_id String, trace_id String, call_source LowCardinality(String), replica LowCardinality(String),
    gpu_type LowCardinality(String), model LowCardinality(String), task_id String,
    task_type LowCardinality(String), tenant_id LowCardinality(String), task_step String, task_attempt UInt16,
    prompt_tokens UInt32, cached_tokens UInt32, output_tokens UInt32, ttft_s Nullable(Float64), e2e_s Float64,
    status LowCardinality(String), error_type LowCardinality(String), finish_reason LowCardinality(String),
    partial UInt8, start_time DateTime64(9, 'UTC'), end_time DateTime64(9, 'UTC'), call_work Float64,
    written_at DateTime('UTC') DEFAULT now()
) ENGINE = MergeTree()
ORDER BY (run_id, replica, start_time)
TTL written_at + INTERVAL 1 DAY;

-- 2. call_costs rows of [ws, we) from the resolved calls of run run_id (0 = the periodic chain's):
-- each call split into the minutes it overlaps (work x overlap / duration; a zero-length call
-- sits wholly in its start minute), each piece priced at spend x piece work / all work on that
-- replica-minute. A replica-minute with work is up, so its spend = usd_per_gpu_hour x gpu_count
-- / 60 with the GPU type and count from `replicas` (else the configured default) and the
-- gpu_prices row of that type with the latest valid_from <= minute (none: 0).
-- Category as known at run time: no task -> unattributed; task failed or abandoned ->
-- failed_task_waste; outcome unknown -> pending; task succeeded -> useful when the call succeeded
-- (not error, not partial) with the highest successful attempt of its step, else retry_waste.
-- A task with no root span is abandoned once abandon_timeout_s passed since its last call (at we).
CREATE VIEW IF NOT EXISTS job_call_costs AS
WITH
    {ws:DateTime} AS ws,
    {we:DateTime} AS we,
    {run_id:UInt64} AS p_run_id,
    (SELECT argMax(abandon_timeout_s, synced_at) FROM cost_settings) AS abandon_timeout_s,
    (SELECT argMax(max_call_s, synced_at) FROM cost_settings) AS max_call_s,
    (SELECT argMax(default_gpu_type, synced_at) FROM cost_settings) AS default_gpu_type,
    (SELECT argMax(default_gpu_count, synced_at) FROM cost_settings) AS default_gpu_count,
    calls AS (
        SELECT * FROM resolved_calls_live WHERE p_run_id = 0
        UNION ALL
        SELECT * EXCEPT (run_id, written_at) FROM resolved_calls_runs WHERE run_id = p_run_id AND p_run_id != 0
    ),
    pieces AS (
        SELECT *, minute,
               toUnixTimestamp64Nano(start_time) AS s_ns,
               toUnixTimestamp64Nano(end_time) AS e_ns,
               toInt64(toUnixTimestamp(minute)) * 1000000000 AS m_ns,
               greatest(e_ns - s_ns, 0) AS dur_ns,
               if(dur_ns = 0, 0, greatest(least(e_ns, m_ns + 60000000000) - greatest(s_ns, m_ns), 0)) AS overlap_ns,
               if(dur_ns = 0, 1.0, overlap_ns / dur_ns) AS share,
               toUInt8(minute = toStartOfMinute(start_time)) AS first_piece
        FROM calls
        ARRAY JOIN arrayMap(i -> toDateTime(toStartOfMinute(start_time), 'UTC') + i * 60,
                            range(toUInt64(dateDiff('minute', toStartOfMinute(start_time), toStartOfMinute(end_time)) + 1))) AS minute
        WHERE minute >= ws AND minute < we AND (overlap_ns > 0 OR (dur_ns = 0 AND first_piece = 1))
    ),
    minute_work AS (
        SELECT replica AS mw_replica, minute AS mw_minute, sum(call_work * share) AS total_work
        FROM pieces GROUP BY replica, minute
    ),
    -- per task and step, over every call of the window (not only this minute's)
    task_last AS (
        SELECT task_id AS tl_task_id, max(end_time) AS task_last_end FROM calls WHERE task_id != '' GROUP BY task_id
    ),
    step_ok AS (
        SELECT task_id AS so_task_id, task_step AS so_step,
               maxIf(task_attempt, status != 'error' AND partial = 0) AS ok_attempt
        FROM calls WHERE task_id != '' GROUP BY task_id, task_step
    ),
    roots AS (
        SELECT task_id AS r_task_id, argMax(outcome, end_time) AS root_outcome
        FROM task_spans
        WHERE end_time >= ws - toIntervalSecond(2 * max_call_s)
          AND end_time < we + toIntervalSecond((SELECT argMax(task_lookback_s, synced_at) FROM cost_settings))
          AND task_id IN (SELECT task_id FROM calls WHERE task_id != '')
        GROUP BY task_id
    ),
    fleet AS (SELECT replica AS f_replica, gpu_type AS f_gpu_type, gpu_count AS f_gpu_count FROM replicas),
    sized AS (
        SELECT k.*, mw.total_work AS total_work, tl.task_last_end AS task_last_end, so.ok_attempt AS ok_attempt,
               toUInt8(f.f_replica != '') AS in_fleet,
               if(in_fleet, f.f_gpu_type, default_gpu_type) AS fleet_gpu_type,
               if(in_fleet, f.f_gpu_count, default_gpu_count) AS fleet_gpu_count,
               r.r_task_id != '' AS has_root, r.root_outcome AS root_outcome
        FROM pieces AS k
        LEFT JOIN minute_work AS mw ON mw.mw_replica = k.replica AND mw.mw_minute = k.minute
        LEFT JOIN task_last AS tl ON tl.tl_task_id = k.task_id
        LEFT JOIN step_ok AS so ON so.so_task_id = k.task_id AND so.so_step = k.task_step
        LEFT JOIN fleet AS f ON f.f_replica = k.replica
        LEFT JOIN roots AS r ON r.r_task_id = k.task_id
    )
SELECT
    s.minute AS minute, s.call_id AS call_id, s.trace_id AS trace_id, s.call_source AS call_source,
    s.replica AS replica, if(s.gpu_type != '', s.gpu_type, s.fleet_gpu_type) AS gpu_type, s.model AS model,
    s.task_id AS task_id, s.task_type AS task_type, s.tenant_id AS tenant_id, s.task_step AS task_step,
    s.task_attempt AS task_attempt, s.start_time AS start_time, s.end_time AS end_time,
    s.status AS status, s.error_type AS error_type, s.finish_reason AS finish_reason, s.partial AS partial,
    s.first_piece AS first_piece, s.first_piece AS requests,
    toUInt32(if(s.first_piece, s.prompt_tokens, 0)) AS prompt_tokens,
    toUInt32(if(s.first_piece, s.cached_tokens, 0)) AS cached_tokens,
    toUInt32(if(s.first_piece, s.output_tokens, 0)) AS output_tokens,
    s.ttft_s AS ttft_s, s.e2e_s AS e2e_s,
    s.overlap_ns / 1e9 AS overlap_s,
    s.call_work * s.share AS work,
    s.total_work AS minute_work,
    if(s.replica = '', 0, p.usd_per_gpu_hour * s.fleet_gpu_count / 60) AS spend_usd,
    if(s.total_work > 0, spend_usd * (work / s.total_work), 0) AS cost_usd,
    multiIf(s.task_id = '', 'unattributed',
            task_outcome IN ('failure', 'abandoned'), 'failed_task_waste',
            task_outcome != 'success', 'pending',
            s.status != 'error' AND s.partial = 0 AND s.task_attempt = s.ok_attempt, 'useful',
            'retry_waste') AS category,
    multiIf(s.task_id = '', '',
            s.has_root AND s.root_outcome IN ('success', 'failure', 'abandoned'), s.root_outcome,
            s.has_root, 'unknown',
            s.task_last_end + toIntervalSecond(abandon_timeout_s) <= we, 'abandoned',
            'unknown') AS task_outcome,
    toDateTime(now(), 'UTC') AS computed_at
FROM sized AS s
ASOF LEFT JOIN gpu_prices AS p ON p.gpu_type = s.fleet_gpu_type AND s.minute >= p.valid_from;

-- 3. Spend and metrics per replica-minute of [ws, we): a replica is up in a minute when it
-- produced metric points (any exporter-layout metric table) or a call with work overlapped it
-- (call_costs). GPU type, count and price as in job_call_costs (priced = 0: no price valid).
-- Counter increases: per series, the last (max) value of the minute minus the previous point's
-- (a drop = counter reset: the new value is the increase), looking back 10 minutes.
CREATE VIEW IF NOT EXISTS job_replica_spend AS
WITH
    {ws:DateTime} AS ws,
    {we:DateTime} AS we,
    (SELECT argMax(default_gpu_type, synced_at) FROM cost_settings) AS default_gpu_type,
    (SELECT argMax(default_gpu_count, synced_at) FROM cost_settings) AS default_gpu_count,
    metric_points AS (
        SELECT ResourceAttributes['service.instance.id'] AS replica, toStartOfMinute(TimeUnix) AS minute,
               MetricName AS name, Value AS value
        FROM otel_metrics_gauge
        WHERE TimeUnix >= ws AND TimeUnix < we AND ResourceAttributes['service.instance.id'] != ''
        UNION ALL
        SELECT ResourceAttributes['service.instance.id'], toStartOfMinute(TimeUnix), '', 0
        FROM otel_metrics_sum
        WHERE TimeUnix >= ws AND TimeUnix < we AND ResourceAttributes['service.instance.id'] != ''
        UNION ALL
        SELECT ResourceAttributes['service.instance.id'], toStartOfMinute(TimeUnix), '', 0
        FROM otel_metrics_histogram
        WHERE TimeUnix >= ws AND TimeUnix < we AND ResourceAttributes['service.instance.id'] != ''
        UNION ALL
        SELECT replica, minute, '#work', 0
        FROM call_costs
        WHERE minute >= ws AND minute < we AND replica != '' AND work > 0
    ),
    gauges AS (
        SELECT replica, minute,
               countIf(name NOT IN ('#work')) > 0 AS up_metrics,
               countIf(name = '#work') > 0 AS up_spans,
               avgIf(value, name = 'vllm:num_requests_waiting') AS queue_waiting_avg_,
               maxIf(value, name = 'vllm:num_requests_waiting') AS queue_waiting_max_,
               countIf(name = 'vllm:num_requests_waiting') AS n_waiting,
               avgIf(value, name = 'vllm:num_requests_running') AS running_avg_,
               countIf(name = 'vllm:num_requests_running') AS n_running,
               avgIf(value, name IN ('vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc')) AS kv_avg_,
               maxIf(value, name IN ('vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc')) AS kv_max_,
               countIf(name IN ('vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc')) AS n_kv
        FROM metric_points
        GROUP BY replica, minute
    ),
    counter_last AS (
        SELECT ResourceAttributes['service.instance.id'] AS replica, MetricName AS name, Attributes AS series,
               toStartOfMinute(TimeUnix) AS minute, max(Value) AS last_value
        FROM otel_metrics_sum
        WHERE TimeUnix >= ws - INTERVAL 10 MINUTE AND TimeUnix < we
          AND MetricName IN ('vllm:prompt_tokens', 'vllm:generation_tokens')
          AND ResourceAttributes['service.instance.id'] != ''
        GROUP BY replica, name, series, minute
    ),
    counter_delta AS (
        SELECT replica, minute,
               sumIf(increase, name = 'vllm:prompt_tokens') AS prompt_increase,
               sumIf(increase, name = 'vllm:generation_tokens') AS generation_increase,
               countIf(name = 'vllm:prompt_tokens') AS n_prompt,
               countIf(name = 'vllm:generation_tokens') AS n_generation
        FROM (
            SELECT replica, name, minute,
                   lagInFrame(last_value, 1, -1) OVER w AS prev_value,
                   prev_value >= 0 AS has_prev,
                   if(last_value >= prev_value, last_value - prev_value, last_value) AS increase
            FROM counter_last
            WINDOW w AS (PARTITION BY replica, name, series ORDER BY minute ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)
        )
        WHERE minute >= ws AND has_prev
        GROUP BY replica, minute
    ),
    sized AS (
        SELECT g.*, toUInt8(f.f_replica != '') AS in_fleet,
               if(in_fleet, f.f_gpu_type, default_gpu_type) AS fleet_gpu_type,
               if(in_fleet, f.f_gpu_count, default_gpu_count) AS fleet_gpu_count
        FROM gauges AS g
        LEFT JOIN (SELECT replica AS f_replica, gpu_type AS f_gpu_type, gpu_count AS f_gpu_count FROM replicas) AS f
            ON f.f_replica = g.replica
    )
SELECT
    s.replica AS replica, s.minute AS minute, s.fleet_gpu_type AS gpu_type, toUInt16(s.fleet_gpu_count) AS gpu_count,
    p.usd_per_gpu_hour AS usd_per_gpu_hour, s.in_fleet AS in_fleet, toUInt8(p.gpu_type != '') AS priced,
    toUInt8(s.up_metrics) AS up_metrics, toUInt8(s.up_spans) AS up_spans,
    p.usd_per_gpu_hour * s.fleet_gpu_count / 60 AS spend_usd,
    if(s.n_waiting > 0, s.queue_waiting_avg_, NULL) AS queue_waiting_avg,
    if(s.n_waiting > 0, s.queue_waiting_max_, NULL) AS queue_waiting_max,
    if(s.n_running > 0, s.running_avg_, NULL) AS running_avg,
    if(s.n_kv > 0, s.kv_avg_, NULL) AS kv_usage_avg,
    if(s.n_kv > 0, s.kv_max_, NULL) AS kv_usage_max,
    if(d.n_prompt > 0, d.prompt_increase, NULL) AS counter_prompt_tokens,
    if(d.n_generation > 0, d.generation_increase, NULL) AS counter_generation_tokens
FROM sized AS s
ASOF LEFT JOIN gpu_prices AS p ON p.gpu_type = s.fleet_gpu_type AND s.minute >= p.valid_from
LEFT JOIN counter_delta AS d ON d.replica = s.replica AND d.minute = s.minute;

-- 4. replica_minutes rows of [ws, we): spend from job_replica_spend, allocation summed from the
-- call_costs view (the rows readers see), idle = spend - allocated (floored at 0 against float
-- rounding), tokens and latency quantiles of the calls that started in the minute (engine
-- evidence for latencies), token_gap = engine counters - span tokens.
CREATE VIEW IF NOT EXISTS job_replica_minutes AS
WITH
    {ws:DateTime} AS ws,
    {we:DateTime} AS we,
    alloc AS (
        SELECT replica, minute,
               sum(cost_usd) AS allocated,
               sumIf(cost_usd, category = 'unattributed') AS unattributed,
               count() AS calls_active,
               sum(requests) AS n_requests,
               sum(prompt_tokens) AS p_tokens,
               sum(cached_tokens) AS c_tokens,
               sum(output_tokens) AS o_tokens,
               sum(work) AS minute_work,
               quantilesExactIf(0.5, 0.9, 0.99)(ttft_s, first_piece = 1 AND call_source = 'engine' AND ttft_s IS NOT NULL) AS ttft_q,
               quantilesExactIf(0.5, 0.99)(if(output_tokens > 1 AND ttft_s IS NOT NULL, (e2e_s - ttft_s) / (output_tokens - 1), nan),
                                           first_piece = 1 AND call_source = 'engine' AND output_tokens > 1 AND ttft_s IS NOT NULL) AS itl_q,
               quantilesExactIf(0.5, 0.9, 0.99)(e2e_s, first_piece = 1 AND call_source = 'engine') AS e2e_q,
               countIf(first_piece = 1 AND call_source = 'engine' AND ttft_s IS NOT NULL) AS n_ttft,
               countIf(first_piece = 1 AND call_source = 'engine' AND output_tokens > 1 AND ttft_s IS NOT NULL) AS n_itl,
               countIf(first_piece = 1 AND call_source = 'engine') AS n_e2e
        FROM call_costs
        WHERE minute >= ws AND minute < we AND replica != ''
        GROUP BY replica, minute
    )
SELECT
    s.minute AS minute, s.replica AS replica, s.gpu_type AS gpu_type, s.gpu_count AS gpu_count,
    s.usd_per_gpu_hour AS usd_per_gpu_hour, s.in_fleet AS in_fleet, s.priced AS priced,
    s.up_metrics AS up_metrics, s.up_spans AS up_spans,
    s.spend_usd AS spend_usd,
    a.allocated AS allocated_usd,
    greatest(s.spend_usd - a.allocated, 0) AS idle_usd,
    a.unattributed AS unattributed_usd,
    toUInt32(a.calls_active) AS calls_active,
    toUInt32(a.n_requests) AS requests,
    toUInt64(a.p_tokens) AS prompt_tokens,
    toUInt64(a.c_tokens) AS cached_tokens,
    toUInt64(a.o_tokens) AS output_tokens,
    a.minute_work AS work,
    if(a.n_ttft > 0, a.ttft_q[1], NULL) AS ttft_p50_s,
    if(a.n_ttft > 0, a.ttft_q[2], NULL) AS ttft_p90_s,
    if(a.n_ttft > 0, a.ttft_q[3], NULL) AS ttft_p99_s,
    if(a.n_itl > 0, a.itl_q[1], NULL) AS itl_p50_s,
    if(a.n_itl > 0, a.itl_q[2], NULL) AS itl_p99_s,
    if(a.n_e2e > 0, a.e2e_q[1], NULL) AS e2e_p50_s,
    if(a.n_e2e > 0, a.e2e_q[2], NULL) AS e2e_p90_s,
    if(a.n_e2e > 0, a.e2e_q[3], NULL) AS e2e_p99_s,
    s.queue_waiting_avg AS queue_waiting_avg,
    s.queue_waiting_max AS queue_waiting_max,
    s.running_avg AS running_avg,
    s.kv_usage_avg AS kv_usage_avg,
    s.kv_usage_max AS kv_usage_max,
    s.counter_prompt_tokens AS counter_prompt_tokens,
    s.counter_generation_tokens AS counter_generation_tokens,
    if(s.counter_prompt_tokens IS NULL AND s.counter_generation_tokens IS NULL, NULL,
       ifNull(s.counter_prompt_tokens, 0) + ifNull(s.counter_generation_tokens, 0)
       - toFloat64(a.p_tokens + a.o_tokens)) AS token_gap,
    toDateTime(now(), 'UTC') AS computed_at
FROM job_replica_spend(ws = {ws:DateTime}, we = {we:DateTime}) AS s
LEFT JOIN alloc AS a ON a.replica = s.replica AND a.minute = s.minute;

-- 5. tasks rows ending in [ws, we): tasks whose root span ended in the window, and tasks whose
-- root never came and whose last call ended abandon_timeout_s before a minute of the window
-- (abandoned; end = last call end + timeout). A task without root and still inside its timeout
-- is in progress: no row yet (its calls' cost shows as 'pending' in call_costs).
-- Costs from the call_costs view (every piece of the task's calls, task_lookback_s back), with
-- the final outcome: same category rule as job_call_costs. SLO budgets from the root span, else
-- task_slos; ttft_s = worst TTFT among the accepted (useful) calls; e2e_s = end - start.
CREATE VIEW IF NOT EXISTS job_tasks AS
WITH
    {ws:DateTime} AS ws,
    {we:DateTime} AS we,
    (SELECT argMax(abandon_timeout_s, synced_at) FROM cost_settings) AS abandon_timeout_s,
    (SELECT argMax(task_lookback_s, synced_at) FROM cost_settings) AS task_lookback_s,
    (SELECT argMax(max_call_s, synced_at) FROM cost_settings) AS max_call_s,
    -- root spans that ended in the window (the exporter's ORDER BY makes this a range read)
    roots AS (
        SELECT task_id AS r_task_id,
               argMax(tuple(task_type, tenant_id, tenant_priority, outcome, start_time, end_time,
                            slo_ttft_ms, slo_e2e_ms), end_time) AS r
        FROM task_spans
        WHERE end_time >= ws AND end_time < we
        GROUP BY task_id
    ),
    -- a rootless task is abandoned abandon_timeout_s after its last call: only calls ending in
    -- [ws - timeout - max_call_s, we) can decide that for this window
    recent_ends AS (
        SELECT task_id AS re_task_id, max(end_time) AS re_last_end
        FROM call_costs
        WHERE minute >= ws - toIntervalSecond(abandon_timeout_s + max_call_s) AND minute < we AND task_id != ''
        GROUP BY task_id
        HAVING re_last_end + toIntervalSecond(abandon_timeout_s) >= ws
           AND re_last_end + toIntervalSecond(abandon_timeout_s) < we
    ),
    rootless AS (
        SELECT re_task_id AS rl_task_id FROM recent_ends
        WHERE re_task_id NOT IN (
            SELECT task_id FROM task_spans
            WHERE end_time >= ws - toIntervalSecond(task_lookback_s) AND end_time < we + toIntervalSecond(task_lookback_s)
              AND task_id IN (SELECT re_task_id FROM recent_ends))
    ),
    -- the ended tasks' pieces: a task with a root span started at its root's start, so those
    -- are read from the earliest such start (at most task_lookback_s back); rootless ones from
    -- task_lookback_s back
    rooted_floor AS (
        SELECT greatest(ws - toIntervalSecond(task_lookback_s),
                        -- 5 minutes of slack for clock skew between the client's and the engines' hosts
                        toStartOfMinute(toDateTime(ifNull(min(r.5), toDateTime64(ws, 9, 'UTC')), 'UTC')) - INTERVAL 5 MINUTE) AS floor_minute
        FROM roots
    ),
    ended_pieces AS (
        SELECT call_id, task_id, task_type, tenant_id, model, task_step, task_attempt, status, partial,
               start_time, end_time, ttft_s, cost_usd, prompt_tokens, cached_tokens, output_tokens
        FROM call_costs
        WHERE minute >= (SELECT floor_minute FROM rooted_floor) AND minute < we AND task_id != ''
          AND task_id IN (SELECT r_task_id FROM roots)
        UNION ALL
        SELECT call_id, task_id, task_type, tenant_id, model, task_step, task_attempt, status, partial,
               start_time, end_time, ttft_s, cost_usd, prompt_tokens, cached_tokens, output_tokens
        FROM call_costs
        WHERE minute >= ws - toIntervalSecond(task_lookback_s) AND minute < we AND task_id != ''
          AND task_id IN (SELECT rl_task_id FROM rootless)
    ),
    calls AS (
        SELECT call_id, task_id, any(task_type) AS c_type, any(tenant_id) AS c_tenant, any(model) AS c_model,
               any(task_step) AS c_step, any(task_attempt) AS c_attempt, any(status) AS c_status,
               max(partial) AS c_partial, min(start_time) AS c_start, max(end_time) AS c_end,
               any(ttft_s) AS c_ttft, sum(cost_usd) AS c_cost,
               sum(prompt_tokens) AS c_p_tokens, sum(cached_tokens) AS c_c_tokens, sum(output_tokens) AS c_o_tokens
        FROM ended_pieces
        GROUP BY call_id, task_id
    ),
    calls_ctx AS (
        SELECT *,
               max(c_end) OVER (PARTITION BY task_id) AS last_end,
               maxIf(c_attempt, c_status != 'error' AND c_partial = 0) OVER (PARTITION BY task_id, c_step) AS ok_attempt
        FROM calls
    ),
    ended_roots AS (SELECT * FROM roots),
    joined AS (
        SELECT
            if(c.task_id != '', c.task_id, rt.r_task_id) AS t_id,
            rt.r_task_id != '' AS has_root,
            multiIf(has_root AND rt.r.4 IN ('success', 'failure', 'abandoned'), rt.r.4,
                    has_root, 'unknown', 'abandoned') AS outcome,
            if(has_root, rt.r.6, toDateTime64(c.last_end + toIntervalSecond(abandon_timeout_s), 9, 'UTC')) AS t_end,
            c.call_id AS call_id, c.c_type AS c_type, c.c_tenant AS c_tenant, c.c_model AS c_model,
            c.c_step AS c_step, c.c_attempt AS c_attempt, c.c_status AS c_status, c.c_partial AS c_partial,
            c.c_start AS c_start, c.c_ttft AS c_ttft, c.c_cost AS c_cost,
            c.c_p_tokens AS c_p_tokens, c.c_c_tokens AS c_c_tokens, c.c_o_tokens AS c_o_tokens,
            c.ok_attempt AS ok_attempt,
            rt.r.1 AS r_type, rt.r.2 AS r_tenant, rt.r.3 AS r_priority, rt.r.5 AS r_start,
            rt.r.7 AS r_slo_ttft, rt.r.8 AS r_slo_e2e,
            multiIf(outcome IN ('failure', 'abandoned'), 'failed_task_waste',
                    outcome != 'success', 'pending',
                    c.c_status != 'error' AND c.c_partial = 0 AND c.c_attempt = c.ok_attempt, 'useful',
                    'retry_waste') AS category
        FROM calls_ctx AS c
        FULL OUTER JOIN ended_roots AS rt ON rt.r_task_id = c.task_id
        WHERE t_end >= ws AND t_end < we
    ),
    per_task AS (
        SELECT t_id,
               any(has_root) AS t_has_root, any(outcome) AS t_outcome, any(t_end) AS end_time_,
               any(r_type) AS t_r_type, any(r_tenant) AS t_r_tenant, any(r_priority) AS t_r_priority,
               any(r_start) AS t_r_start, any(r_slo_ttft) AS t_r_slo_ttft, any(r_slo_e2e) AS t_r_slo_e2e,
               anyIf(c_type, call_id != '') AS t_c_type, anyIf(c_tenant, call_id != '') AS t_c_tenant,
               topKIf(1)(c_model, call_id != '') AS t_models,
               minIf(c_start, call_id != '') AS t_c_start,
               uniqExactIf(c_step, call_id != '') AS n_steps,
               uniqExactIf(c_step, c_attempt, call_id != '') AS n_attempts,
               countIf(call_id != '') AS n_calls,
               sum(c_p_tokens) AS t_p_tokens, sum(c_c_tokens) AS t_c_tokens, sum(c_o_tokens) AS t_o_tokens,
               sum(c_cost) AS t_cost,
               sumIf(c_cost, category = 'useful') AS t_useful,
               sumIf(c_cost, category = 'retry_waste') AS t_retry_waste,
               sumIf(c_cost, category = 'failed_task_waste') AS t_failed_waste,
               sumIf(c_cost, category = 'pending') AS t_pending,
               countIf(call_id != '' AND c_partial = 1) AS n_partial,
               sumIf(c_o_tokens, c_partial = 1) AS t_partial_tokens,
               sumIf(c_cost, c_partial = 1) AS t_partial_cost,
               maxIf(c_ttft, category = 'useful' AND c_ttft IS NOT NULL) AS worst_ttft,
               countIf(category = 'useful' AND c_ttft IS NOT NULL) AS n_ttft
        FROM joined
        GROUP BY t_id
    ),
    slos AS (SELECT task_type AS s_type, argMax(ttft_ms, synced_at) AS s_ttft, argMax(e2e_ms, synced_at) AS s_e2e
             FROM task_slos GROUP BY task_type)
SELECT
    toStartOfMinute(end_time) AS minute,
    pt.t_id AS task_id,
    if(pt.t_r_type != '', pt.t_r_type, pt.t_c_type) AS task_type,
    if(pt.t_r_tenant != '', pt.t_r_tenant, pt.t_c_tenant) AS tenant_id,
    pt.t_r_priority AS tenant_priority,
    if(length(pt.t_models) > 0, pt.t_models[1], '') AS model,
    pt.t_outcome AS outcome,
    toUInt8(pt.t_has_root) AS has_root,
    if(pt.t_has_root, pt.t_r_start, pt.t_c_start) AS start_time,
    pt.end_time_ AS end_time,
    toUInt16(pt.n_steps) AS steps,
    toUInt16(pt.n_attempts) AS attempts,
    toUInt32(pt.n_calls) AS calls,
    toUInt64(pt.t_p_tokens) AS prompt_tokens,
    toUInt64(pt.t_c_tokens) AS cached_tokens,
    toUInt64(pt.t_o_tokens) AS output_tokens,
    pt.t_cost AS cost_usd,
    pt.t_useful AS useful_usd,
    pt.t_retry_waste AS retry_waste_usd,
    pt.t_failed_waste AS failed_task_waste_usd,
    pt.t_pending AS pending_usd,
    toUInt32(pt.n_partial) AS partial_calls,
    toUInt64(pt.t_partial_tokens) AS partial_tokens,
    pt.t_partial_cost AS partial_usd,
    if(pt.n_ttft > 0, pt.worst_ttft, NULL) AS ttft_s,
    greatest((toUnixTimestamp64Nano(end_time) - toUnixTimestamp64Nano(start_time)) / 1e9, 0) AS e2e_s,
    if(pt.t_r_slo_ttft IS NOT NULL, pt.t_r_slo_ttft, sl.s_ttft) AS slo_ttft_ms,
    if(pt.t_r_slo_e2e IS NOT NULL, pt.t_r_slo_e2e, sl.s_e2e) AS slo_e2e_ms,
    toUInt8(pt.t_outcome = 'success'
            AND (slo_ttft_ms IS NULL OR ttft_s IS NULL OR ttft_s * 1000 <= slo_ttft_ms)
            AND (slo_e2e_ms IS NULL OR e2e_s * 1000 <= slo_e2e_ms)) AS slo_met,
    toDateTime(now(), 'UTC') AS computed_at
FROM per_task AS pt
LEFT JOIN slos AS sl ON sl.s_type = if(pt.t_r_type != '', pt.t_r_type, pt.t_c_type);
