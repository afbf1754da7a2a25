-- Planner, workload extraction: the units of GPU work (the cost job's call_costs, first piece of
-- each call) of the tasks that started in [start, end), one row per task: units = (start, prompt
-- tokens, output tokens, ok) in start order, ok = the unit ended without error and was not cut
-- short. The evidence of what a call that never succeeded asked for, and of the calls of tasks
-- whose client sent no spans (a gateway-only deployment). start DateTime64(9) UTC; tokens counts.
WITH
    {start:DateTime} AS p_start,
    {end:DateTime} AS p_end,
    -- include: planner_started_tasks
SELECT
    task_id,
    arraySort(x -> x.1, groupArray(tuple(start_time, prompt_tokens, output_tokens,
                                         toUInt8(status != 'error' AND partial = 0)))) AS units
FROM call_costs
WHERE first_piece = 1
  AND minute >= p_start AND minute < p_end + INTERVAL 1 DAY
  AND task_id IN (SELECT task_id FROM started)
GROUP BY task_id
ORDER BY task_id
