-- Live operations, per-replica engine gauges per {bucket_s}-second bucket from the per-minute
-- rollup ops_gauge_minutes (migration 1006): mean vllm:num_requests_running, _waiting and
-- vllm:kv_cache_usage_perc (0..1) of each replica. Minute resolution: buckets under a minute show
-- the minute's mean.
SELECT
    toStartOfInterval(minute, toIntervalSecond({bucket_s:UInt32})) AS bucket,
    replica,
    sumIf(value_sum, metric = 'vllm:num_requests_running')
        / nullIf(sumIf(points, metric = 'vllm:num_requests_running'), 0) AS running,
    sumIf(value_sum, metric = 'vllm:num_requests_waiting')
        / nullIf(sumIf(points, metric = 'vllm:num_requests_waiting'), 0) AS waiting,
    sumIf(value_sum, metric IN ('vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc'))
        / nullIf(sumIf(points, metric IN ('vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc')), 0) AS kv_usage
FROM ops_gauge_minutes
WHERE minute >= toStartOfMinute({start:DateTime}) AND minute < {end:DateTime}
  AND ({model:String} = '' OR model = {model:String})
GROUP BY bucket, replica
ORDER BY bucket, replica
