-- The cost jobs' views planned in less time: the same rows as 0064's, with each
-- heavy source expanded fewer times per statement. ClickHouse inlines a CTE or a view at every
-- reference and analyses each copy, so a source referenced twice is planned (and read) twice; the
-- explicit runner plans every statement of every chunk anew. Changes (schema/jobs/README.md):
--   * job_resolved_calls: the engine counters' hit rates once (per replica: the minutes' rates as
--     arrays, looked up by minute, and the window's rate), not once per join;
--   * job_reconciliation: the counters and the per-minute call pieces joined once by a FULL OUTER
--     JOIN (both are grouped by replica and minute), not through a UNION DISTINCT of their keys
--     that expanded both again;
--   * job_replica_spend: the gauges and the minutes with work joined once by a FULL OUTER JOIN, then
--     the reserved minutes, not a UNION DISTINCT of the three key sets joined to the gauges again;
--   * job_tasks: the ended tasks' pieces in one read of call_costs (rooted and rootless tasks are
--     disjoint: a rootless task has no root span in the range roots reads).

CREATE OR REPLACE VIEW job_resolved_calls AS
WITH
    {ws:DateTime} AS ws,
    {we:DateTime} AS we,
    (SELECT argMax(w_prefill, synced_at) FROM cost_settings) AS w_prefill,
    (SELECT argMax(w_decode, synced_at) FROM cost_settings) AS w_decode,
    (SELECT argMax(max_call_s, synced_at) FROM cost_settings) AS max_call_s,
    ws - toIntervalSecond(max_call_s + 60) AS lo,
    -- prefix-cache hit rates from the engine counters: per replica-minute, and over the window
    hits AS (SELECT replica AS h_replica, minute AS h_minute, hit_rate AS h_rate, prompt_increase AS h_prompt
             FROM job_engine_counters(ws = {ws:DateTime}, we = {we:DateTime}) WHERE hit_rate IS NOT NULL),
    -- per replica: its minutes' rates (looked up by minute below) and the rate over the window, so
    -- the counters are expanded once
    replica_hits AS (SELECT h_replica AS wh_replica, groupArray(h_minute) AS wh_minutes, groupArray(h_rate) AS wh_rates,
                            sum(h_rate * h_prompt) / nullIf(sum(h_prompt), 0) AS wh_rate
                     FROM hits GROUP BY h_replica),
    gw_requests AS (
        SELECT trace_id, span_id, parent_span_id FROM gateway_requests WHERE start_time >= lo AND start_time < we
    ),
    covered AS (
        SELECT c.trace_id AS cv_trace_id, g.span_id AS cv_request, c.ttft_s AS cv_ttft, c.error_class AS cv_class,
               c.model AS cv_model, c.finish_reason AS cv_finish
        FROM llm_calls AS c
        INNER JOIN gw_requests AS g ON g.trace_id = c.trace_id AND g.parent_span_id = c.span_id
        WHERE c.call_source = 'client' AND c.start_time >= lo AND c.start_time < we
    ),
    units AS (
        SELECT
            any(trace_id) AS u_trace_id,
            -- one 64-bit key per (trace, unit): hashing two strings once is cheaper than grouping by them
            cityHash64(trace_id, if(call_source = 'engine' AND parent_span_id != '', parent_span_id, span_id)) AS unit_key,
            countIf(call_source = 'engine') AS n_engine,
            minIf(span_id, call_source = 'engine') AS e_id,
            anyIf(replica, call_source = 'engine') AS e_replica,
            anyIf(gpu_type, call_source = 'engine') AS e_gpu_type,
            anyIf(model, call_source = 'engine' AND model != '' AND model_scraped = 0) AS e_model,
            anyIf(model, call_source = 'engine' AND model_scraped = 1) AS e_model_scraped,
            maxIf(prompt_tokens, call_source = 'engine') AS e_prompt,
            maxIf(cached_tokens, call_source = 'engine') AS e_cached,
            sumIf(ifNull(output_tokens, 0), call_source = 'engine') AS e_output,
            countIf(call_source = 'engine' AND output_tokens IS NOT NULL) AS e_outputs,
            minIf(ttft_s, call_source = 'engine') AS e_ttft,
            maxIf(e2e_s, call_source = 'engine') AS e_e2e,
            anyIf(finish_reason, call_source = 'engine' AND finish_reason != '') AS e_finish,
            minIf(start_time, call_source = 'engine') AS e_start,
            maxIf(end_time, call_source = 'engine') AS e_end,
            countIf(call_source = 'gateway') AS n_gateway,
            anyIf(tuple(span_id, replica, model, prompt_tokens, cached_tokens, output_tokens, ttft_s, e2e_s,
                        finish_reason, start_time, end_time), call_source = 'gateway') AS g,
            anyIf(parent_span_id, call_source = 'gateway') AS g_parent,
            countIf(call_source = 'client') AS n_client,
            anyIf(tuple(span_id, model, prompt_tokens, cached_tokens, output_tokens, ttft_s, e2e_s,
                        finish_reason, start_time, end_time), call_source = 'client') AS c,
            -- task context: gateway > client > engine
            argMax(tuple(task_id, task_type, tenant_id, task_step, ifNull(task_attempt, 0), ifNull(task_call, 0)),
                   multiIf(call_source = 'gateway', 3, call_source = 'client', 2, 1)) AS ctx,
            max(status = 'error') AS any_error,
            max(partial) AS any_partial,
            argMax(error_type, error_type != '') AS first_error_type,
            argMax(error_class, (error_class != '', multiIf(call_source = 'gateway', 3, call_source = 'client', 2, 1)))
                AS own_error_class
        FROM llm_calls
        WHERE start_time >= lo AND start_time < we
          AND NOT (call_source = 'client' AND (trace_id, span_id) IN (SELECT trace_id, parent_span_id FROM gw_requests))
        GROUP BY unit_key
    ),
    resolved AS (
        SELECT
            u.*, cv.cv_ttft AS cv_ttft, cv.cv_class AS cv_class, cv.cv_model AS cv_model, cv.cv_finish AS cv_finish,
            multiIf(n_engine > 0, 'engine', n_gateway > 0, 'gateway', 'client') AS source,
            -- evidence times: engine > gateway > client
            multiIf(n_engine > 0, e_start, n_gateway > 0, g.10, c.9) AS t_start,
            multiIf(n_engine > 0, e_end, n_gateway > 0, g.11, c.10) AS t_end,
            coalesce(e_prompt, g.4, c.3) AS prompt_n,
            coalesce(e_cached, g.5, c.4) AS cached_n,
            if(e_outputs > 0, toUInt64(e_output), ifNull(coalesce(g.6, c.5), 0)) AS output_n,
            coalesce(e_ttft, g.7, c.6) AS evidence_ttft,
            multiIf(cv.cv_ttft IS NOT NULL, cv.cv_ttft, c.6 IS NOT NULL, c.6, g.7 IS NOT NULL, g.7, e_ttft) AS user_ttft,
            multiIf(cv.cv_ttft IS NOT NULL OR c.6 IS NOT NULL, 'client', g.7 IS NOT NULL, 'gateway',
                    e_ttft IS NOT NULL, 'engine', '') AS user_ttft_src
        FROM units AS u
        LEFT JOIN covered AS cv ON cv.cv_trace_id = u.u_trace_id AND cv.cv_request = u.g_parent
    ),
    estimated AS (
        SELECT r.*,
               multiIf(r.source = 'engine', r.e_replica, r.source = 'gateway', tupleElement(r.g, 2), '') AS replica_,
               toUInt32(ifNull(r.prompt_n, 0)) AS prompt_,
               indexOf(wh.wh_minutes, toStartOfMinute(r.t_start)) AS minute_hits,
               if(minute_hits > 0, wh.wh_rates[minute_hits], wh.wh_rate) AS est_rate,
               multiIf(r.cached_n IS NOT NULL, 'span', est_rate IS NOT NULL AND prompt_ > 0, 'estimate', '') AS cached_src,
               toUInt32(least(multiIf(cached_src = 'span', r.cached_n, cached_src = 'estimate', round(prompt_ * est_rate), 0),
                              prompt_)) AS cached_
        FROM resolved AS r
        LEFT JOIN replica_hits AS wh ON wh.wh_replica = replica_
    )
