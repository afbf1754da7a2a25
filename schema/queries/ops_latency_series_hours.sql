-- Live operations, time series over a MULTI-DAY range, from the hourly pre-aggregation
-- ops_engine_hours (migration 0051): per bucket of {bucket_s} seconds (a multiple of 3600) and per
-- replica (replica = '' rows are the fleet). [start, end) is taken at hour granularity. Same
-- columns as ops_latency_series.sql (errors / attempts: the gateway's view where it routed).
SELECT
    toStartOfInterval(e.hour, toIntervalSecond({bucket_s:UInt32})) AS bucket,
    e.replica AS replica,
    sum(e.requests) AS requests,
    sum(e.output_tokens) AS output_tokens_sum,
    if(sum(e.gateway_attempts) > 0, sum(e.gateway_errors), sum(e.errors)) AS errors,
    quantilesTDigestMerge(0.5, 0.95, 0.99)(e.ttft_q) AS ttft_q,
    quantileTDigestMerge(0.95)(e.itl_q) AS itl_p95_s,
    quantileTDigestMerge(0.95)(e.e2e_q) AS e2e_p95_s,
    if(sum(e.gateway_attempts) > 0, sum(e.gateway_attempts), sum(e.requests)) AS attempts
FROM ops_engine_hours AS e
WHERE e.hour >= toStartOfHour({start:DateTime64(3)}) AND e.hour < {end:DateTime64(3)}
  AND ({model:String} = '' OR e.model = {model:String})
GROUP BY GROUPING SETS ((bucket), (bucket, replica))
ORDER BY bucket, replica
