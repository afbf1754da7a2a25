-- Explicit-window run, first step beside run_inputs.sql: resolve the calls of [ws, we) once into
-- resolved_calls_runs under this run's id (the view the refreshable materialized views run). The
-- reconcile, call_costs and replica_minutes steps read these scratch rows; the runner drops them
-- after (drop_scratch.sql).
INSERT INTO resolved_calls_runs (run_id, call_id, trace_id, call_source, replica, gpu_type, model, task_id, task_type,
                                 tenant_id, task_step, task_attempt, task_call, prompt_tokens, cached_tokens,
                                 cached_source, output_tokens, choices, ttft_s, user_ttft_s, user_ttft_source, e2e_s,
                                 status, error_type, error_class, finish_reason, partial, start_time, end_time, call_work,
                                 reached_engine)
SELECT {run_id:UInt64}, * FROM job_resolved_calls(ws = {ws:DateTime}, we = {we:DateTime});