SELECT
    multiIf(source = 'engine', e_id, source = 'gateway', g.1, c.1) AS call_id,
    u_trace_id AS trace_id,
    source AS call_source,
    replica_ AS replica,
    if(source = 'engine', e_gpu_type, '') AS gpu_type,
    multiIf(e_model != '', e_model, g.3 != '', g.3, c.2 != '', c.2, ifNull(cv_model, '') != '', cv_model,
            e_model_scraped) AS model,
    ctx.1 AS task_id, ctx.2 AS task_type, ctx.3 AS tenant_id, ctx.4 AS task_step,
    toUInt16(ctx.5) AS task_attempt, toUInt16(ctx.6) AS task_call,
    prompt_ AS prompt_tokens,
    cached_ AS cached_tokens,
    cached_src AS cached_source,
    toUInt32(output_n) AS output_tokens,
    toUInt16(greatest(n_engine, 1)) AS choices,
    evidence_ttft AS ttft_s,
    user_ttft AS user_ttft_s,
    user_ttft_src AS user_ttft_source,
    multiIf(source = 'engine', e_e2e, source = 'gateway', g.8, c.7) AS e2e_s,
    if(any_error, 'error', 'ok') AS status,
    first_error_type AS error_type,
    -- a gateway attempt cut because the client timed out only saw a disconnect
    if(own_error_class = 'client_cancel' AND ifNull(cv_class, '') = 'timeout', 'timeout', own_error_class) AS error_class,
    multiIf(e_finish != '', e_finish, g.9 != '', g.9, c.8 != '', c.8, ifNull(cv_finish, '')) AS finish_reason,
    toUInt8(any_partial) AS partial,
    t_start AS start_time,
    t_end AS end_time,
    w_prefill * greatest(toInt64(prompt_tokens) - toInt64(cached_tokens), 0) + w_decode * output_tokens AS call_work
