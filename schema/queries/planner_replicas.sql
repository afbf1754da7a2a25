-- Planner, the current fleet in [start, end): one row per replica that was up (replica_minutes),
-- its GPU type and count as priced, the model it served (engine spans, llm_calls), its up minutes,
-- and vLLM's scheduler evidence from the gauges: the largest running batch
-- (vllm:num_requests_running) and the largest running batch while requests were waiting
-- (vllm:num_requests_waiting > 0 at the same scrape): a queue beside a full batch means the batch
-- was at the replica's --max-num-seqs (or its KV cache was full: kv_usage_max says which).
WITH
    {start:DateTime} AS p_start,
    {end:DateTime} AS p_end,
    up AS (
        SELECT replica, argMax(gpu_type, minute) AS gpu_type, argMax(gpu_count, minute) AS gpu_count,
               count() AS up_minutes, sum(spend_usd) AS spend_usd
        FROM replica_minutes
        WHERE minute >= p_start AND minute < p_end
        GROUP BY replica
    ),
    models AS (
        SELECT replica, topK(1)(model)[1] AS model, count() AS engine_calls
        FROM llm_calls
        WHERE call_source = 'engine' AND start_time >= p_start AND start_time < p_end
        GROUP BY replica
    ),
    scrapes AS (
        SELECT ResourceAttributes['service.instance.id'] AS replica, TimeUnix,
               maxIf(Value, MetricName = 'vllm:num_requests_running') AS running,
               maxIf(Value, MetricName = 'vllm:num_requests_waiting') AS waiting,
               maxIf(Value, MetricName IN ('vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc')) AS kv
        FROM otel_metrics_gauge
        WHERE TimeUnix >= p_start AND TimeUnix < p_end
          AND MetricName IN ('vllm:num_requests_running', 'vllm:num_requests_waiting',
                             'vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc')
        GROUP BY replica, TimeUnix
    ),
    gauges AS (
        SELECT replica, max(running) AS running_max,
               maxIf(running, waiting > 0) AS running_max_waiting,
               countIf(waiting > 0) AS waiting_scrapes,
               max(kv) AS kv_usage_max
        FROM scrapes
        GROUP BY replica
    )
SELECT
    up.replica AS replica,
    up.gpu_type AS gpu_type,
    toUInt32(up.gpu_count) AS gpu_count,
    ifNull(m.model, '') AS model,
    toUInt64(ifNull(m.engine_calls, 0)) AS engine_calls,
    up.up_minutes AS up_minutes,
    up.spend_usd AS spend_usd,
    g.running_max AS running_max,
    g.running_max_waiting AS running_max_waiting,
    toUInt64(ifNull(g.waiting_scrapes, 0)) AS waiting_scrapes,
    g.kv_usage_max AS kv_usage_max
FROM up
LEFT JOIN models AS m ON m.replica = up.replica
LEFT JOIN gauges AS g ON g.replica = up.replica
ORDER BY replica
SETTINGS join_use_nulls = 1
