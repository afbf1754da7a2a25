-- Every alert state change written in [start, end), newest first.
SELECT
    event_time, alert_id, rule, alert_key, severity, replica, state, started_at, fired_at, resolved_at,
    summary, description, evidence, est_cost_usd, cost_source, labels
FROM alerts
WHERE event_time >= {start:DateTime64(3, 'UTC')} AND event_time < {end:DateTime64(3, 'UTC')}
ORDER BY event_time DESC, rule, alert_id
