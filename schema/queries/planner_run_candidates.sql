-- Planner: the candidates of one run, cheapest cost per successful task first (no CPST last).
SELECT candidate, origin, spec, is_current, meets_slo, on_frontier, recommended, replicas, gpus, spend_usd,
       cpst_usd, attributed_cpst_usd, idle_ratio, goodput_per_hour, tasks, successful_tasks, ttft_p95_s,
       e2e_p95_s, slo_attainment_min, useful_usd, retry_waste_usd, failed_task_waste_usd, unattributed_usd,
       pending_usd, idle_usd, wall_seconds
FROM planner_candidates
WHERE run_id = {run_id:String}
ORDER BY isNull(cpst_usd), cpst_usd, candidate
