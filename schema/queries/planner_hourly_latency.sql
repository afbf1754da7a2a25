-- Planner: per hour of [start, end), the tasks that ended in it, how many did not succeed, and
-- the p95 TTFT of the successful ones (seconds): where a replay departs from the measured period.
WITH
    {start:DateTime} AS p_start,
    {end:DateTime} AS p_end
SELECT
    toStartOfHour(minute) AS hour,
    count() AS tasks,
    countIf(outcome != 'success') AS unsuccessful_tasks,
    quantileExactIf(0.95)(ttft_s, outcome = 'success' AND ttft_s IS NOT NULL) AS ttft_p95_s
FROM tasks
WHERE minute >= p_start AND minute < p_end
GROUP BY hour
ORDER BY hour