FROM estimated
WHERE t_start < we AND (t_end > ws OR t_start >= ws);

CREATE OR REPLACE VIEW job_reconciliation AS
WITH
    {ws:DateTime} AS ws,
    {we:DateTime} AS we,
    {run_id:UInt64} AS p_run_id,
    (SELECT argMax(w_prefill, synced_at) FROM cost_settings) AS w_prefill,
    (SELECT argMax(w_decode, synced_at) FROM cost_settings) AS w_decode,
    counters AS (SELECT * FROM job_engine_counters(ws = {ws:DateTime}, we = {we:DateTime})),
    calls AS (
        SELECT replica, start_time, end_time, ttft_s, prompt_tokens, output_tokens, call_work FROM resolved_calls_live
        WHERE p_run_id = 0 AND replica != ''
        UNION ALL
        SELECT replica, start_time, end_time, ttft_s, prompt_tokens, output_tokens, call_work FROM resolved_calls_runs
        WHERE run_id = p_run_id AND p_run_id != 0 AND replica != ''
    ),
    passes AS (
        SELECT c.replica AS replica, minute,
               toUnixTimestamp64Nano(c.start_time) AS s_ns,
               greatest(toUnixTimestamp64Nano(c.end_time), s_ns) AS e_ns,
               toInt64(toUnixTimestamp(minute)) * 1000000000 AS m_ns,
               e_ns - s_ns AS dur_ns,
               multiIf(dur_ns = 0, if(minute = toStartOfMinute(c.start_time), 1.0, 0.0),
                       greatest(least(e_ns, m_ns + 60000000000) - greatest(s_ns, m_ns), 0) / dur_ns) AS share,
               least(s_ns + toInt64(ifNull(c.ttft_s, 0) * 1e9), e_ns) AS ft_ns,
               toUnixTimestamp64Nano(k.covers_from) AS a_ns,
               toUnixTimestamp64Nano(k.covers_to) AS b_ns,
               k.replica != '' AS has_counters,
               if(has_counters AND ft_ns > a_ns AND ft_ns <= b_ns, c.prompt_tokens, 0) AS counted_prompt,
               if(NOT has_counters, 0,
                  c.output_tokens * if(e_ns > ft_ns, greatest(least(e_ns, b_ns) - greatest(ft_ns, a_ns), 0) / (e_ns - ft_ns),
                                       if(e_ns > a_ns AND e_ns <= b_ns, 1.0, 0.0))) AS counted_output,
               c.call_work * share AS piece_work
        FROM calls AS c
        ARRAY JOIN arrayMap(i -> toDateTime(toStartOfMinute(c.start_time), 'UTC') + i * 60,
                            range(toUInt64(dateDiff('minute', toStartOfMinute(c.start_time), toStartOfMinute(c.end_time)) + 2)))
            AS minute
        LEFT JOIN (SELECT replica, minute, covers_from, covers_to FROM counters) AS k
            ON k.replica = c.replica AND k.minute = minute
        WHERE minute >= ws AND minute < we
    ),
    per_minute AS (
        SELECT replica AS pm_replica, minute AS pm_minute, sum(piece_work) AS pm_work,
               sum(counted_prompt) AS pm_prompt, sum(counted_output) AS pm_output
        FROM passes GROUP BY replica, minute
    ),
    gauges AS (SELECT replica AS g_replica, minute AS g_minute, saturated AS g_saturated
               FROM job_replica_gauges(ws = {ws:DateTime}, we = {we:DateTime}))
