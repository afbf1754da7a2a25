-- One task by id (any time): the cost job's row for it (columns as tasks_table). A task's row is
-- rewritten when late data recomputes it: the newest end_time wins. Money in USD, times UTC.
SELECT
    task_id, task_type, tenant_id, model, outcome, has_root, start_time, end_time, e2e_s, ttft_s,
    steps, attempts, calls, prompt_tokens, cached_tokens, output_tokens,
    cost_usd, useful_usd, retry_waste_usd, failed_task_waste_usd, pending_usd,
    partial_calls, partial_tokens, partial_usd, slo_ttft_ms, slo_e2e_ms, slo_met, context_source
FROM tasks
WHERE task_id = {task_id:String}
ORDER BY end_time DESC
LIMIT 1
