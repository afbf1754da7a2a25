-- Alert incidents (one per alert_id and started_at) that reached firing and overlapped [start, end):
-- latest state, when it started (condition first held), fired and resolved, the firing duration in
-- seconds (to end, or to `now` for one still firing), the latest cost estimate (USD), summary,
-- evidence (JSON) and labels.
SELECT
    alert_id,
    started_at,
    last_rule AS rule,
    last_severity AS severity,
    last_replica AS replica,
    last_state AS state,
    first_fired_at AS fired_at,
    last_resolved_at AS resolved_at,
    dateDiff('millisecond', first_fired_at, ifNull(last_resolved_at, {now:DateTime64(3, 'UTC')})) / 1000.0 AS duration_s,
    last_cost AS est_cost_usd,
    last_cost_source AS cost_source,
    last_summary AS summary,
    last_alert_key AS alert_key,
    last_evidence AS evidence,
    last_labels AS labels
FROM (
    SELECT
        alert_id,
        started_at,
        argMax(rule, event_time) AS last_rule,
        argMax(severity, event_time) AS last_severity,
        argMax(replica, event_time) AS last_replica,
        argMax(state, event_time) AS last_state,
        minIf(event_time, state = 'firing') AS first_fired_at,
        maxIf(resolved_at, state = 'resolved') AS last_resolved_at,
        argMax(est_cost_usd, event_time) AS last_cost,
        argMax(cost_source, event_time) AS last_cost_source,
        argMax(summary, event_time) AS last_summary,
        argMax(alert_key, event_time) AS last_alert_key,
        argMax(evidence, event_time) AS last_evidence,
        argMax(labels, event_time) AS last_labels
    FROM alerts
    WHERE started_at < {end:DateTime64(3, 'UTC')}
    GROUP BY alert_id, started_at
    HAVING countIf(state = 'firing') > 0
)
WHERE ifNull(last_resolved_at, {now:DateTime64(3, 'UTC')}) >= {start:DateTime64(3, 'UTC')}
ORDER BY first_fired_at, last_rule, alert_id
