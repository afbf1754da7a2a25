-- Live operations, time series: per bucket of {bucket_s} seconds (by request end) and per replica,
-- engine requests, output tokens, errors and windowed quantiles (seconds) of TTFT, ITL (per-request
-- mean inter-token latency) and end-to-end latency. Never lifetime averages: every quantile is over
-- the requests of its bucket only. replica = '' rows are the fleet (GROUPING SETS).
WITH ctx AS (
    SELECT span_id
    FROM llm_calls
    WHERE call_source IN ('gateway', 'client')
      AND start_time >= {start:DateTime64(3)} - INTERVAL 1 HOUR AND start_time < {end:DateTime64(3)}
      AND ({tenant:String} = '' OR tenant_id = {tenant:String})
      AND ({task_type:String} = '' OR task_type = {task_type:String})
)
SELECT
    toStartOfInterval(end_time, toIntervalSecond({bucket_s:UInt32})) AS bucket,
    replica,
    count() AS requests,
    sum(ifNull(output_tokens, 0)) AS output_tokens_sum,
    countIf(status = 'error' OR finish_reason IN ('abort', 'error')) AS errors,
    quantilesIf(0.5, 0.95, 0.99)(ttft_s, ttft_s IS NOT NULL) AS ttft_q,
    quantileIf(0.95)(decode_s / (ifNull(output_tokens, 0) - 1), ifNull(output_tokens, 0) > 1 AND decode_s IS NOT NULL) AS itl_p95_s,
    quantile(0.95)(e2e_s) AS e2e_p95_s
FROM llm_calls
WHERE call_source = 'engine'
  AND start_time >= {start:DateTime64(3)} - INTERVAL 1 HOUR AND start_time < {end:DateTime64(3)}
  AND end_time >= {start:DateTime64(3)} AND end_time < {end:DateTime64(3)}
  AND ({model:String} = '' OR model = {model:String})
  AND (({tenant:String} = '' AND {task_type:String} = '') OR parent_span_id IN (SELECT span_id FROM ctx))
GROUP BY GROUPING SETS ((bucket), (bucket, replica))
ORDER BY bucket, replica
