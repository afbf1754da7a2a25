-- Explicit-window run of the hourly rollups (migration 1003): the task rows, after the chunk's tasks
-- (schema/jobs/schedule.py: step *rollup_tasks*), beside the rows run_cost_rollup_calls.sql and
-- run_cost_rollup_replicas.sql write; run_cost_rollup_marks.sql then marks every hour [ws, we)
-- touched. Hours wholly below the watermark are summed from *_history and marked complete; a touched
-- hour that is not (the live window's, or the hour `we` cuts) is marked incomplete, so readers take
-- it from the raw tables. Until its mark is written a reader keeps the hour's previous version.
-- Insert-only: no mutation, no delete.
-- h0 = first touched hour, h1 = end of the complete hours, h_end = end of the touched hours.
INSERT INTO cost_task_hours
WITH toStartOfHour({ws:DateTime}) AS h0,
     toStartOfHour({we:DateTime} - INTERVAL 1 SECOND) + INTERVAL 1 HOUR AS h_end,
     least(h_end, toStartOfHour((SELECT max(watermark) FROM cost_watermark))) AS h1
SELECT toStartOfHour(minute) AS hour, {run_id:UInt64} AS version, task_type, tenant_id, model,
       count(), countIf(outcome = 'success'), countIf(outcome = 'failure'), countIf(outcome = 'abandoned'),
       countIf(outcome = 'success' AND slo_met = 1), sumIf(attempts, outcome = 'success'),
       sumIf(step_calls, outcome = 'success'), sumIf(steps, outcome = 'success')
FROM tasks_history
WHERE minute >= h0 AND minute < h1
GROUP BY hour, task_type, tenant_id, model;

-- The triangle's successes: successful tasks that ended in the hour, per replica that ran one of
-- their calls from the day before the hour to its end.
INSERT INTO cost_triangle_hours (hour, version, replica, part, successes)
WITH toStartOfHour({ws:DateTime}) AS h0,
     toStartOfHour({we:DateTime} - INTERVAL 1 SECOND) + INTERVAL 1 HOUR AS h_end,
     least(h_end, toStartOfHour((SELECT max(watermark) FROM cost_watermark))) AS h1
SELECT toStartOfHour(t.minute) AS hour, {run_id:UInt64} AS version, c.replica AS replica, 'successes',
       uniqExact(c.task_id)
FROM (SELECT task_id, replica, minute FROM call_costs_history
      WHERE minute >= h0 - INTERVAL 1 DAY AND minute < h1 AND task_id != '') AS c
INNER JOIN (SELECT task_id, minute FROM tasks_history
            WHERE outcome = 'success' AND minute >= h0 AND minute < h1) AS t ON c.task_id = t.task_id
WHERE c.minute >= toStartOfHour(t.minute) - INTERVAL 1 DAY AND c.minute < toStartOfHour(t.minute) + INTERVAL 1 HOUR
GROUP BY hour, replica;
