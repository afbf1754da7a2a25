-- Live operations, fleet tiles: one row per window, 'current' = [start, end) and 'previous' =
-- [prev_start, start); a call belongs to the window in which it ENDED (finished requests only).
-- Filters: ops_call_filters.sql. Raw counts and windowed quantiles only; schema/queries/ops.py derives
-- rates and ratios and documents them. Errors are the replica's fault only: error_class
-- upstream_error or timeout (docs/telemetry.md "Error classes").
WITH {prev_start:DateTime64(3)} AS p_from
SELECT
    if(end_time >= {start:DateTime64(3)}, 'current', 'previous') AS window,
    countIf(call_source = 'engine') AS engine_requests,
    sumIf(ifNull(output_tokens, 0), call_source = 'engine') AS engine_output_tokens,
    sumIf(ifNull(prompt_tokens, 0), call_source = 'engine') AS engine_prompt_tokens,
    countIf(call_source = 'engine' AND error_class IN ('upstream_error', 'timeout')) AS engine_errors,
    quantilesExactIf(0.5, 0.95, 0.99)(ttft_s, call_source = 'engine' AND ttft_s IS NOT NULL) AS ttft_q,
    quantileExactIf(0.95)(decode_s / (ifNull(output_tokens, 0) - 1),
        call_source = 'engine' AND ifNull(output_tokens, 0) > 1 AND decode_s IS NOT NULL) AS itl_p95_s,
    quantileExactIf(0.95)(e2e_s, call_source = 'engine') AS e2e_p95_s,
    countIf(call_source = 'gateway') AS gateway_attempts,
    countIf(call_source = 'gateway' AND error_class IN ('upstream_error', 'timeout')) AS gateway_errors,
    uniqExactIf(parent_span_id, call_source = 'gateway') AS gateway_requests,
    countIf(call_source = 'client') AS client_attempts,
    countIf(call_source = 'client' AND ifNull(task_attempt, 1) >= 2) AS client_retries,
    countIf(call_source = 'client' AND error_class IN ('upstream_error', 'timeout')) AS client_errors
FROM llm_calls
WHERE start_time >= p_from - INTERVAL 1 HOUR AND start_time < {end:DateTime64(3)}
  AND end_time >= p_from AND end_time < {end:DateTime64(3)}
  -- include: ops_call_filters
GROUP BY window
