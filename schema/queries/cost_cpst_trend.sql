-- Cost per successful task over time: one row per bucket of bucket_seconds (and group).
-- Spend by minute (replica_minutes), successes by the minute tasks ended (tasks).
-- by '' : spend and idle are the fleet's; otherwise a group's spend = its allocated cost plus a
-- share of the bucket's idle proportional to that allocated cost.
WITH
    {start:DateTime} AS p_start,
    {end:DateTime} AS p_end,
    {bucket_seconds:UInt32} AS p_bucket,
    {by:String} AS p_by,
    pieces AS (
        SELECT toStartOfInterval(minute, toIntervalSecond(p_bucket)) AS bucket,
               multiIf(p_by = 'task_type', task_type, p_by = 'tenant', tenant_id, p_by = 'model', model,
                       p_by = 'replica', replica, '') AS grp,
               sum(cost_usd) AS alloc
        FROM call_costs
        WHERE minute >= p_start AND minute < p_end
        GROUP BY bucket, grp
    ),
    rm AS (
        SELECT toStartOfInterval(minute, toIntervalSecond(p_bucket)) AS bucket,
               sum(spend_usd) AS b_spend, sum(idle_usd) AS b_idle, sum(allocated_usd) AS b_alloc
        FROM replica_minutes
        WHERE minute >= p_start AND minute < p_end
        GROUP BY bucket
    ),
    tk AS (
        SELECT toStartOfInterval(minute, toIntervalSecond(p_bucket)) AS bucket,
               multiIf(p_by = 'task_type', task_type, p_by = 'tenant', tenant_id, p_by = 'model', model, '') AS grp,
               countIf(outcome = 'success') AS successes,
               countIf(outcome = 'success' AND slo_met = 1) AS slo_met_tasks
        FROM tasks
        WHERE minute >= p_start AND minute < p_end
        GROUP BY bucket, grp
    ),
    keys AS (
        SELECT bucket, grp FROM pieces
        UNION DISTINCT SELECT bucket, '' AS grp FROM rm WHERE p_by = ''
        UNION DISTINCT SELECT bucket, grp FROM tk
    )
SELECT
    k.bucket AS bucket_start,
    k.grp AS grp,
    if(p_by = '', ifNull(rm.b_spend, 0),
       ifNull(p.alloc, 0) + if(ifNull(rm.b_alloc, 0) > 0, rm.b_idle * ifNull(p.alloc, 0) / rm.b_alloc, 0)) AS spend_usd,
    ifNull(p.alloc, 0) AS allocated_usd,
    toUInt64(ifNull(tk.successes, 0)) AS successful_tasks,
    toUInt64(ifNull(tk.slo_met_tasks, 0)) AS slo_met_tasks,
    if(successful_tasks > 0, spend_usd / successful_tasks, NULL) AS cpst_usd,
    if(successful_tasks > 0, allocated_usd / successful_tasks, NULL) AS attributed_cpst_usd
FROM keys AS k
LEFT JOIN pieces AS p ON p.bucket = k.bucket AND p.grp = k.grp
LEFT JOIN rm ON rm.bucket = k.bucket
LEFT JOIN tk ON tk.bucket = k.bucket AND tk.grp = k.grp
ORDER BY bucket_start, grp
SETTINGS join_use_nulls = 1