SELECT
    if(ct.replica != '', ct.replica, pm.pm_replica) AS replica,
    toDateTime(if(ct.replica != '', ct.minute, pm.pm_minute), 'UTC') AS minute,
    ct.covers_from AS covers_from, ct.covers_to AS covers_to,
    if(ct.n_prompt > 0, ct.prompt_increase, NULL) AS counter_prompt_tokens,
    if(ct.n_generation > 0, ct.generation_increase, NULL) AS counter_generation_tokens,
    multiIf(ct.n_cached > 0, ct.cached_increase, ct.n_queries > 0, ct.hits_increase, NULL) AS counter_cached_tokens,
    ct.hit_rate AS hit_rate,
    if(ct.n_preemptions > 0, ct.preemptions_increase, NULL) AS preemptions,
    pm.pm_prompt + pm.pm_output AS counted_tokens,
    if(ct.n_prompt > 0, greatest(ct.prompt_increase - pm.pm_prompt, 0), 0) AS residual_prompt,
    if(ct.n_generation > 0, greatest(ct.generation_increase - pm.pm_output, 0), 0) AS residual_output,
    w_prefill * residual_prompt * (1 - ifNull(ct.hit_rate, 0)) + w_decode * residual_output AS gap_work,
    pm.pm_work AS span_work,
    span_work + gap_work AS total_work,
    toUInt8(g.g_saturated) AS saturated
-- each (replica, minute) with counters or call pieces once: both sides are grouped by it
FROM counters AS ct
FULL OUTER JOIN per_minute AS pm ON pm.pm_replica = ct.replica AND pm.pm_minute = ct.minute
LEFT JOIN gauges AS g ON g.g_replica = if(ct.replica != '', ct.replica, pm.pm_replica)
                    AND g.g_minute = if(ct.replica != '', ct.minute, pm.pm_minute);

