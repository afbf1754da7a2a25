-- Benchmark data: vLLM gauges of 16 replicas every 15 s over [t0, t0 + span_s): running, waiting, KV use.
INSERT INTO otel_metrics_gauge (ResourceAttributes, ServiceName, MetricName, Attributes, TimeUnix, Value)
SELECT
    map('service.instance.id', concat('r', toString(r)), 'gpu.type', if(r < 8, 'H100', 'A100')),
    'vllm', metric, map('model_name', 'llama-8b', 'engine', '0'),
    {t0:DateTime64(3)} + toIntervalSecond(i * 15),
    multiIf(metric = 'vllm:kv_cache_usage_perc', (sipHash64(i, r, 1) % 100) / 100.0, toFloat64(sipHash64(i, r, 2) % 32))
FROM (SELECT number AS i FROM numbers(intDiv({span_s:UInt64}, 15))) AS t
CROSS JOIN (SELECT number AS r FROM numbers(16)) AS rr
ARRAY JOIN ['vllm:num_requests_running', 'vllm:num_requests_waiting', 'vllm:kv_cache_usage_perc'] AS metric
