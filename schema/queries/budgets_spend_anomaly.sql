-- Spend-anomaly inputs at {now}: per tenant ('' = no task context), the cost allocated to calls in
-- the last hour [now - 1 h, now) and in the same hour one week earlier. USD. The rule compares
-- the two (alerts/rules_budget.py); a tenant without spend a week ago has no baseline.
WITH {now:DateTime} AS p_now
SELECT
    tenant_id AS tenant,
    sumIf(cost_usd, minute >= p_now - INTERVAL 1 HOUR) AS this_hour_usd,
    sumIf(cost_usd, minute < p_now - INTERVAL 7 DAY) AS last_week_usd
FROM call_costs
WHERE (minute >= p_now - INTERVAL 1 HOUR AND minute < p_now)
   OR (minute >= p_now - INTERVAL 7 DAY - INTERVAL 1 HOUR AND minute < p_now - INTERVAL 7 DAY)
GROUP BY tenant
ORDER BY tenant
