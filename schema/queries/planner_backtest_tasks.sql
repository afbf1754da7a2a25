-- Planner backtest: the tasks that ended in [start, end) (cost job's `tasks`) outside the excluded
-- windows [ex_from[i], ex_to[i]) (minutes of incidents the replay cannot model), per hour and task
-- type, per hour, per type and overall: hour = 1970-01-01 00:00:00 on the rows of all hours,
-- task_type = '' on the rows of all types. tasks, successful_tasks; ttft_p95_s: exact p95 of the
-- successful tasks' worst-call TTFT (seconds, as planner_task_latency); calls, attempts (attempts -
-- calls = retries); prompt_tokens / output_tokens: tokens of the tasks' calls (the lengths replayed).
WITH
    {start:DateTime} AS p_start,
    {end:DateTime} AS p_end
SELECT
    hour,
    task_type,
    count() AS tasks,
    countIf(outcome = 'success') AS successful_tasks,
    quantileExactIf(0.95)(ttft_s, outcome = 'success' AND ttft_s IS NOT NULL) AS ttft_p95_s,
    sum(calls) AS calls,
    sum(attempts) AS attempts,
    sum(prompt_tokens) AS prompt_tokens,
    sum(output_tokens) AS output_tokens
FROM (
    SELECT toStartOfHour(minute) AS hour, task_type, outcome, ttft_s, calls, attempts, prompt_tokens, output_tokens
    FROM tasks
    WHERE minute >= p_start AND minute < p_end
      AND NOT arrayExists((a, b) -> minute >= a AND minute < b, {ex_from:Array(DateTime)}, {ex_to:Array(DateTime)})
)
GROUP BY GROUPING SETS ((hour, task_type), (hour), (task_type), ())
ORDER BY hour, task_type
