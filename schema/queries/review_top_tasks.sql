-- Weekly review: the most expensive tasks that ended in [start, end) (same columns as tasks_table),
-- most expensive first; failed_only = 1 keeps outcomes failure and abandoned.
SELECT
    task_id, task_type, tenant_id, model, outcome, has_root, start_time, end_time, e2e_s, ttft_s,
    steps, attempts, calls, prompt_tokens, cached_tokens, output_tokens,
    cost_usd, useful_usd, retry_waste_usd, failed_task_waste_usd, pending_usd,
    partial_calls, partial_tokens, partial_usd, slo_ttft_ms, slo_e2e_ms, slo_met
FROM tasks
WHERE minute >= {start:DateTime} AND minute < {end:DateTime}
  AND ({failed_only:UInt8} = 0 OR outcome IN ('failure', 'abandoned'))
ORDER BY cost_usd DESC, task_id
LIMIT {limit:UInt32}
