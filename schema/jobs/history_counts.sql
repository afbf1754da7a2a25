-- Rows an explicit run left in each history table for [ws, we).
SELECT 'call_costs' AS name, count() FROM call_costs_history WHERE minute >= {ws:DateTime} AND minute < {we:DateTime}
UNION ALL
SELECT 'replica_minutes', count() FROM replica_minutes_history WHERE minute >= {ws:DateTime} AND minute < {we:DateTime}
UNION ALL
SELECT 'tasks', count() FROM tasks_history WHERE minute >= {ws:DateTime} AND minute < {we:DateTime}
