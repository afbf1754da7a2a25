-- Live operations, time series: per bucket of {bucket_s} seconds (by request end) and per replica,
-- engine requests, output tokens, errors and windowed quantiles (seconds) of TTFT, ITL (per-request
-- mean inter-token latency) and end-to-end latency. Never lifetime averages: every quantile is over
-- the requests of its bucket only. replica = '' rows are the fleet (GROUPING SETS).
-- errors / attempts: failed gateway attempts (the replica's fault: error_class upstream_error or
-- timeout) / gateway attempts where the gateway routed to the replica in that bucket, else the
-- engine rows' own.
WITH {start:DateTime64(3)} AS p_from
SELECT
    toStartOfInterval(end_time, toIntervalSecond({bucket_s:UInt32})) AS bucket,
    replica,
    countIf(call_source = 'engine') AS requests,
    sumIf(ifNull(output_tokens, 0), call_source = 'engine') AS output_tokens_sum,
    if(countIf(call_source = 'gateway') > 0, countIf(call_source = 'gateway' AND error_class IN ('upstream_error', 'timeout')),
       countIf(call_source = 'engine' AND error_class IN ('upstream_error', 'timeout'))) AS errors,
    quantilesIf(0.5, 0.95, 0.99)(ttft_s, call_source = 'engine' AND ttft_s IS NOT NULL) AS ttft_q,
    quantileIf(0.95)(decode_s / (ifNull(output_tokens, 0) - 1),
        call_source = 'engine' AND ifNull(output_tokens, 0) > 1 AND decode_s IS NOT NULL) AS itl_p95_s,
    quantileIf(0.95)(e2e_s, call_source = 'engine') AS e2e_p95_s,
    if(countIf(call_source = 'gateway') > 0, countIf(call_source = 'gateway'), countIf(call_source = 'engine')) AS attempts
FROM llm_calls
WHERE call_source IN ('engine', 'gateway') AND replica != ''
  AND start_time >= p_from - INTERVAL 1 HOUR AND start_time < {end:DateTime64(3)}
  AND end_time >= p_from AND end_time < {end:DateTime64(3)}
  -- include: ops_call_filters
GROUP BY GROUPING SETS ((bucket), (bucket, replica))
ORDER BY bucket, replica
