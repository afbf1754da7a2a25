-- Planner: one run with its JSON documents (assumptions, workload summary, levers).
SELECT run_id, created_at, period_start, period_end, status, backtest_passed, measured_cpst_usd,
       replayed_cpst_usd, measured_ttft_p95_s, replayed_ttft_p95_s, tolerance, current_candidate,
       recommended_candidate, predicted_saving_ratio, predicted_saving_usd, candidates, wall_seconds, message,
       assumptions, workload, levers
FROM planner_runs
WHERE run_id = {run_id:String}
ORDER BY created_at DESC
LIMIT 1