CREATE OR REPLACE VIEW job_replica_spend AS
WITH
    {ws:DateTime} AS ws,
    {we:DateTime} AS we,
    (SELECT argMax(default_gpu_type, synced_at) FROM cost_settings) AS default_gpu_type,
    (SELECT argMax(default_gpu_count, synced_at) FROM cost_settings) AS default_gpu_count,
    gauges AS (SELECT * FROM job_replica_gauges(ws = {ws:DateTime}, we = {we:DateTime})),
    work_minutes AS (
        SELECT replica AS wm_replica, minute AS wm_minute FROM call_costs
        WHERE minute >= ws AND minute < we AND replica != '' AND work > 0
        GROUP BY replica, minute
    ),
    reserved_minutes AS (
        SELECT replica, minute FROM replicas
        ARRAY JOIN arrayMap(i -> ws + i * 60, range(toUInt64(dateDiff('minute', ws, we)))) AS minute
        WHERE billing = 'reserved'
    ),
    -- the gauges and the work minutes joined once (both grouped by replica and minute), then the
    -- reserved minutes; a key is a minute up by the gauges, with work, or reserved
    gauges_work AS (
        SELECT if(g.replica != '', g.replica, wm.wm_replica) AS gw_replica,
               toDateTime(if(g.replica != '', g.minute, wm.wm_minute), 'UTC') AS gw_minute,
               g.up_metrics AS up_metrics, toUInt8(wm.wm_replica != '') AS up_spans,
               g.queue_waiting_avg AS queue_waiting_avg, g.queue_waiting_max AS queue_waiting_max,
               g.running_avg AS running_avg, g.kv_usage_avg AS kv_usage_avg, g.kv_usage_max AS kv_usage_max,
               g.saturated AS saturated
        FROM gauges AS g
        FULL OUTER JOIN work_minutes AS wm ON wm.wm_replica = g.replica AND wm.wm_minute = g.minute
    ),
    keys AS (
        SELECT if(gw.gw_replica != '', gw.gw_replica, rs.replica) AS replica,
               toDateTime(if(gw.gw_replica != '', gw.gw_minute, rs.minute), 'UTC') AS minute,
               gw.up_metrics AS up_metrics, gw.up_spans AS up_spans,
               gw.queue_waiting_avg AS queue_waiting_avg, gw.queue_waiting_max AS queue_waiting_max,
               gw.running_avg AS running_avg, gw.kv_usage_avg AS kv_usage_avg, gw.kv_usage_max AS kv_usage_max,
               gw.saturated AS saturated
        FROM gauges_work AS gw
        FULL OUTER JOIN (SELECT DISTINCT replica, minute FROM reserved_minutes) AS rs
            ON rs.replica = gw.gw_replica AND rs.minute = gw.gw_minute
        WHERE gw.up_metrics = 1 OR gw.up_spans = 1 OR rs.replica != ''
    ),
    fleet AS (
        SELECT replica AS f_replica, gpu_type AS f_gpu_type, gpu_count AS f_gpu_count, billing AS f_billing FROM replicas
    ),
    price_arrays AS (
        SELECT gpu_type AS pa_type,
               arraySort(x -> x.1, groupArray((toInt64(toUnixTimestamp(valid_from)), usd_per_gpu_hour))) AS pa
        FROM gpu_prices GROUP BY gpu_type
    ),
    sized AS (
        SELECT k.replica AS replica, k.minute AS minute, toInt64(toUnixTimestamp(k.minute)) AS m_s,
               toUInt8(f.f_replica != '') AS in_fleet,
               if(in_fleet, f.f_gpu_type, default_gpu_type) AS fleet_gpu_type,
               if(in_fleet, f.f_gpu_count, default_gpu_count) AS fleet_gpu_count,
               if(in_fleet AND f.f_billing = 'reserved', 'reserved', 'on_demand') AS billing,
               k.up_metrics AS up_metrics, k.up_spans AS up_spans,
               k.queue_waiting_avg AS queue_waiting_avg, k.queue_waiting_max AS queue_waiting_max,
               k.running_avg AS running_avg, k.kv_usage_avg AS kv_usage_avg, k.kv_usage_max AS kv_usage_max,
               k.saturated AS saturated, pa.pa AS prices
        FROM keys AS k
        LEFT JOIN fleet AS f ON f.f_replica = k.replica
        LEFT JOIN price_arrays AS pa ON pa.pa_type = if(f.f_replica != '', f.f_gpu_type, default_gpu_type)
    )
SELECT
    replica, minute, fleet_gpu_type AS gpu_type, toUInt16(fleet_gpu_count) AS gpu_count,
    -- USD per GPU in this minute: each price segment's seconds inside it
    if(length(prices) = 0, 0,
       arraySum(arrayMap(i -> prices[i].2 * greatest(0,
           least(m_s + 60, if(i < length(prices), prices[i + 1].1, m_s + 60)) - greatest(m_s, prices[i].1)),
           arrayEnumerate(prices))) / 3600) AS usd_per_gpu_minute,
    usd_per_gpu_minute * 60 AS usd_per_gpu_hour,
    in_fleet, billing,
    toUInt8(arrayExists(x -> x.1 < m_s + 60, prices)) AS priced,
    toUInt8(up_metrics) AS up_metrics, up_spans, toUInt8(up_metrics OR up_spans) AS up,
    fleet_gpu_count * usd_per_gpu_minute AS spend_usd,
    queue_waiting_avg, queue_waiting_max, running_avg, kv_usage_avg, kv_usage_max, toUInt8(saturated) AS saturated
