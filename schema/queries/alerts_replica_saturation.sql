-- Per replica over (now - window_s, now]: mean and max KV-cache use (0..1; vLLM
-- vllm:kv_cache_usage_perc, older name vllm:gpu_cache_usage_perc), mean and max running requests
-- (vllm:num_requests_running), mean waiting requests, and the number of points.
SELECT
    if(ResourceAttributes['service.instance.id'] != '', ResourceAttributes['service.instance.id'], ServiceName) AS replica,
    avgIf(Value, MetricName IN ('vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc')) AS kv_mean,
    maxIf(Value, MetricName IN ('vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc')) AS kv_max,
    avgIf(Value, MetricName = 'vllm:num_requests_running') AS running_mean,
    maxIf(Value, MetricName = 'vllm:num_requests_running') AS running_max,
    avgIf(Value, MetricName = 'vllm:num_requests_waiting') AS waiting_mean,
    count() AS points
FROM otel_metrics_gauge
WHERE MetricName IN ('vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc', 'vllm:num_requests_running',
                     'vllm:num_requests_waiting')
  AND TimeUnix > {now:DateTime64(3, 'UTC')} - toIntervalSecond({window_s:UInt32})
  AND TimeUnix <= {now:DateTime64(3, 'UTC')}
GROUP BY replica
ORDER BY replica
