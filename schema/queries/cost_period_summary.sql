-- Period summary of the cost model (DESIGN.md "Cost model") over [start, end), optionally grouped.
-- by: '' (one row) | 'task_type' | 'tenant' | 'model' | 'replica'. Filters: '' = all.
-- Spend is by minute (replica_minutes); categories by the minute the work ran (call_costs);
-- tasks belong to the period in which they ended (tasks.minute).
-- Exact mode (no filter, by '' or 'replica'): spend and idle are the replica-minutes' own.
-- Otherwise idle is shared among groups in proportion to their allocated cost, so groups add
-- up to the fleet's spend; a group's spend = its allocated + its idle share.
WITH
    {start:DateTime} AS p_start,
    {end:DateTime} AS p_end,
    {by:String} AS p_by,
    {model:String} AS f_model,
    {tenant:String} AS f_tenant,
    {task_type:String} AS f_task_type,
    (f_model = '' AND f_tenant = '' AND f_task_type = '' AND p_by IN ('', 'replica')) AS exact_mode,
    dateDiff('second', p_start, p_end) / 3600.0 AS hours,
    pieces AS (
        SELECT
            multiIf(p_by = 'task_type', task_type, p_by = 'tenant', tenant_id, p_by = 'model', model,
                    p_by = 'replica', replica, '') AS grp,
            sum(cost_usd) AS pc_allocated_usd,
            sumIf(cost_usd, category = 'useful') AS pc_useful_usd,
            sumIf(cost_usd, category = 'retry_waste') AS pc_retry_waste_usd,
            sumIf(cost_usd, category = 'failed_task_waste') AS pc_failed_task_waste_usd,
            sumIf(cost_usd, category = 'pending') AS pc_pending_usd,
            sumIf(cost_usd, category = 'unattributed') AS pc_unattributed_usd,
            sumIf(cost_usd, category = 'unspanned') AS pc_unspanned_usd,
            sumIf(cached_tokens, cached_estimated = 1) AS pc_cached_estimated_tokens,
            sumIf(cost_usd, partial = 1) AS pc_partial_usd,
            sumIf(output_tokens, partial = 1) AS pc_partial_tokens,
            sum(requests) AS pc_requests,
            sum(prompt_tokens) AS pc_prompt_tokens,
            sum(cached_tokens) AS pc_cached_tokens,
            sum(output_tokens) AS pc_output_tokens
        FROM call_costs
        WHERE minute >= p_start AND minute < p_end
          AND (f_model = '' OR model = f_model)
          AND (f_tenant = '' OR tenant_id = f_tenant)
          AND (f_task_type = '' OR task_type = f_task_type)
        GROUP BY grp
    ),
    rm AS (
        SELECT if(p_by = 'replica', replica, '') AS grp,
               sum(spend_usd) AS rm_spend, sum(idle_usd) AS rm_idle
        FROM replica_minutes
        WHERE minute >= p_start AND minute < p_end
        GROUP BY grp
    ),
    tot AS (
        SELECT sum(idle_usd) AS idle_total, sum(allocated_usd) AS alloc_total
        FROM replica_minutes
        WHERE minute >= p_start AND minute < p_end
    ),
    ended AS (
        SELECT task_id, task_type, tenant_id, model, outcome, slo_met, attempts, step_calls, steps
        FROM tasks
        WHERE minute >= p_start AND minute < p_end
          AND (f_model = '' OR model = f_model)
          AND (f_tenant = '' OR tenant_id = f_tenant)
          AND (f_task_type = '' OR task_type = f_task_type)
    ),
    task_replicas AS (
        -- for by = 'replica': a task counts for every replica that ran one of its calls
        SELECT DISTINCT task_id, replica
        FROM call_costs
        WHERE p_by = 'replica' AND minute >= p_start - INTERVAL 1 DAY AND minute < p_end
          AND task_id IN (SELECT task_id FROM ended)
    ),
    tk AS (
        SELECT
            multiIf(p_by = 'task_type', e.task_type, p_by = 'tenant', e.tenant_id, p_by = 'model', e.model,
                    p_by = 'replica', tr.replica, '') AS grp,
            count() AS tk_tasks,
            countIf(e.outcome = 'success') AS tk_successful_tasks,
            countIf(e.outcome = 'failure') AS tk_failed_tasks,
            countIf(e.outcome = 'abandoned') AS tk_abandoned_tasks,
            countIf(e.outcome = 'success' AND e.slo_met = 1) AS tk_slo_met_tasks,
            sumIf(e.attempts, e.outcome = 'success') AS tk_success_attempts,
            sumIf(e.step_calls, e.outcome = 'success') AS tk_success_step_calls,
            sumIf(e.steps, e.outcome = 'success') AS tk_success_steps
        FROM ended AS e
        LEFT JOIN task_replicas AS tr ON tr.task_id = e.task_id
        GROUP BY grp
    ),
    groups AS (
        SELECT grp FROM pieces
        UNION DISTINCT SELECT grp FROM rm WHERE exact_mode
        UNION DISTINCT SELECT grp FROM tk
        UNION DISTINCT SELECT '' AS grp WHERE p_by = ''
    )
SELECT
    g.grp AS grp,
    if(exact_mode, ifNull(rm.rm_spend, 0), ifNull(p.pc_allocated_usd, 0) + idle_usd) AS spend_usd,
    ifNull(p.pc_allocated_usd, 0) AS allocated_usd,
    if(exact_mode, ifNull(rm.rm_idle, 0),
       if(tot.alloc_total > 0, tot.idle_total * ifNull(p.pc_allocated_usd, 0) / tot.alloc_total, 0)) AS idle_usd,
    ifNull(p.pc_unattributed_usd, 0) AS unattributed_usd,
    ifNull(p.pc_unspanned_usd, 0) AS unspanned_usd,
    ifNull(p.pc_useful_usd, 0) AS useful_usd,
    ifNull(p.pc_retry_waste_usd, 0) AS retry_waste_usd,
    ifNull(p.pc_failed_task_waste_usd, 0) AS failed_task_waste_usd,
    ifNull(p.pc_pending_usd, 0) AS pending_usd,
    ifNull(p.pc_partial_usd, 0) AS partial_usd,
    toUInt64(ifNull(p.pc_partial_tokens, 0)) AS partial_tokens,
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
    if(successful_tasks > 0, spend_usd / successful_tasks, NULL) AS cpst_usd,
    if(successful_tasks > 0, allocated_usd / successful_tasks, NULL) AS attributed_cpst_usd,
    if(requests > 0, spend_usd / requests, NULL) AS cost_per_request_usd,
    if(tokens > 0, spend_usd * 1000000 / tokens, NULL) AS cost_per_1m_tokens_usd,
    if(hours > 0, slo_met_tasks / hours, NULL) AS goodput_per_hour,
    if(successful_tasks > 0, ifNull(tk.tk_success_attempts, 0) / successful_tasks, NULL) AS attempts_per_success,
    if(successful_tasks > 0, ifNull(tk.tk_success_steps, 0) / successful_tasks, NULL) AS steps_per_success,
    if(ifNull(tk.tk_success_step_calls, 0) > 0,
       (ifNull(tk.tk_success_attempts, 0) - tk.tk_success_step_calls) / tk.tk_success_step_calls, NULL) AS retries_per_call,
    hours
FROM groups AS g
LEFT JOIN pieces AS p ON p.grp = g.grp
LEFT JOIN rm ON rm.grp = g.grp
LEFT JOIN tk ON tk.grp = g.grp
CROSS JOIN tot
ORDER BY spend_usd DESC, grp
SETTINGS join_use_nulls = 1
