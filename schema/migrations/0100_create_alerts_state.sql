-- The alert evaluator's lifecycle state (alerts/state.py), so an evaluation resumes exactly where
-- the previous one stopped: pending/firing alerts with their clear countdown, no-data time, frozen
-- baselines and notification status, the frozen retry baseline and the time evaluated up to.
-- `infercost alerts --once` (cron-style or a replay) loads it, evaluates once and saves it; the
-- service saves it after every evaluation, so a restart loses no countdown.
-- One row per save; readers take the newest per evaluator (argMax on saved_at), and the
-- ReplacingMergeTree keeps only the newest per evaluator once parts merge. state: JSON.
CREATE TABLE IF NOT EXISTS alerts_state (
    evaluator String,
    saved_at DateTime64(3, 'UTC'),
    evaluated_at DateTime64(3, 'UTC'),
    state String CODEC(ZSTD(3))
) ENGINE = ReplacingMergeTree(saved_at)
ORDER BY evaluator;
