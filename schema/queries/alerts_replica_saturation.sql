-- Per replica over (now - window_s, now]: mean and max KV-cache use (0..1; vLLM
-- vllm:kv_cache_usage_perc, older name vllm:gpu_cache_usage_perc), mean and max running requests
-- (vllm:num_requests_running), mean waiting requests, and the number of points. A data-parallel
-- replica exposes one series per `engine` label: per scrape, running and waiting are summed over its
-- engines and KV use is their mean, then the window's mean / max are taken over scrapes.
SELECT
    replica,
    avg(kv) AS kv_mean,
    max(kv) AS kv_max,
    avg(running) AS running_mean,
    max(running) AS running_max,
    avg(waiting) AS waiting_mean,
    sum(n) AS points
FROM (
    SELECT
        if(ResourceAttributes['service.instance.id'] != '', ResourceAttributes['service.instance.id'], ServiceName) AS replica,
        TimeUnix,
        if(countIf(MetricName IN ('vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc')) > 0,
           avgIf(Value, MetricName IN ('vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc')), NULL) AS kv,
        if(countIf(MetricName = 'vllm:num_requests_running') > 0,
           sumIf(Value, MetricName = 'vllm:num_requests_running'), NULL) AS running,
        if(countIf(MetricName = 'vllm:num_requests_waiting') > 0,
           sumIf(Value, MetricName = 'vllm:num_requests_waiting'), NULL) AS waiting,
        count() AS n
    FROM otel_metrics_gauge
    WHERE MetricName IN ('vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc', 'vllm:num_requests_running',
                         'vllm:num_requests_waiting')
      AND TimeUnix > {now:DateTime64(3, 'UTC')} - toIntervalSecond({window_s:UInt32})
      AND TimeUnix <= {now:DateTime64(3, 'UTC')}
    GROUP BY replica, TimeUnix
)
GROUP BY replica
ORDER BY replica
