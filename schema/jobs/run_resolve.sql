-- Explicit-window run, first step: resolve the calls of [ws, we) once into resolved_calls_runs
-- under this run's id, and reconcile them with the engine counters into reconciliation_runs (the
-- same views the refreshable materialized views run). The call_costs and replica_minutes steps
-- read these scratch rows; the runner drops them after (drop_scratch.sql).
INSERT INTO resolved_calls_runs (run_id, call_id, trace_id, call_source, replica, gpu_type, model, task_id, task_type,
                                 tenant_id, task_step, task_attempt, task_call, prompt_tokens, cached_tokens,
                                 cached_source, output_tokens, choices, ttft_s, user_ttft_s, user_ttft_source, e2e_s,
                                 status, error_type, error_class, finish_reason, partial, start_time, end_time, call_work)
SELECT {run_id:UInt64}, * FROM job_resolved_calls(ws = {ws:DateTime}, we = {we:DateTime});
INSERT INTO reconciliation_runs (run_id, replica, minute, covers_from, covers_to, counter_prompt_tokens,
                                 counter_generation_tokens, counter_cached_tokens, hit_rate, preemptions, counted_tokens,
                                 residual_prompt, residual_output, gap_work, span_work, total_work, saturated)
SELECT {run_id:UInt64}, * FROM job_reconciliation(ws = {ws:DateTime}, we = {we:DateTime}, run_id = {run_id:UInt64});
