-- Whether step {view:String} of the cost chain has started a run at or after {due:DateTime} and no step
-- of the chain runs or waits now.
SELECT countIf(view = {view:String} AND last_refresh_time >= {due:DateTime}) = 1
       AND countIf(status NOT IN ('Scheduled', 'Disabled')) = 0
FROM system.view_refreshes
WHERE database = currentDatabase() AND startsWith(view, 'cost_')
