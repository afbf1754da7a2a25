-- Explicit-window run of the call_costs job: resolve the calls of [ws, we) once into
-- resolved_calls_runs under this run's id, reconcile them with the engine counters into
-- reconciliation_runs, replace the history rows of the window with the job
-- view's output (the same views the refreshable materialized views run). The scratch rows stay
-- until the replica_minutes job (which reconciles them with the counters) has run.
INSERT INTO resolved_calls_runs (run_id, call_id, trace_id, call_source, replica, gpu_type, model, task_id, task_type,
                                 tenant_id, task_step, task_attempt, task_call, prompt_tokens, cached_tokens,
                                 cached_source, output_tokens, choices, ttft_s, user_ttft_s, user_ttft_source, e2e_s,
                                 status, error_type, error_class, finish_reason, partial, start_time, end_time, call_work)
SELECT {run_id:UInt64}, * FROM job_resolved_calls(ws = {ws:DateTime}, we = {we:DateTime});
INSERT INTO reconciliation_runs (run_id, replica, minute, covers_from, covers_to, counter_prompt_tokens,
                                 counter_generation_tokens, counter_cached_tokens, hit_rate, preemptions, counted_tokens,
                                 residual_prompt, residual_output, gap_work, span_work, total_work, saturated)
SELECT {run_id:UInt64}, * FROM job_reconciliation(ws = {ws:DateTime}, we = {we:DateTime}, run_id = {run_id:UInt64});
INSERT INTO call_costs_history SELECT * FROM job_call_costs(ws = {ws:DateTime}, we = {we:DateTime}, run_id = {run_id:UInt64});
