-- Every state change of one alert (all its incidents), newest first: the target of a deep link
-- (?alert_id=..., the generatorURL of notifications).
SELECT
    event_time, alert_id, rule, alert_key, severity, replica, state, started_at, fired_at, resolved_at,
    summary, description, evidence, est_cost_usd, cost_source, labels
FROM alerts
WHERE alert_id = {alert_id:String}
ORDER BY event_time DESC
LIMIT 1000
