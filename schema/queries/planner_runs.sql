-- Planner: the latest runs (planner_runs, migration 1008), newest first.
SELECT run_id, created_at, period_start, period_end, status, backtest_passed, measured_cpst_usd,
       replayed_cpst_usd, measured_ttft_p95_s, replayed_ttft_p95_s, current_candidate, recommended_candidate,
       predicted_saving_ratio, predicted_saving_usd, candidates, wall_seconds, message
FROM planner_runs
ORDER BY created_at DESC, run_id
LIMIT {limit:UInt32}
