-- Planner, client retry behaviour: attempts that the client abandoned on its per-attempt timeout
-- (error.type 'timeout', docs/telemetry.md) in [start, end): how many and how long they lasted
-- (seconds; the median is the client's timeout), and the most attempts any call needed.
WITH
    {start:DateTime} AS p_start,
    {end:DateTime} AS p_end
SELECT
    countIf(error_type = 'timeout') AS timeouts,
    quantileExactIf(0.5)(e2e_s, error_type = 'timeout') AS timeout_median_s,
    count() AS attempts,
    max(ifNull(task_attempt, 1)) AS max_attempt,
    countIf(ifNull(task_attempt, 1) > 1) AS retries
FROM llm_calls
WHERE call_source = 'client' AND start_time >= p_start AND start_time < p_end AND task_id != ''
