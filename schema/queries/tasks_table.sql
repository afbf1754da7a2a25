-- Tasks that ended in [start, end), newest first; search matches task id, type or tenant
-- (case-insensitive substring, '' = all). Money in USD, times UTC, latencies in seconds.
SELECT
    task_id, task_type, tenant_id, model, outcome, has_root, start_time, end_time, e2e_s, ttft_s,
    steps, attempts, calls, prompt_tokens, cached_tokens, output_tokens,
    cost_usd, useful_usd, retry_waste_usd, failed_task_waste_usd, pending_usd,
    partial_calls, partial_tokens, partial_usd, slo_ttft_ms, slo_e2e_ms, slo_met
FROM tasks
WHERE minute >= {start:DateTime} AND minute < {end:DateTime}
  AND ({search:String} = ''
       OR positionCaseInsensitive(task_id, {search:String}) > 0
       OR positionCaseInsensitive(task_type, {search:String}) > 0
       OR positionCaseInsensitive(tenant_id, {search:String}) > 0)
ORDER BY end_time DESC, task_id
LIMIT {limit:UInt32}
