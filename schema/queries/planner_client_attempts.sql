-- Planner, client retry behaviour: every client attempt span (docs/telemetry.md, one per client
-- attempt) of the steps that were retried, for the tasks that started in [start, end). The planner
-- estimates the SDK's RetryPolicy from them (serving/plans.py): attempts per call, the per-attempt
-- timeout (duration of attempts that ended in error.type 'timeout'), the backoff (gap between an
-- attempt's end and the next attempt's start). start/end DateTime64(9) UTC; duration_s seconds.
WITH
    {start:DateTime} AS p_start,
    {end:DateTime} AS p_end,
    retried AS (
        SELECT task_id, task_step
        FROM llm_calls
        WHERE call_source = 'client' AND start_time >= p_start AND start_time < p_end
          AND ifNull(task_attempt, 1) > 1 AND task_id != ''
        GROUP BY task_id, task_step
    )
SELECT
    task_id,
    task_step AS step,
    ifNull(task_attempt, 1) AS attempt,
    start_time,
    end_time,
    e2e_s AS duration_s,
    status,
    error_type
FROM llm_calls
WHERE call_source = 'client'
  AND start_time >= p_start AND start_time < p_end + INTERVAL 1 HOUR
  AND (task_id, task_step) IN (SELECT task_id, task_step FROM retried)
ORDER BY task_id, step, start_time
