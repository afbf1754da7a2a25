-- Alerts whose latest state is pending or firing: one row per alert, newest first.
SELECT
    alert_id, last_rule AS rule, last_alert_key AS alert_key, last_severity AS severity, last_replica AS replica,
    last_state AS state, last_started_at AS started_at, last_fired_at AS fired_at, last_summary AS summary,
    last_description AS description, last_evidence AS evidence, last_est_cost_usd AS est_cost_usd,
    last_cost_source AS cost_source, last_labels AS labels, updated_at
FROM (
    SELECT
        alert_id,
        argMax(rule, event_time) AS last_rule,
        argMax(alert_key, event_time) AS last_alert_key,
        argMax(severity, event_time) AS last_severity,
        argMax(replica, event_time) AS last_replica,
        argMax(state, event_time) AS last_state,
        argMax(started_at, event_time) AS last_started_at,
        argMax(fired_at, event_time) AS last_fired_at,
        argMax(summary, event_time) AS last_summary,
        argMax(description, event_time) AS last_description,
        argMax(evidence, event_time) AS last_evidence,
        argMax(est_cost_usd, event_time) AS last_est_cost_usd,
        argMax(cost_source, event_time) AS last_cost_source,
        argMax(labels, event_time) AS last_labels,
        max(event_time) AS updated_at
    FROM alerts
    GROUP BY alert_id
)
WHERE last_state IN ('pending', 'firing')
ORDER BY last_started_at DESC, last_rule, alert_id
