-- Live operations, engine gauges over time: per bucket of {bucket_s} seconds, the fleet's queue
-- (sum over replicas of each replica's mean vllm:num_requests_waiting in the bucket), running batch
-- (same for vllm:num_requests_running) and mean KV-cache use (0..1) across replicas.
SELECT
    bucket,
    sum(waiting) AS waiting,
    sum(running) AS running,
    avg(kv_usage) AS kv_usage
FROM (
    SELECT
        toStartOfInterval(TimeUnix, toIntervalSecond({bucket_s:UInt32})) AS bucket,
        if(ResourceAttributes['service.instance.id'] != '', ResourceAttributes['service.instance.id'], ServiceName) AS replica,
        -- per scrape, summed over the replica's engines (data parallel), then the bucket's mean
        sumIf(Value, MetricName = 'vllm:num_requests_waiting')
            / nullIf(uniqExactIf(TimeUnix, MetricName = 'vllm:num_requests_waiting'), 0) AS waiting,
        sumIf(Value, MetricName = 'vllm:num_requests_running')
            / nullIf(uniqExactIf(TimeUnix, MetricName = 'vllm:num_requests_running'), 0) AS running,
        avgIf(Value, MetricName IN ('vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc')) AS kv_usage
    FROM otel_metrics_gauge
    WHERE MetricName IN ('vllm:num_requests_running', 'vllm:num_requests_waiting',
                         'vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc')
      AND TimeUnix >= {start:DateTime64(3)} AND TimeUnix < {end:DateTime64(3)}
      AND ({model:String} = '' OR Attributes['model_name'] = {model:String})
    GROUP BY bucket, replica
)
GROUP BY bucket
ORDER BY bucket
