-- State of the cost chain's refreshable materialized views in our database.
SELECT view, status, last_success_time, last_refresh_time, next_refresh_time, exception
FROM system.view_refreshes
WHERE database = currentDatabase() AND startsWith(view, 'cost_')
ORDER BY view
