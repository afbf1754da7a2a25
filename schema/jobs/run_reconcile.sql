-- Explicit-window run, after run_inputs.sql and run_resolve.sql: the run's resolved calls reconciled
-- with its engine counters (and its gauges' saturation) into reconciliation_runs. The call_costs and
-- replica_minutes steps read it; the runner drops it after (drop_scratch.sql).
INSERT INTO reconciliation_runs (run_id, replica, minute, covers_from, covers_to, counter_prompt_tokens,
                                 counter_generation_tokens, counter_cached_tokens, hit_rate, preemptions, counted_tokens,
                                 residual_prompt, residual_output, gap_work, span_work, total_work, saturated)
SELECT {run_id:UInt64}, * FROM job_reconciliation(ws = {ws:DateTime}, we = {we:DateTime}, run_id = {run_id:UInt64});
