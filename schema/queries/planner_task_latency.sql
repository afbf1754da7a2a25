-- Planner: latency and SLO attainment per task type of the tasks that ended in [start, end)
-- (cost job's `tasks`), plus one row for all types (task_type = ''). ttft_s is a task's worst TTFT
-- among its accepted calls, e2e_s its end - start (seconds, schema/jobs/README.md); quantiles are
-- exact over successful tasks. slo_met_tasks: successes within every budget the task carried
-- (slo_met). client_failed_tasks: failures whose every client call was answered (a step or call
-- succeeded, possibly after retries, for each one sent): their client rejected a result, which no
-- fleet changes, so slo_attainment = slo_met_tasks / (tasks - client_failed_tasks); failures on a
-- failed call and abandoned tasks count as misses. slo_ttft_ms / slo_e2e_ms: the budget most tasks
-- of the type carried (milliseconds).
WITH
    {start:DateTime} AS p_start,
    {end:DateTime} AS p_end,
    failed AS (
        SELECT task_id FROM tasks
        WHERE minute >= p_start AND minute < p_end AND outcome = 'failure' AND task_id != ''
    ),
    client_failed AS (
        SELECT task_id FROM llm_calls
        WHERE call_source = 'client'
          AND start_time >= p_start - INTERVAL 1 DAY AND start_time < p_end
          AND task_id IN (SELECT task_id FROM failed)
        GROUP BY task_id
        -- as many answered attempts as first attempts: every call sent got its answer
        HAVING countIf(status != 'error' AND error_type = '') >= countIf(ifNull(task_attempt, 1) <= 1)
    )
SELECT
    task_type,
    count() AS tasks,
    countIf(outcome = 'success') AS successful_tasks,
    countIf(outcome = 'success' AND slo_met = 1) AS slo_met_tasks,
    countIf(outcome = 'failure' AND task_id IN (SELECT task_id FROM client_failed)) AS client_failed_tasks,
    if(tasks > client_failed_tasks, slo_met_tasks / (tasks - client_failed_tasks), NULL) AS slo_attainment,
    quantileExactIf(0.5)(ttft_s, outcome = 'success' AND ttft_s IS NOT NULL) AS ttft_p50_s,
    quantileExactIf(0.95)(ttft_s, outcome = 'success' AND ttft_s IS NOT NULL) AS ttft_p95_s,
    quantileExactIf(0.5)(e2e_s, outcome = 'success') AS e2e_p50_s,
    quantileExactIf(0.95)(e2e_s, outcome = 'success') AS e2e_p95_s,
    topKIf(1)(slo_ttft_ms, slo_ttft_ms IS NOT NULL)[1] AS slo_ttft_ms,
    topKIf(1)(slo_e2e_ms, slo_e2e_ms IS NOT NULL)[1] AS slo_e2e_ms
FROM tasks
WHERE minute >= p_start AND minute < p_end
GROUP BY GROUPING SETS ((task_type), ())
ORDER BY task_type
