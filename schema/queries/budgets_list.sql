-- The budgets as last synced from fleet.yaml (scope, name, period, usd).
SELECT scope, name, period, argMax(usd, synced_at) AS usd
FROM budgets
GROUP BY scope, name, period
ORDER BY scope, name, period
