-- GPU spend per replica over [start, end) from the cost engine's replica_minutes (USD), for the
-- cost at stake of open alerts: what the replicas an incident affects cost while it lasts.
SELECT replica, sum(spend_usd) AS spend_usd, count() AS minutes
FROM replica_minutes
WHERE minute >= toStartOfMinute({start:DateTime64(3, 'UTC')}) AND minute < {end:DateTime64(3, 'UTC')}
GROUP BY replica
ORDER BY replica
