-- Budgets (fleet.yaml `budgets:`) and the spend so far in each one's current period at {now}: the
-- period starts at 00:00 UTC (day) or Monday 00:00 UTC (week). Spend = the cost allocated to the
-- tenant's / task type's calls (call_costs, every category): idle GPU time belongs to no tenant or
-- task type, so it is not charged to a budget (the cost page shows it apart). USD; seconds.
WITH
    {now:DateTime} AS p_now,
    toStartOfDay(p_now) AS day_start,
    toDateTime(toMonday(p_now)) AS week_start,
    current AS (
        SELECT scope, name, period, argMax(usd, synced_at) AS usd
        FROM budgets
        WHERE synced_at >= (SELECT max(synced_at) FROM budgets) - INTERVAL 1 SECOND
        GROUP BY scope, name, period
    ),
    spend AS (
        SELECT k.1 AS s_scope, k.2 AS s_name,
               sumIf(cost_usd, minute >= day_start) AS day_usd,
               sumIf(cost_usd, minute >= week_start) AS week_usd
        FROM call_costs
        ARRAY JOIN [('tenant', tenant_id), ('task_type', task_type)] AS k
        WHERE minute >= least(day_start, week_start) AND minute < p_now
        GROUP BY s_scope, s_name
    )
SELECT
    c.scope AS scope,
    c.name AS name,
    c.period AS period,
    c.usd AS budget_usd,
    if(c.period = 'day', day_start, week_start) AS period_start,
    if(c.period = 'day', day_start + INTERVAL 1 DAY, week_start + INTERVAL 7 DAY) AS period_end,
    ifNull(if(c.period = 'day', s.day_usd, s.week_usd), 0) AS spent_usd,
    dateDiff('second', period_start, p_now) AS elapsed_s,
    dateDiff('second', period_start, period_end) AS period_s
FROM current AS c
LEFT JOIN spend AS s ON s.s_scope = c.scope AND s.s_name = c.name
ORDER BY scope, name, period
SETTINGS join_use_nulls = 1