FROM sized;

CREATE OR REPLACE VIEW job_tasks AS
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
    -- one read of call_costs for both kinds (a rootless task has no root in roots' range)
    ended_pieces AS (
        SELECT call_id, task_id, task_type, tenant_id, model, task_step, task_call, task_attempt, status, partial,
               start_time, end_time, user_ttft_s, user_ttft_source, cost_usd, prompt_tokens, cached_tokens, output_tokens
        FROM call_costs
        WHERE minute >= ws - toIntervalSecond(task_lookback_s) AND minute < we AND task_id != ''
          AND ((minute >= (SELECT floor_minute FROM rooted_floor) AND task_id IN (SELECT r_task_id FROM roots))
               OR task_id IN (SELECT rl_task_id FROM rootless))
    ),
    calls AS (
        SELECT call_id, task_id, any(task_type) AS c_type, any(tenant_id) AS c_tenant, any(model) AS c_model,
               any(task_step) AS c_step, any(task_call) AS c_call, any(task_attempt) AS c_attempt,
               any(status) AS c_status, max(partial) AS c_partial, min(start_time) AS c_start, max(end_time) AS c_end,
               any(user_ttft_s) AS c_ttft, any(user_ttft_source) AS c_ttft_source, sum(cost_usd) AS c_cost,
               sum(prompt_tokens) AS c_p_tokens, sum(cached_tokens) AS c_c_tokens, sum(output_tokens) AS c_o_tokens
        FROM ended_pieces
        GROUP BY call_id, task_id
    ),
    calls_ctx AS (
        SELECT *,
               max(c_end) OVER (PARTITION BY task_id) AS last_end,
               maxIf(c_attempt, c_status != 'error' AND c_partial = 0) OVER (PARTITION BY task_id, c_step, c_call) AS ok_attempt
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
            c.c_step AS c_step, c.c_call AS c_call, c.c_attempt AS c_attempt, c.c_status AS c_status,
            c.c_partial AS c_partial, c.c_start AS c_start, c.c_ttft AS c_ttft, c.c_ttft_source AS c_ttft_source,
            c.c_cost AS c_cost,
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
               uniqExactIf(c_step, c_call, call_id != '') AS n_step_calls,
               uniqExactIf(c_step, c_call, c_attempt, call_id != '') AS n_attempts,
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
               argMaxIf(c_ttft_source, c_ttft, category = 'useful' AND c_ttft IS NOT NULL) AS worst_ttft_source,
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
    toUInt16(pt.n_step_calls) AS step_calls,
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
    if(pt.n_ttft > 0, pt.worst_ttft_source, '') AS ttft_source,
    greatest((toUnixTimestamp64Nano(end_time) - toUnixTimestamp64Nano(start_time)) / 1e9, 0) AS e2e_s,
    if(pt.t_r_slo_ttft IS NOT NULL, pt.t_r_slo_ttft, sl.s_ttft) AS slo_ttft_ms,
    if(pt.t_r_slo_e2e IS NOT NULL, pt.t_r_slo_e2e, sl.s_e2e) AS slo_e2e_ms,
    toUInt8(pt.t_outcome = 'success'
            AND (slo_ttft_ms IS NULL OR ttft_s IS NULL OR ttft_s * 1000 <= slo_ttft_ms)
            AND (slo_e2e_ms IS NULL OR e2e_s * 1000 <= slo_e2e_ms)) AS slo_met,
    toDateTime(now(), 'UTC') AS computed_at
FROM per_task AS pt
LEFT JOIN slos AS sl ON sl.s_type = if(pt.t_r_type != '', pt.t_r_type, pt.t_c_type);
