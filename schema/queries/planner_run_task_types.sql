-- Planner: per candidate and task type of one run, latency vs SLO and its attainment.
SELECT candidate, task_type, tasks, successful_tasks, slo_attainment, ttft_p95_s, e2e_p95_s, slo_ttft_ms,
       slo_e2e_ms, meets_slo
FROM planner_candidate_types
WHERE run_id = {run_id:String}
ORDER BY candidate, task_type
