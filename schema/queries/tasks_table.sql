-- Tasks that ended in [start, end), newest first; search matches task id, type or tenant
-- (case-insensitive substring, '' = all). Money in USD, times UTC, latencies in seconds.
-- A task's minute is the minute it ended (toStartOfMinute(end_time), the tasks job), so the newest
-- `limit` tasks all lie in the minutes from p_from on, the minute of the limit-th newest matching
-- task: the sort key narrows the full read to those minutes (a week at 1M tasks read every row and
-- column to keep 1,000). Fewer matches than `limit`: min() of them, or 1970 for none (p_start wins).
WITH
    {start:DateTime} AS p_start,
    {end:DateTime} AS p_end,
    {search:String} AS p_search,
    (SELECT min(minute) FROM (
        SELECT minute FROM tasks
        WHERE minute >= p_start AND minute < p_end
          AND (p_search = ''
               OR positionCaseInsensitive(task_id, p_search) > 0
               OR positionCaseInsensitive(task_type, p_search) > 0
               OR positionCaseInsensitive(tenant_id, p_search) > 0)
        ORDER BY minute DESC
        LIMIT {limit:UInt32})) AS p_from
SELECT
    task_id, task_type, tenant_id, model, outcome, has_root, start_time, end_time, e2e_s, ttft_s,
    steps, attempts, calls, prompt_tokens, cached_tokens, output_tokens,
    cost_usd, useful_usd, retry_waste_usd, failed_task_waste_usd, pending_usd,
    partial_calls, partial_tokens, partial_usd, slo_ttft_ms, slo_e2e_ms, slo_met, context_source
FROM tasks
WHERE minute >= greatest(p_start, p_from) AND minute < p_end
  AND (p_search = ''
       OR positionCaseInsensitive(task_id, p_search) > 0
       OR positionCaseInsensitive(task_type, p_search) > 0
       OR positionCaseInsensitive(tenant_id, p_search) > 0)
ORDER BY end_time DESC, task_id
LIMIT {limit:UInt32}
