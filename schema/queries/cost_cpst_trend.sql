-- Cost per successful task over time: one row per bucket of bucket_seconds (and group).
-- Spend by minute (replica_minutes), successes by the minute tasks ended (tasks).
-- by '' : spend and idle are the fleet's; otherwise a group's spend = its allocated cost plus a
-- share of the bucket's idle proportional to that allocated cost.
-- The three sources meet in one UNION ALL grouped by (bucket, group), each read once (ClickHouse
-- inlines a CTE at every reference, so keys-then-joins read every source twice).
-- With buckets of whole hours, the hours the cost jobs rolled up (migration 1003) are read from the
-- hourly rollups, [p_hs, p_re); the partial edge hours and hours not rolled up (the live window)
-- from the raw tables. Shorter buckets read the raw tables only.
-- Sections rollup (those reads) are omitted when the span is empty (cost._without_rollup): ClickHouse
-- would plan them for an empty range too.
WITH
    {start:DateTime} AS p_start,
    {end:DateTime} AS p_end,
    {bucket_seconds:UInt32} AS p_bucket,
    {by:String} AS p_by,
    -- include: cost_rollup_params
    pieces AS (
        SELECT toStartOfInterval(minute, toIntervalSecond(p_bucket)) AS bucket,
               multiIf(p_by = 'task_type', task_type, p_by = 'tenant', tenant_id, p_by = 'model', model,
                       p_by = 'replica', replica, '') AS grp,
               sum(cost_usd) AS alloc
        FROM (
            SELECT minute, task_type, tenant_id, model, replica, cost_usd
            FROM (SELECT * FROM call_costs_history WHERE minute < p_wm
                  UNION ALL SELECT * FROM call_costs_live WHERE minute >= p_wm)
            WHERE ((minute >= p_start AND minute < least(p_hs, p_end)) OR (minute >= p_re AND minute < p_end))
            -- section: rollup
            UNION ALL
            SELECT hour, task_type, tenant_id, model, replica, cost_usd FROM cost_hours
            WHERE hour >= p_hs AND hour < p_re
              AND version = p_versions[dateDiff('hour', p_hs, hour) + 1]
            -- end section: rollup
        )
        GROUP BY bucket, grp
    ),
    rm AS (
        SELECT toStartOfInterval(minute, toIntervalSecond(p_bucket)) AS bucket,
               sum(spend_usd) AS b_spend, sum(idle_usd) AS b_idle, sum(allocated_usd) AS b_alloc
        FROM (
            SELECT minute, spend_usd, idle_usd, allocated_usd
            FROM (SELECT * FROM replica_minutes_history WHERE minute < p_wm
                  UNION ALL SELECT * FROM replica_minutes_live WHERE minute >= p_wm)
            WHERE ((minute >= p_start AND minute < least(p_hs, p_end)) OR (minute >= p_re AND minute < p_end))
            -- section: rollup
            UNION ALL
            SELECT hour, spend_usd, idle_usd, allocated_usd FROM cost_replica_hours
            WHERE hour >= p_hs AND hour < p_re
              AND version = p_versions[dateDiff('hour', p_hs, hour) + 1]
            -- end section: rollup
        )
        GROUP BY bucket
    ),
    tk AS (
        SELECT toStartOfInterval(minute, toIntervalSecond(p_bucket)) AS bucket,
               multiIf(p_by = 'task_type', task_type, p_by = 'tenant', tenant_id, p_by = 'model', model, '') AS grp,
               sum(t_successes) AS successes,
               sum(t_slo_met) AS slo_met_tasks
        FROM (
            SELECT minute, task_type, tenant_id, model, countIf(outcome = 'success') AS t_successes,
                   countIf(outcome = 'success' AND slo_met = 1) AS t_slo_met
            FROM (SELECT * FROM tasks_history WHERE minute < p_wm
                  UNION ALL SELECT * FROM tasks_live WHERE minute >= p_wm)
            WHERE ((minute >= p_start AND minute < least(p_hs, p_end)) OR (minute >= p_re AND minute < p_end))
            GROUP BY minute, task_type, tenant_id, model
            -- section: rollup
            UNION ALL
            SELECT hour, task_type, tenant_id, model, successes, slo_met FROM cost_task_hours
            WHERE hour >= p_hs AND hour < p_re
              AND version = p_versions[dateDiff('hour', p_hs, hour) + 1]
            -- end section: rollup
        )
        GROUP BY bucket, grp
    ),
    parts AS (
        -- one row per source and key; the fleet's buckets are keys only when ungrouped
        SELECT bucket, grp, alloc, 0 AS spend, 0 AS idle, 0 AS fleet_alloc, 0 AS successes, 0 AS slo_met, 1 AS is_key
        FROM pieces
        UNION ALL
        SELECT bucket, '' AS grp, 0, b_spend, b_idle, b_alloc, 0, 0, toUInt8(p_by = '') FROM rm
        UNION ALL
        SELECT bucket, grp, 0, 0, 0, 0, successes, slo_met_tasks, 1 FROM tk
    ),
    merged AS (
        SELECT bucket, grp,
               sum(alloc) AS k_alloc, sum(successes) AS k_successes, sum(slo_met) AS k_slo_met, max(is_key) AS k_key,
               -- the bucket's fleet figures on every key of the bucket
               sum(sum(spend)) OVER (PARTITION BY bucket) AS b_spend,
               sum(sum(idle)) OVER (PARTITION BY bucket) AS b_idle,
               sum(sum(fleet_alloc)) OVER (PARTITION BY bucket) AS b_alloc
        FROM parts
        GROUP BY bucket, grp
    )
SELECT
    bucket AS bucket_start,
    grp,
    if(p_by = '', b_spend, k_alloc + if(b_alloc > 0, b_idle * k_alloc / b_alloc, 0)) AS spend_usd,
    k_alloc AS allocated_usd,
    toUInt64(k_successes) AS successful_tasks,
    toUInt64(k_slo_met) AS slo_met_tasks
FROM merged
WHERE k_key = 1
ORDER BY bucket_start, grp
