-- Period summary of the cost model (schema/jobs/README.md) over [start, end), for one or more
-- groupings at once: one row per (grouping, group). bys: any of '' (one row) | 'task_type' |
-- 'tenant' | 'model' | 'replica'. Filters: '' = all.
-- Spend is by minute (replica_minutes); categories by the minute the work ran (call_costs);
-- tasks belong to the period in which they ended (tasks.minute).
-- Exact mode (no filter, grouping '' or 'replica'): spend and idle are the replica-minutes' own.
-- Otherwise idle is shared among groups in proportion to their allocated cost, so groups add
-- up to the fleet's spend; a group's spend = its allocated + its idle share.
-- Each source is read once for every grouping: summed by the finest key (task type, tenant, model,
-- replica when asked), then spread over the groupings (ARRAY JOIN over bys); each CTE is
-- referenced once (ClickHouse inlines a CTE at every reference): the groups are the FULL JOIN of
-- the parts.
-- Whole hours the cost jobs rolled up (migration 1003, schema/jobs/run_cost_rollup.sql) are read
-- from the hourly rollups, [p_hs, p_re); the partial hours at the edges and every hour not rolled up
-- (the live window) from the raw tables: each minute from exactly one of them.
-- by 'waste' (unfiltered, with ''): also waste_breakdown's figures of [p_start, p_end) in the same pass:
-- rows (by_dim 'waste', grp = category) with the category's allocated cost, calls and tokens, one
-- (by_dim 'waste.partial', grp 'partial') with the partial pieces' in partial_usd / partial_requests
-- / partial_tokens, and down_usd (idle spend of reserved replicas while down) on the '' row; the pieces
-- are summed by the finest key and category then.
-- Optional sections (schema/queries sql_without), cut out by cost.period_summaries where they add
-- nothing, as ClickHouse would still parse, analyze and plan them: rollup (the reads of the hourly
-- rollups) when both spans are empty (e.g. every 1 h view ending now holds no whole hour);
-- replica_tasks (a task counts for every replica that ran one of its calls: a join of the period's
-- tasks with their calls) unless grouping 'replica' is asked.
-- by 'previous' (with the others): also the ungrouped row of the period of the same length just
-- before, [p_lo, p_start), read in the same pass (its own rollup span [q_hs, q_re), so an hour cut by
-- p_start is read raw on both sides); every source row belongs to one period (prev: minute < p_start).
WITH
    {start:DateTime} AS p_start,
    {end:DateTime} AS p_end,
    {bys:Array(String)} AS p_bys,
    -- the previous period [p_lo, p_start) when bys holds 'previous', else p_lo = p_start (empty)
    {read_start:DateTime} AS p_lo,
    arrayFilter(b -> b != 'previous', p_bys) AS p_cur_bys,
    has(p_bys, 'waste') AS p_waste,
    {model:String} AS f_model,
    {tenant:String} AS f_tenant,
    {task_type:String} AS f_task_type,
    (f_model = '' AND f_tenant = '' AND f_task_type = '') AS unfiltered,
    dateDiff('second', p_start, p_end) / 3600.0 AS hours,
    -- include: cost_rollup_params
    -- the same for the previous period (cost.rollup_span of [p_lo, p_start))
    {prev_rollup_start:DateTime} AS q_hs,
    {prev_rollup_end:DateTime} AS q_re,
    {prev_rollup_versions:Array(UInt64)} AS q_versions,
    fine AS (
        -- the pieces summed by the finest key first (a few hundred rows), then spread over the groupings
        SELECT prev, task_type, tenant_id, model, if(has(p_bys, 'replica') AND NOT prev, replica, '') AS rep,
            if(p_waste AND NOT prev, category, '') AS cat,
            sum(cost_usd) AS f_allocated_usd,
            sumIf(cost_usd, category = 'useful') AS f_useful_usd,
            sumIf(cost_usd, category = 'retry_waste') AS f_retry_waste_usd,
            sumIf(cost_usd, category = 'failed_task_waste') AS f_failed_task_waste_usd,
            sumIf(cost_usd, category = 'pending') AS f_pending_usd,
            sumIf(cost_usd, category = 'unattributed') AS f_unattributed_usd,
            sumIf(cost_usd, category = 'unspanned') AS f_unspanned_usd,
            sumIf(cached_tokens, cached_estimated = 1) AS f_cached_estimated_tokens,
            sumIf(cost_usd, partial = 1) AS f_partial_usd,
            sumIf(output_tokens, partial = 1) AS f_partial_tokens,
            sumIf(requests, partial = 1) AS f_partial_requests,
            sum(requests) AS f_requests,
            sum(prompt_tokens) AS f_prompt_tokens,
            sum(cached_tokens) AS f_cached_tokens,
            sum(output_tokens) AS f_output_tokens
        FROM (
            SELECT minute < p_start AS prev, task_type, tenant_id, model, replica, category, partial, cached_estimated,
                   cost_usd, requests, prompt_tokens, cached_tokens, output_tokens
            FROM (SELECT * FROM call_costs_history WHERE minute < p_wm
                  UNION ALL SELECT * FROM call_costs_live WHERE minute >= p_wm)
            WHERE ((minute >= p_start AND minute < least(p_hs, p_end)) OR (minute >= p_re AND minute < p_end)
                   OR (minute >= p_lo AND minute < least(q_hs, p_start)) OR (minute >= q_re AND minute < p_start))
            -- section: rollup
            UNION ALL
            SELECT hour < p_start AS prev, task_type, tenant_id, model, replica, category, partial, cached_estimated,
                   cost_usd, requests, prompt_tokens, cached_tokens, output_tokens
            FROM cost_hours
            WHERE ((hour >= p_hs AND hour < p_re AND version = p_versions[dateDiff('hour', p_hs, hour) + 1])
                   OR (hour >= q_hs AND hour < q_re AND version = q_versions[dateDiff('hour', q_hs, hour) + 1]))
            -- end section: rollup
        )
        WHERE (f_model = '' OR model = f_model)
          AND (f_tenant = '' OR tenant_id = f_tenant)
          AND (f_task_type = '' OR task_type = f_task_type)
        GROUP BY prev, task_type, tenant_id, model, rep, cat
    ),
    pieces AS (
        SELECT
            arrayJoin(if(prev, ['previous'], if(p_waste, arrayPushBack(p_cur_bys, 'waste.partial'), p_cur_bys))) AS by_dim,
            multiIf(by_dim = 'task_type', task_type, by_dim = 'tenant', tenant_id, by_dim = 'model', model,
                    by_dim = 'replica', rep, by_dim = 'waste', cat, by_dim = 'waste.partial', 'partial', '') AS grp,
            sum(f_allocated_usd) AS pc_allocated_usd,
            sum(f_useful_usd) AS pc_useful_usd,
            sum(f_retry_waste_usd) AS pc_retry_waste_usd,
            sum(f_failed_task_waste_usd) AS pc_failed_task_waste_usd,
            sum(f_pending_usd) AS pc_pending_usd,
            sum(f_unattributed_usd) AS pc_unattributed_usd,
            sum(f_unspanned_usd) AS pc_unspanned_usd,
            sum(f_cached_estimated_tokens) AS pc_cached_estimated_tokens,
            sum(f_partial_usd) AS pc_partial_usd,
            sum(f_partial_tokens) AS pc_partial_tokens,
            sum(f_partial_requests) AS pc_partial_requests,
            sum(f_requests) AS pc_requests,
            sum(f_prompt_tokens) AS pc_prompt_tokens,
            sum(f_cached_tokens) AS pc_cached_tokens,
            sum(f_output_tokens) AS pc_output_tokens
        FROM fine
        GROUP BY by_dim, grp
    ),
    rm AS (
        -- exact groupings only ('', 'replica' and 'previous' without filters)
        SELECT arrayJoin(if(prev, ['previous'], arrayFilter(b -> b IN ('', 'replica'), p_cur_bys))) AS by_dim,
               if(by_dim = 'replica', replica, '') AS grp,
               sum(spend_usd) AS rm_spend, sum(idle_usd) AS rm_idle, sum(down_usd) AS rm_down
        FROM (
            SELECT minute < p_start AS prev, replica, spend_usd, idle_usd, if(up = 0, idle_usd, 0) AS down_usd
            FROM (SELECT * FROM replica_minutes_history WHERE minute < p_wm
                  UNION ALL SELECT * FROM replica_minutes_live WHERE minute >= p_wm)
            WHERE unfiltered
              AND ((minute >= p_start AND minute < least(p_hs, p_end)) OR (minute >= p_re AND minute < p_end)
                   OR (minute >= p_lo AND minute < least(q_hs, p_start)) OR (minute >= q_re AND minute < p_start))
            -- section: rollup
            UNION ALL
            SELECT hour < p_start AS prev, replica, spend_usd, idle_usd, down_usd FROM cost_replica_hours
            WHERE unfiltered AND ((hour >= p_hs AND hour < p_re AND version = p_versions[dateDiff('hour', p_hs, hour) + 1])
                   OR (hour >= q_hs AND hour < q_re AND version = q_versions[dateDiff('hour', q_hs, hour) + 1]))
            -- end section: rollup
        )
        GROUP BY by_dim, grp
    ),
    -- section: replica_tasks
    ended AS (
        -- by replica only (the task's replicas are not rolled up): every task of the period, raw
        SELECT task_id, task_type, tenant_id, model, outcome, slo_met, attempts, step_calls, steps
        FROM (SELECT * FROM tasks_history WHERE minute < p_wm
              UNION ALL SELECT * FROM tasks_live WHERE minute >= p_wm)
        WHERE has(p_bys, 'replica') AND minute >= p_start AND minute < p_end
          AND (f_model = '' OR model = f_model)
          AND (f_tenant = '' OR tenant_id = f_tenant)
          AND (f_task_type = '' OR task_type = f_task_type)
    ),
    -- end section: replica_tasks
    task_rows AS (
        -- tasks counted by the finest key first, then spread over the groupings (replica apart)
        SELECT arrayJoin(if(prev, ['previous'], arrayFilter(b -> b NOT IN ('replica', 'waste'), p_cur_bys))) AS by_dim,
               toNullable(multiIf(by_dim = 'task_type', task_type, by_dim = 'tenant', tenant_id,
                                  by_dim = 'model', model, '')) AS grp,
               n, ok, failed, abandoned, slo_ok, ok_attempts, ok_step_calls, ok_steps
        FROM (
            SELECT prev, task_type, tenant_id, model,
                   sum(t_n) AS n, sum(t_ok) AS ok, sum(t_failed) AS failed, sum(t_abandoned) AS abandoned,
                   sum(t_slo_ok) AS slo_ok, sum(t_ok_attempts) AS ok_attempts,
                   sum(t_ok_step_calls) AS ok_step_calls, sum(t_ok_steps) AS ok_steps
            FROM (
                SELECT minute < p_start AS prev, task_type, tenant_id, model,
                       count() AS t_n,
                       countIf(outcome = 'success') AS t_ok,
                       countIf(outcome = 'failure') AS t_failed,
                       countIf(outcome = 'abandoned') AS t_abandoned,
                       countIf(outcome = 'success' AND slo_met = 1) AS t_slo_ok,
                       sumIf(attempts, outcome = 'success') AS t_ok_attempts,
                       sumIf(step_calls, outcome = 'success') AS t_ok_step_calls,
                       sumIf(steps, outcome = 'success') AS t_ok_steps
                FROM (SELECT * FROM tasks_history WHERE minute < p_wm
                      UNION ALL SELECT * FROM tasks_live WHERE minute >= p_wm)
                WHERE ((minute >= p_start AND minute < least(p_hs, p_end)) OR (minute >= p_re AND minute < p_end)
                   OR (minute >= p_lo AND minute < least(q_hs, p_start)) OR (minute >= q_re AND minute < p_start))
                GROUP BY prev, task_type, tenant_id, model
                -- section: rollup
                UNION ALL
                SELECT hour < p_start AS prev, task_type, tenant_id, model, sum(tasks), sum(successes), sum(failures), sum(abandoned),
                       sum(slo_met), sum(success_attempts), sum(success_step_calls), sum(success_steps)
                FROM cost_task_hours
                WHERE ((hour >= p_hs AND hour < p_re AND version = p_versions[dateDiff('hour', p_hs, hour) + 1])
                   OR (hour >= q_hs AND hour < q_re AND version = q_versions[dateDiff('hour', q_hs, hour) + 1]))
                GROUP BY prev, task_type, tenant_id, model
                -- end section: rollup
            )
            WHERE (f_model = '' OR model = f_model)
              AND (f_tenant = '' OR tenant_id = f_tenant)
              AND (f_task_type = '' OR task_type = f_task_type)
            GROUP BY prev, task_type, tenant_id, model
        )
        -- section: replica_tasks
        UNION ALL
        -- by replica: a task counts for every replica that ran one of its calls
        SELECT 'replica' AS by_dim, tr.replica AS grp, 1, e.outcome = 'success', e.outcome = 'failure',
               e.outcome = 'abandoned', e.outcome = 'success' AND e.slo_met = 1,
               if(e.outcome = 'success', e.attempts, 0), if(e.outcome = 'success', e.step_calls, 0),
               if(e.outcome = 'success', e.steps, 0)
        FROM (SELECT * FROM ended WHERE has(p_bys, 'replica')) AS e
        LEFT JOIN (
            SELECT DISTINCT task_id, replica
            FROM (SELECT * FROM call_costs_history WHERE minute < p_wm
                  UNION ALL SELECT * FROM call_costs_live WHERE minute >= p_wm)
            WHERE has(p_bys, 'replica') AND minute >= p_start - INTERVAL 1 DAY AND minute < p_end
              AND task_id IN (SELECT task_id FROM ended WHERE has(p_bys, 'replica'))
        ) AS tr ON tr.task_id = e.task_id
        -- end section: replica_tasks
    ),
    tk AS (
        SELECT by_dim, grp,
            sum(n) AS tk_tasks,
            sum(ok) AS tk_successful_tasks,
            sum(failed) AS tk_failed_tasks,
            sum(abandoned) AS tk_abandoned_tasks,
            sum(slo_ok) AS tk_slo_met_tasks,
            sum(ok_attempts) AS tk_success_attempts,
            sum(ok_step_calls) AS tk_success_step_calls,
            sum(ok_steps) AS tk_success_steps
        FROM task_rows
        GROUP BY by_dim, grp
    ),
    tot AS (
        -- each period's fleet idle and allocated (the idle share of a filtered or grouped row), and its
        -- hours with data: hours holding a replica-minute (review.coverage's hours_with_data)
        SELECT sumIf(idle_usd, NOT prev) AS idle_total, sumIf(allocated_usd, NOT prev) AS alloc_total,
               sumIf(idle_usd, prev) AS prev_idle_total, sumIf(allocated_usd, prev) AS prev_alloc_total,
               uniqExactIf(h, NOT prev) AS cur_hours_with_data, uniqExactIf(h, prev) AS prev_hours_with_data
        FROM (
            SELECT minute < p_start AS prev, toStartOfHour(minute) AS h, idle_usd, allocated_usd
            FROM (SELECT * FROM replica_minutes_history WHERE minute < p_wm
                  UNION ALL SELECT * FROM replica_minutes_live WHERE minute >= p_wm)
            WHERE ((minute >= p_start AND minute < least(p_hs, p_end)) OR (minute >= p_re AND minute < p_end)
                   OR (minute >= p_lo AND minute < least(q_hs, p_start)) OR (minute >= q_re AND minute < p_start))
            -- section: rollup
            UNION ALL
            SELECT hour < p_start AS prev, hour AS h, idle_usd, allocated_usd FROM cost_replica_hours
            WHERE ((hour >= p_hs AND hour < p_re AND version = p_versions[dateDiff('hour', p_hs, hour) + 1])
                   OR (hour >= q_hs AND hour < q_re AND version = q_versions[dateDiff('hour', q_hs, hour) + 1]))
            -- end section: rollup
        )
    ),
    base AS (SELECT arrayJoin(arrayFilter(b -> b IN ('', 'previous'), p_bys)) AS by_dim, toNullable('') AS grp)
SELECT
    by_dim,
    grp,
    if(unfiltered AND by_dim IN ('', 'replica', 'previous'), ifNull(rm.rm_spend, 0),
       ifNull(p.pc_allocated_usd, 0) + idle_usd) AS spend_usd,
    ifNull(p.pc_allocated_usd, 0) AS allocated_usd,
    if(by_dim = 'previous', tot.prev_idle_total, tot.idle_total) AS period_idle,
    if(by_dim = 'previous', tot.prev_alloc_total, tot.alloc_total) AS period_alloc,
    if(unfiltered AND by_dim IN ('', 'replica', 'previous'), ifNull(rm.rm_idle, 0),
       if(period_alloc > 0, period_idle * ifNull(p.pc_allocated_usd, 0) / period_alloc, 0)) AS idle_usd,
    ifNull(p.pc_unattributed_usd, 0) AS unattributed_usd,
    ifNull(p.pc_unspanned_usd, 0) AS unspanned_usd,
    ifNull(p.pc_useful_usd, 0) AS useful_usd,
    ifNull(p.pc_retry_waste_usd, 0) AS retry_waste_usd,
    ifNull(p.pc_failed_task_waste_usd, 0) AS failed_task_waste_usd,
    ifNull(p.pc_pending_usd, 0) AS pending_usd,
    ifNull(p.pc_partial_usd, 0) AS partial_usd,
    toUInt64(ifNull(p.pc_partial_tokens, 0)) AS partial_tokens,
    toUInt64(ifNull(p.pc_partial_requests, 0)) AS partial_requests,
    ifNull(rm.rm_down, 0) AS down_usd,
    toUInt64(ifNull(p.pc_requests, 0)) AS requests,
    toUInt64(ifNull(p.pc_prompt_tokens, 0)) AS prompt_tokens,
    toUInt64(ifNull(p.pc_cached_tokens, 0)) AS cached_tokens,
    toUInt64(ifNull(p.pc_cached_estimated_tokens, 0)) AS cached_estimated_tokens,
    toUInt64(ifNull(p.pc_output_tokens, 0)) AS output_tokens,
    prompt_tokens + output_tokens AS tokens,
    toUInt64(ifNull(tk.tk_tasks, 0)) AS tasks,
    toUInt64(ifNull(tk.tk_successful_tasks, 0)) AS successful_tasks,
    toUInt64(ifNull(tk.tk_failed_tasks, 0)) AS failed_tasks,
    toUInt64(ifNull(tk.tk_abandoned_tasks, 0)) AS abandoned_tasks,
    toUInt64(ifNull(tk.tk_slo_met_tasks, 0)) AS slo_met_tasks,
    if(requests > 0, spend_usd / requests, NULL) AS cost_per_request_usd,
    if(tokens > 0, spend_usd * 1000000 / tokens, NULL) AS cost_per_1m_tokens_usd,
    if(hours > 0, slo_met_tasks / hours, NULL) AS goodput_per_hour,
    if(successful_tasks > 0, ifNull(tk.tk_success_attempts, 0) / successful_tasks, NULL) AS attempts_per_success,
    if(successful_tasks > 0, ifNull(tk.tk_success_steps, 0) / successful_tasks, NULL) AS steps_per_success,
    if(ifNull(tk.tk_success_step_calls, 0) > 0,
       (ifNull(tk.tk_success_attempts, 0) - tk.tk_success_step_calls) / tk.tk_success_step_calls, NULL) AS retries_per_call,
    hours,
    toUInt64(if(by_dim = 'previous', tot.prev_hours_with_data, tot.cur_hours_with_data)) AS hours_with_data
FROM base
FULL JOIN pieces AS p USING (by_dim, grp)
FULL JOIN (SELECT by_dim, toNullable(grp) AS grp, rm_spend, rm_idle, rm_down FROM rm) AS rm USING (by_dim, grp)
FULL JOIN tk USING (by_dim, grp)
CROSS JOIN tot
ORDER BY by_dim, spend_usd DESC, grp
SETTINGS join_use_nulls = 1
