-- Each step of the cost chain, when its next scheduled run starts, and whether that is within
-- {margin_s} seconds or already past (a run a stopped step missed; 1970 for a step that waits for others).
SELECT view, next_refresh_time,
       next_refresh_time > toDateTime('1971-01-01') AND next_refresh_time < now() + toIntervalSecond({margin_s:UInt32})
FROM system.view_refreshes
WHERE database = currentDatabase() AND startsWith(view, 'cost_')
