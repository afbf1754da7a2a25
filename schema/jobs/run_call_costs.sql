-- Explicit-window run of the call_costs job: resolve the calls of [ws, we) once into
-- resolved_calls_runs under this run's id, replace the history rows of the window with the job
-- view's output (the same views the refreshable materialized views run), drop the scratch rows.
INSERT INTO resolved_calls_runs (run_id, call_id, trace_id, call_source, replica, gpu_type, model, task_id, task_type,
                                 tenant_id, task_step, task_attempt, prompt_tokens, cached_tokens, output_tokens,
                                 ttft_s, e2e_s, status, error_type, error_class, finish_reason, partial, start_time,
                                 end_time, call_work)
SELECT {run_id:UInt64}, * FROM job_resolved_calls(ws = {ws:DateTime}, we = {we:DateTime});
INSERT INTO call_costs_history SELECT * FROM job_call_costs(ws = {ws:DateTime}, we = {we:DateTime}, run_id = {run_id:UInt64});
DELETE FROM resolved_calls_runs WHERE run_id = {run_id:UInt64};
