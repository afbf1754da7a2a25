-- The capacity planner's runs, candidates and per-type results.

-- The capacity and cost planner's results (infercost/planner, `infercost plan`): one row per run,
-- per candidate fleet of a run, and per (candidate, task type). Written once per run (the planner
-- replays a measured period on candidate fleets in virtual time and runs the cost jobs on each).
-- Money: Float64 USD over the run's period (never rounded); latencies seconds; ratios 0..1.
CREATE TABLE IF NOT EXISTS planner_runs
(
    `run_id` String,
    `created_at` DateTime64(3, 'UTC'),
    `period_start` DateTime('UTC') COMMENT 'the measured period replayed, [period_start, period_end)',
    `period_end` DateTime('UTC'),
    `status` LowCardinality(String) COMMENT 'recommended | no_saving | no_feasible | backtest_failed',
    `backtest_passed` UInt8 COMMENT '1 = replaying the current fleet reproduced the measured CPST and p95 TTFT within tolerance',
    `measured_cpst_usd` Nullable(Float64) COMMENT 'USD, the store\'s cost per successful task over the period',
    `replayed_cpst_usd` Nullable(Float64) COMMENT 'USD, the same from the replay of the current fleet',
    `measured_ttft_p95_s` Nullable(Float64) COMMENT 'seconds, p95 of the successful tasks\' TTFT (measured)',
    `replayed_ttft_p95_s` Nullable(Float64) COMMENT 'seconds, the same (replay)',
    `tolerance` Float64 COMMENT 'relative error the backtest accepts (0.1 = 10 %)',
    `current_candidate` String COMMENT 'name of the candidate that is the current fleet',
    `recommended_candidate` String COMMENT 'cheapest candidate meeting every SLO (\'\' = none)',
    `predicted_saving_ratio` Nullable(Float64) COMMENT '1 - CPST(recommended) / CPST(current replay)',
    `predicted_saving_usd` Nullable(Float64) COMMENT 'USD over the period: (CPST current - CPST recommended) x successful tasks of the current replay',
    `candidates` UInt32 COMMENT 'candidates evaluated',
    `wall_seconds` Float64,
    `message` String COMMENT 'why there is no recommendation, or \'\'',
    `assumptions` String COMMENT 'JSON: profiles and their sources, inferred and assumed settings',
    `workload` String COMMENT 'JSON: the extracted workload\'s summary (tasks, calls, mix, hourly shape, client behaviour)',
    `levers` String COMMENT 'JSON: the four moves as planner candidates, each with predicted saving and risk'
)
ENGINE = MergeTree
ORDER BY (created_at, run_id);

CREATE TABLE IF NOT EXISTS planner_candidates
(
    `run_id` String,
    `candidate` String,
    `origin` LowCardinality(String) COMMENT 'current | user | melange | local_search | lever',
    `spec` String COMMENT 'JSON: pools (gpu_type, count, profile, max_num_seqs), policy, gateway_retries, admission, autoscale',
    `is_current` UInt8,
    `meets_slo` UInt8 COMMENT '1 = every task type with a budget met its SLO target',
    `on_frontier` UInt8 COMMENT '1 = Pareto-optimal in (CPST, p95 TTFT, goodput)',
    `recommended` UInt8,
    `replicas` UInt16,
    `gpus` UInt16,
    `spend_usd` Float64,
    `cpst_usd` Nullable(Float64),
    `attributed_cpst_usd` Nullable(Float64),
    `idle_ratio` Nullable(Float64) COMMENT 'idle / spend',
    `goodput_per_hour` Nullable(Float64) COMMENT 'successful tasks within SLO per hour',
    `tasks` UInt64,
    `successful_tasks` UInt64,
    `ttft_p95_s` Nullable(Float64),
    `e2e_p95_s` Nullable(Float64),
    `slo_attainment_min` Nullable(Float64) COMMENT 'lowest SLO attainment over the task types',
    `useful_usd` Float64,
    `retry_waste_usd` Float64,
    `failed_task_waste_usd` Float64,
    `unattributed_usd` Float64,
    `pending_usd` Float64,
    `idle_usd` Float64,
    `wall_seconds` Float64 COMMENT 'seconds to simulate it and run the cost jobs'
)
ENGINE = MergeTree
ORDER BY (run_id, candidate);

CREATE TABLE IF NOT EXISTS planner_candidate_types
(
    `run_id` String,
    `candidate` String,
    `task_type` LowCardinality(String),
    `tasks` UInt64,
    `successful_tasks` UInt64,
    `slo_attainment` Nullable(Float64) COMMENT 'tasks that succeeded within every budget / tasks',
    `ttft_p95_s` Nullable(Float64),
    `e2e_p95_s` Nullable(Float64),
    `slo_ttft_ms` Nullable(Float64),
    `slo_e2e_ms` Nullable(Float64),
    `meets_slo` UInt8
)
ENGINE = MergeTree
ORDER BY (run_id, candidate, task_type);
