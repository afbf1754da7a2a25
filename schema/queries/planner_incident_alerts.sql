-- Planner: the replica alerts that fired and overlap [start, end) (the alert evaluator's history,
-- `alerts`): per alert its rule, replica, first start and resolution (NULL: still firing), the
-- newest summary. The incidents a backtest replays, or excludes, start from these.
WITH
    {start:DateTime} AS p_start,
    {end:DateTime} AS p_end
SELECT
    alert_id,
    rule,
    replica,
    min(started_at) AS began,
    max(resolved_at) AS resolved,
    argMax(summary, event_time) AS last_summary
FROM alerts
WHERE replica != '' AND started_at < p_end
GROUP BY alert_id, rule, replica
HAVING countIf(state = 'firing') > 0 AND began < p_end AND (resolved IS NULL OR resolved >= p_start)
ORDER BY began, replica, rule
