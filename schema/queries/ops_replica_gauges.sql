-- Live operations, engine gauges per replica (vLLM /metrics, scraped into otel_metrics_gauge):
-- the LAST value in each window of vllm:num_requests_running, vllm:num_requests_waiting and
-- vllm:kv_cache_usage_perc (0..1; older vLLM: vllm:gpu_cache_usage_perc), plus the window's peak
-- KV use. 'current' = [start, end), 'previous' = [prev_start, start). Replica = the resource
-- attribute service.instance.id (docs/telemetry.md), else the service name.
SELECT
    if(TimeUnix >= {start:DateTime64(3)}, 'current', 'previous') AS window,
    if(ResourceAttributes['service.instance.id'] != '', ResourceAttributes['service.instance.id'], ServiceName) AS replica,
    anyLast(ResourceAttributes['gpu.type']) AS gpu_type,
    argMaxIf(Value, TimeUnix, MetricName = 'vllm:num_requests_running') AS running,
    countIf(MetricName = 'vllm:num_requests_running') AS running_points,
    argMaxIf(Value, TimeUnix, MetricName = 'vllm:num_requests_waiting') AS waiting,
    countIf(MetricName = 'vllm:num_requests_waiting') AS waiting_points,
    argMaxIf(Value, TimeUnix, MetricName IN ('vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc')) AS kv_usage,
    maxIf(Value, MetricName IN ('vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc')) AS kv_usage_max,
    countIf(MetricName IN ('vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc')) AS kv_points,
    max(TimeUnix) AS last_point
FROM otel_metrics_gauge
WHERE MetricName IN ('vllm:num_requests_running', 'vllm:num_requests_waiting',
                     'vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc')
  AND TimeUnix >= {prev_start:DateTime64(3)} AND TimeUnix < {end:DateTime64(3)}
  AND ({model:String} = '' OR Attributes['model_name'] = {model:String})
GROUP BY window, replica
ORDER BY replica, window
