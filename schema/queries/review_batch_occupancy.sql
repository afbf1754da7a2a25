-- Weekly review, levers "share" and "delay": per replica in [start, end), the running batch and
-- the queue from vLLM's gauges (scraped points; means are over scrapes, i.e. time-weighted when
-- the scrape interval is regular): vllm:num_requests_running (mean, p95, max) and
-- vllm:num_requests_waiting (mean, p95, max), and the number of scrapes behind them. A
-- data-parallel replica's engines (one series per `engine` label) are summed per scrape.
SELECT
    replica,
    anyLast(gpu) AS gpu_type,
    avgIf(running, n_running > 0) AS running_mean,
    quantileIf(0.95)(running, n_running > 0) AS running_p95,
    maxIf(running, n_running > 0) AS running_max,
    countIf(n_running > 0) AS running_points,
    avgIf(waiting, n_waiting > 0) AS waiting_mean,
    quantileIf(0.95)(waiting, n_waiting > 0) AS waiting_p95,
    maxIf(waiting, n_waiting > 0) AS waiting_max,
    countIf(n_waiting > 0) AS waiting_points
FROM (
    SELECT
        if(ResourceAttributes['service.instance.id'] != '', ResourceAttributes['service.instance.id'], ServiceName) AS replica,
        TimeUnix,
        anyLast(ResourceAttributes['gpu.type']) AS gpu,
        sumIf(Value, MetricName = 'vllm:num_requests_running') AS running,
        countIf(MetricName = 'vllm:num_requests_running') AS n_running,
        sumIf(Value, MetricName = 'vllm:num_requests_waiting') AS waiting,
        countIf(MetricName = 'vllm:num_requests_waiting') AS n_waiting
    FROM otel_metrics_gauge
    WHERE MetricName IN ('vllm:num_requests_running', 'vllm:num_requests_waiting')
      AND TimeUnix >= {start:DateTime64(3)} AND TimeUnix < {end:DateTime64(3)}
    GROUP BY replica, TimeUnix
)
GROUP BY replica
ORDER BY replica
