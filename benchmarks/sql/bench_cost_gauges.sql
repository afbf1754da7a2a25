-- Cost benchmark data: vLLM gauges of 10 replicas every 15 s over [t0, t0 + span_s).
INSERT INTO otel_metrics_gauge (ResourceAttributes, ServiceName, MetricName, Attributes, TimeUnix, Value)
SELECT
    map('service.instance.id', concat('r', toString(r))), 'vllm', metric, map('model_name', 'llama-8b'),
    {t0:DateTime64(3)} + toIntervalSecond(i * 15),
    toFloat64(sipHash64(i, r) % 32)
FROM (SELECT number AS i FROM numbers(intDiv({span_s:UInt64}, 15))) AS t
CROSS JOIN (SELECT number AS r FROM numbers(10)) AS rr
ARRAY JOIN ['vllm:num_requests_running', 'vllm:num_requests_waiting'] AS metric
