-- Per replica, over engine calls that ENDED in (now - window_s, now]: request count, TTFT p50 (s),
-- inter-token latency p50 (s; decode_s / (output_tokens - 1), the mean gap of one request, as vLLM's
-- request_time_per_output_token), errors (the replica's fault: error_class upstream_error or timeout,
-- docs/telemetry.md; a client abort or a 400 is not), queue-time p95 (s)
-- and the replica's GPU type (resource attribute gpu.type; '' when unknown).
-- start_time is bounded too (lookback_s = the longest call we expect) so the primary key prunes parts.
SELECT
    replica,
    any(gpu_type) AS gpu_type,
    count() AS requests,
    countIf(ttft_s IS NOT NULL) AS ttft_samples,
    quantileExactIf(0.5)(ifNull(ttft_s, 0), ttft_s IS NOT NULL) AS ttft_p50_s,
    countIf(ifNull(output_tokens, 0) > 1 AND decode_s IS NOT NULL) AS itl_samples,
    quantileExactIf(0.5)(ifNull(decode_s, 0) / greatest(ifNull(output_tokens, 2) - 1, 1),
                         ifNull(output_tokens, 0) > 1 AND decode_s IS NOT NULL) AS itl_p50_s,
    countIf(error_class IN ('upstream_error', 'timeout')) AS errors,
    quantileExactIf(0.95)(ifNull(queue_s, 0), queue_s IS NOT NULL) AS queue_p95_s
FROM llm_calls
WHERE call_source = 'engine'
  AND start_time >= {now:DateTime64(3, 'UTC')} - toIntervalSecond({window_s:UInt32} + {lookback_s:UInt32})
  AND end_time > {now:DateTime64(3, 'UTC')} - toIntervalSecond({window_s:UInt32})
  AND end_time <= {now:DateTime64(3, 'UTC')}
  AND replica != ''
GROUP BY replica
ORDER BY replica
