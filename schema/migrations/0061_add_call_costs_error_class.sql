-- Carry llm_calls.error_class (0060) into the resolved calls and call_costs: the tables gain the
-- column right after error_type (the explicit runner inserts by position), and the two job views
-- of 0013 are re-created to fill it (otherwise unchanged).
-- A unit's class: its gateway row's, else its client row's, else its engine row's, among the rows
-- that failed; a gateway attempt cut because the client timed out (the gateway saw a disconnect:
-- client_cancel) takes 'timeout' from the client attempt above its request (gateway_requests).
ALTER TABLE resolved_calls_live ADD COLUMN IF NOT EXISTS error_class LowCardinality(String) AFTER error_type;
ALTER TABLE resolved_calls_runs ADD COLUMN IF NOT EXISTS error_class LowCardinality(String) AFTER error_type;
ALTER TABLE call_costs_history ADD COLUMN IF NOT EXISTS error_class LowCardinality(String)
    COMMENT ''''' | client_error | client_cancel | upstream_error | timeout | rejected (llm_calls.error_class of the call)'
    AFTER error_type;
ALTER TABLE call_costs_live ADD COLUMN IF NOT EXISTS error_class LowCardinality(String)
    COMMENT ''''' | client_error | client_cancel | upstream_error | timeout | rejected (llm_calls.error_class of the call)'
    AFTER error_type;

-- The readers' view expands `*` when created: re-create it (0014's definition) to show the column.
CREATE OR REPLACE VIEW call_costs AS
SELECT * FROM call_costs_history WHERE minute < (SELECT max(watermark) FROM cost_watermark)
UNION ALL
SELECT * FROM call_costs_live WHERE minute >= (SELECT max(watermark) FROM cost_watermark);

CREATE OR REPLACE VIEW job_resolved_calls AS
WITH
    {ws:DateTime} AS ws,
    {we:DateTime} AS we,
    (SELECT argMax(w_prefill, synced_at) FROM cost_settings) AS w_prefill,
    (SELECT argMax(w_decode, synced_at) FROM cost_settings) AS w_decode,
    (SELECT argMax(max_call_s, synced_at) FROM cost_settings) AS max_call_s,
    -- gateway request spans whose client attempt timed out
    client_timeouts AS (
        SELECT trace_id, span_id FROM gateway_requests
        WHERE start_time >= ws - toIntervalSecond(max_call_s + 60) AND start_time < we
          AND (trace_id, parent_span_id) IN (
              SELECT trace_id, span_id FROM llm_calls
              WHERE call_source = 'client' AND error_class = 'timeout'
                AND start_time >= ws - toIntervalSecond(max_call_s + 60) AND start_time < we)
    ),
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
            argMax(error_type, error_type != '') AS first_error_type,
            argMax(if(call_source = 'gateway' AND error_class = 'client_cancel'
                          AND (trace_id, parent_span_id) IN client_timeouts, 'timeout', error_class),
                   (error_class != '', multiIf(call_source = 'gateway', 3, call_source = 'client', 2, 1))) AS unit_error_class
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
    if(any_error, 'error', 'ok') AS status, first_error_type AS error_type,
    unit_error_class AS error_class, ev.11 AS finish_reason,
    toUInt8(any_partial) AS partial, ev.12 AS start_time, ev.13 AS end_time,
    w_prefill * greatest(toInt64(ev.6) - toInt64(ev.7), 0) + w_decode * ev.8 AS call_work
FROM units
WHERE ev.12 < we AND (ev.13 > ws OR ev.12 >= ws);

-- The resolved calls of a run are materialized once (resolution is the costliest step), then
-- read by job_call_costs: the periodic chain replaces resolved_calls_live on every cycle
-- (run_id 0); the explicit runner writes its chunk into resolved_calls_runs under a fresh run_id

CREATE OR REPLACE VIEW job_call_costs AS
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
    s.status AS status, s.error_type AS error_type,
    s.error_class AS error_class, s.finish_reason AS finish_reason, s.partial AS partial,
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

-- A refreshable materialized view stores the column list of its query when created: restate the
-- queries (0014's, unchanged) of the three that write these tables so they carry the new column;
-- MODIFY QUERY keeps their schedule and DEPENDS ON chain.
ALTER TABLE cost_copy_call_costs_mv MODIFY QUERY
SELECT * FROM call_costs_live
WHERE minute >= (SELECT max(watermark) FROM cost_watermark)
  AND minute < (SELECT max(we) - toIntervalSecond(max(window_s) - 600) FROM job_clock)
  AND minute NOT IN (SELECT DISTINCT minute FROM call_costs_history
                     WHERE minute >= (SELECT max(watermark) FROM cost_watermark));

ALTER TABLE cost_resolved_calls_mv MODIFY QUERY
SELECT * FROM job_resolved_calls(ws = (SELECT max(ws) FROM job_clock), we = (SELECT max(we) FROM job_clock));

ALTER TABLE cost_call_costs_mv MODIFY QUERY
SELECT * FROM job_call_costs(ws = (SELECT max(ws) FROM job_clock), we = (SELECT max(we) FROM job_clock), run_id = 0);
