-- Live operations, time series over a WIDE range, from the per-minute pre-aggregation
-- ops_engine_minutes (migration 1006): per bucket of {bucket_s} seconds (a multiple of 60) and per
-- replica (replica = '' rows are the fleet), engine requests, output tokens, errors and t-digest
-- quantiles (seconds) of TTFT, per-request ITL and e2e. Minutes are by request end; [start, end)
-- is taken at minute granularity. Same columns as ops_latency_series.sql (errors / attempts: the
-- gateway's view where it routed).
SELECT
    toStartOfInterval(e.minute, toIntervalSecond({bucket_s:UInt32})) AS bucket,
    e.replica AS replica,
    sum(e.requests) AS requests,
    sum(e.output_tokens) AS output_tokens_sum,
    if(sum(e.gateway_attempts) > 0, sum(e.gateway_errors), sum(e.errors)) AS errors,
    quantilesTDigestMerge(0.5, 0.95, 0.99)(e.ttft_q) AS ttft_q,
    quantileTDigestMerge(0.95)(e.itl_q) AS itl_p95_s,
    quantileTDigestMerge(0.95)(e.e2e_q) AS e2e_p95_s,
    if(sum(e.gateway_attempts) > 0, sum(e.gateway_attempts), sum(e.requests)) AS attempts
FROM ops_engine_minutes AS e
WHERE e.minute >= toStartOfMinute({start:DateTime64(3)}) AND e.minute < {end:DateTime64(3)}
  AND ({model:String} = '' OR e.model = {model:String})
GROUP BY GROUPING SETS ((bucket), (bucket, replica))
ORDER BY bucket, replica
