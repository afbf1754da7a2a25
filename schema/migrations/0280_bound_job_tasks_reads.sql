-- The tasks job reads only the granules that hold its tasks' call pieces. Before,
-- job_tasks read its ended tasks' pieces in one pass over call_costs from task_lookback_s (a day)
-- back: `(minute >= rooted floor AND task_id IN roots) OR task_id IN rootless`. The OR kept the
-- rooted tasks' floor out of the primary-key condition, and the task_id bloom filter passes every
-- granule for a set of thousands of ids (2,375 tasks of a 2-hour window at 1M calls: 1 - 0.99^2375),
-- so a 2-hour run read a day of pieces (~235k rows at 1M calls; 29 of 29 granules).
-- Now the two kinds are two reads, UNION ALL (the sets are disjoint: a rootless task has no root
-- span from task_lookback_s before the window to as long after it, and every root of `roots` ends
-- in the window): the rooted tasks' pieces from their earliest root start (less 5 minutes) on, a
-- primary-key range, and the rootless tasks' from task_lookback_s back, whose set is small (tasks
-- abandoned in the window), so the bloom filter skips most granules (12 of 29 read at 1M calls).
-- Same rows as 0180's view (tests/test_jobs_tasks_bounded.py); no other view changes.

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
    -- two reads of call_costs, one per kind (disjoint: a rootless task has no root in roots' range):
    -- the rooted tasks' pieces from their earliest root start on (a range of the primary key), the
    -- rootless tasks' from task_lookback_s back, where the few ids of the set let the task_id
    -- bloom filter skip the granules without them (thousands of ids in one set, as the rooted
    -- tasks are, pass every granule)
    ended_pieces AS (
        SELECT call_id, task_id, task_type, tenant_id, model, task_step, task_call, task_attempt, status, partial,
               start_time, end_time, user_ttft_s, user_ttft_source, cost_usd, prompt_tokens, cached_tokens, output_tokens
        FROM call_costs
        WHERE minute >= (SELECT floor_minute FROM rooted_floor) AND minute < we AND task_id != ''
          AND task_id IN (SELECT r_task_id FROM roots)
        UNION ALL
        SELECT call_id, task_id, task_type, tenant_id, model, task_step, task_call, task_attempt, status, partial,
               start_time, end_time, user_ttft_s, user_ttft_source, cost_usd, prompt_tokens, cached_tokens, output_tokens
        FROM call_costs
        WHERE minute >= ws - toIntervalSecond(task_lookback_s) AND minute < we AND task_id != ''
          AND task_id IN (SELECT rl_task_id FROM rootless)
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
