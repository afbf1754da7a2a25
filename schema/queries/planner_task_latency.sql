-- Planner: latency and SLO attainment per task type of the tasks that ended in [start, end)
-- (cost job's `tasks`), plus one row for all types (task_type = ''). ttft_s is a task's worst TTFT
-- among its accepted calls, e2e_s its end - start (seconds, schema/jobs/README.md); quantiles are
-- exact over successful tasks. slo_met_tasks: successes within every budget the task carried
-- (slo_met); slo_attainment = slo_met_tasks / tasks (failed and abandoned tasks count as misses).
-- slo_ttft_ms / slo_e2e_ms: the budget most tasks of the type carried (milliseconds).
WITH
    {start:DateTime} AS p_start,
    {end:DateTime} AS p_end
SELECT
    task_type,
    count() AS tasks,
    countIf(outcome = 'success') AS successful_tasks,
    countIf(outcome = 'success' AND slo_met = 1) AS slo_met_tasks,
    if(tasks > 0, slo_met_tasks / tasks, NULL) AS slo_attainment,
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
