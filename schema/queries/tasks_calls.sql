-- Every unit of GPU work of one task (no `unspanned` rows: they belong to no task), in start order: its pieces (one per minute) summed back
-- into one row per call. Money USD, latencies seconds, times UTC. The category is re-derived
-- from the task's final outcome (tasks) with the jobs' rule, so it agrees with the tasks row even
-- for pieces computed before the outcome was known; a task with no row yet keeps the pieces'.
WITH
    calls AS (
        SELECT
            call_id, any(trace_id) AS trace_id, any(call_source) AS call_source, any(replica) AS replica,
            any(gpu_type) AS gpu_type, any(model) AS model, any(task_step) AS task_step,
            any(task_call) AS task_call, any(task_attempt) AS task_attempt, min(start_time) AS start_time, max(end_time) AS end_time,
            any(status) AS status, any(error_type) AS error_type, any(error_class) AS error_class,
            any(finish_reason) AS finish_reason,
            max(partial) AS partial, sum(prompt_tokens) AS prompt_tokens, sum(cached_tokens) AS cached_tokens,
            sum(output_tokens) AS output_tokens, any(ttft_s) AS ttft_s, any(e2e_s) AS e2e_s,
            sum(work) AS work, sum(cost_usd) AS cost_usd, argMax(category, computed_at) AS stored_category,
            count() AS minutes
        FROM call_costs
        WHERE task_id = {task_id:String}
        GROUP BY call_id
    ),
    (SELECT any(outcome) FROM tasks WHERE task_id = {task_id:String}) AS final_outcome,
    (SELECT count() FROM tasks WHERE task_id = {task_id:String}) AS has_task_row,
    steps AS (
        SELECT task_step AS s_step, task_call AS s_call, maxIf(task_attempt, status != 'error' AND partial = 0) AS ok_attempt
        FROM calls GROUP BY task_step, task_call
    )
SELECT
    c.call_id AS call_id, c.trace_id AS trace_id, c.call_source AS call_source, c.replica AS replica,
    c.gpu_type AS gpu_type, c.model AS model, c.task_step AS task_step, c.task_attempt AS task_attempt,
    c.start_time AS start_time, c.end_time AS end_time, c.status AS status, c.error_type AS error_type,
    c.finish_reason AS finish_reason, c.partial AS partial, c.prompt_tokens AS prompt_tokens,
    c.cached_tokens AS cached_tokens, c.output_tokens AS output_tokens, c.ttft_s AS ttft_s, c.e2e_s AS e2e_s,
    c.work AS work, c.cost_usd AS cost_usd,
    if(has_task_row = 0, c.stored_category,
       multiIf(final_outcome IN ('failure', 'abandoned'), 'failed_task_waste',
               final_outcome != 'success', 'pending',
               c.status != 'error' AND c.partial = 0 AND c.task_attempt = s.ok_attempt, 'useful',
               'retry_waste')) AS category,
    c.minutes AS minutes,
    c.task_call AS task_call,
    c.error_class AS error_class
FROM calls AS c
LEFT JOIN steps AS s ON s.s_step = c.task_step AND s.s_call = c.task_call
ORDER BY start_time, call_id
