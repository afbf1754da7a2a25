-- Planner: the newest run whose replayed period covers at least min_overlap of [start, end)
-- (the weekly review takes its levers from it).
SELECT run_id
FROM planner_runs
WHERE dateDiff('second', greatest(period_start, {start:DateTime}), least(period_end, {end:DateTime}))
      >= {min_overlap:Float64} * dateDiff('second', {start:DateTime}, {end:DateTime})
ORDER BY created_at DESC
LIMIT 1
