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
    -- the week's whole hours the cost jobs rolled up (migration 1003; cost.rollup_span of [week_start,
    -- now)) from cost_hours, the rest raw (history below the watermark, live from it on, as the view
    -- call_costs): each minute from one of them. An hour row is wholly in or out of the day (both
    -- periods start at midnight UTC).
    -- include: cost_rollup_params
    -- no budget synced: no piece is read (the spend is only shown beside a budget)
    (SELECT count() > 0 FROM budgets) AS p_any_budget,
    spend AS (
        SELECT k.1 AS s_scope, k.2 AS s_name,
               sumIf(cost_usd, t >= day_start) AS day_usd,
               sum(cost_usd) AS week_usd
        FROM (
            SELECT minute AS t, tenant_id, task_type, cost_usd
            FROM (SELECT * FROM call_costs_history WHERE minute < p_wm
                  UNION ALL SELECT * FROM call_costs_live WHERE minute >= p_wm)
            WHERE ((minute >= week_start AND minute < least(greatest(p_hs, week_start), p_now))
                   OR (minute >= greatest(p_re, week_start) AND minute < p_now))
              AND p_any_budget
            UNION ALL
            SELECT hour, tenant_id, task_type, cost_usd FROM cost_hours
            WHERE hour >= greatest(p_hs, week_start) AND hour < p_re
              AND version = p_versions[dateDiff('hour', p_hs, hour) + 1]
              AND p_any_budget
        )
        ARRAY JOIN [('tenant', tenant_id), ('task_type', task_type)] AS k
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
