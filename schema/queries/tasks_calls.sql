-- Every unit of GPU work of one task, in start order: its pieces (one per minute) summed back
-- into one row per call. Money USD, latencies seconds, times UTC.
SELECT
    call_id, any(trace_id) AS trace_id, any(call_source) AS call_source, any(replica) AS replica,
    any(gpu_type) AS gpu_type, any(model) AS model, any(task_step) AS task_step,
    any(task_attempt) AS task_attempt, min(start_time) AS start_time, max(end_time) AS end_time,
    any(status) AS status, any(error_type) AS error_type, any(finish_reason) AS finish_reason,
    max(partial) AS partial, sum(prompt_tokens) AS prompt_tokens, sum(cached_tokens) AS cached_tokens,
    sum(output_tokens) AS output_tokens, any(ttft_s) AS ttft_s, any(e2e_s) AS e2e_s,
    sum(work) AS work, sum(cost_usd) AS cost_usd, argMax(category, computed_at) AS category,
    count() AS minutes
FROM call_costs
WHERE task_id = {task_id:String}
GROUP BY call_id
ORDER BY start_time, call_id
