-- Live operations, per-replica health over [start, end): engine requests (vLLM llm_request rows)
-- by the replica that served them, with windowed quantiles (seconds), error rate inputs and tokens.
-- Gateway attempts that failed before reaching an engine (crashed / refusing replica) are counted
-- per replica too (gateway_errors), since the engine never exported a span for them. Errors count
-- against a replica only when they were its fault: error_class upstream_error or timeout.
WITH {start:DateTime64(3)} AS p_from
SELECT
    replica,
    anyIf(gpu_type, call_source = 'engine') AS gpu_type,
    countIf(call_source = 'engine') AS requests,
    sumIf(ifNull(output_tokens, 0), call_source = 'engine') AS output_tokens_sum,
    countIf(call_source = 'engine' AND error_class IN ('upstream_error', 'timeout')) AS engine_errors,
    countIf(call_source = 'gateway') AS gateway_attempts,
    countIf(call_source = 'gateway' AND error_class IN ('upstream_error', 'timeout')) AS gateway_errors,
    quantileExactIf(0.95)(ttft_s, call_source = 'engine' AND ttft_s IS NOT NULL) AS ttft_p95_s,
    quantileExactIf(0.95)(decode_s / (ifNull(output_tokens, 0) - 1),
        call_source = 'engine' AND ifNull(output_tokens, 0) > 1 AND decode_s IS NOT NULL) AS itl_p95_s,
    quantileExactIf(0.95)(e2e_s, call_source = 'engine') AS e2e_p95_s
FROM llm_calls
WHERE call_source IN ('engine', 'gateway') AND replica != ''
  AND start_time >= p_from - INTERVAL 1 HOUR AND start_time < {end:DateTime64(3)}
  AND end_time >= p_from AND end_time < {end:DateTime64(3)}
  -- include: ops_call_filters
GROUP BY replica
ORDER BY replica
