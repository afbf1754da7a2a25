-- Per replica and time bucket, the evidence the per-replica alert rules read (alerts/series.py):
-- bucket b (0 = newest) holds what ended in (now - (b+1) x bucket_s, now - b x bucket_s], over the
-- last {buckets} buckets. One row per (replica, bucket) that has any of:
--  engine (vLLM llm_request spans): requests; itl_p50_s = median of decode_s / (output_tokens - 1)
--    (seconds per output token); prefill_tok_p50_s = median of prefill_s / prompt_tokens (seconds
--    per prompt token: the engine's speed on the prompt, queue excluded); queue_p95_s; engine_errors
--    (finish reason 'error': the engine failed the request);
--  gateway (gateway.attempt spans, replica = gateway.replica, llm_calls.error_class of migration 1001):
--    attempts, gw_ok (no error class), gw_failed (upstream_error or timeout: the failures that
--    count against a replica), gw_errors (upstream_error alone: 5xx, refused, broken streams, which
--    load does not cause), gw_conn_errors (connection refused/reset: nothing listening),
--    gw_abandoned (client_cancel: the client gave up while waiting on this replica);
--  gauges (the scrape of vLLM /metrics): waiting_mean, waiting_min (0 = the queue was empty at some
--    scrape), running_mean, kv_mean, gauge_points (vLLM gauges), up_ok / up_failed (the scraper's
--    up = 1 / 0 points).
-- gpu_type: the resource attribute gpu.type ('' when unknown). start_time / TimeUnix are bounded so
-- the primary keys prune (lookback_s = the longest call expected).
SELECT
    replica,
    bucket,
    max(gpu) AS gpu_type,
    sum(requests) AS requests,
    max(itl) AS itl_p50_s,
    sum(itl_n) AS itl_samples,
    max(prefill_tok) AS prefill_tok_p50_s,
    sum(prefill_n) AS prefill_samples,
    max(queue_p95) AS queue_p95_s,
    sum(engine_err) AS engine_errors,
    sum(att) AS attempts,
    sum(ok) AS gw_ok,
    sum(failed) AS gw_failed,
    sum(errs) AS gw_errors,
    sum(conn) AS gw_conn_errors,
    sum(abandoned) AS gw_abandoned,
    max(waiting) AS waiting_mean,
    max(waiting_low) AS waiting_min,
    max(running) AS running_mean,
    max(kv) AS kv_mean,
    sum(points) AS gauge_points,
    sum(up_ok) AS up_ok,
    sum(up_fail) AS up_failed
FROM (
    -- engine and gateway rows in one scan: replica = service.instance.id for engine spans,
    -- gateway.replica for gateway attempts (llm_calls, migration 1001)
    SELECT
        replica,
        intDiv(toUnixTimestamp64Milli({now:DateTime64(3, 'UTC')}) - toUnixTimestamp64Milli(end_time),
               {bucket_s:UInt32} * 1000) AS bucket,
        anyIf(gpu_type, call_source = 'engine') AS gpu,
        countIf(call_source = 'engine') AS requests,
        CAST(quantileExactIf(0.5)(ifNull(decode_s, 0) / greatest(ifNull(output_tokens, 2) - 1, 1),
                                  call_source = 'engine' AND ifNull(output_tokens, 0) > 1 AND decode_s IS NOT NULL)
             AS Nullable(Float64)) AS itl,
        countIf(call_source = 'engine' AND ifNull(output_tokens, 0) > 1 AND decode_s IS NOT NULL) AS itl_n,
        CAST(quantileExactIf(0.5)(ifNull(prefill_s, 0) / greatest(ifNull(prompt_tokens, 1), 1),
                                  call_source = 'engine' AND prefill_s IS NOT NULL AND ifNull(prompt_tokens, 0) > 0)
             AS Nullable(Float64)) AS prefill_tok,
        countIf(call_source = 'engine' AND prefill_s IS NOT NULL AND ifNull(prompt_tokens, 0) > 0) AS prefill_n,
        CAST(quantileExactIf(0.95)(ifNull(queue_s, 0), call_source = 'engine' AND queue_s IS NOT NULL)
             AS Nullable(Float64)) AS queue_p95,
        countIf(call_source = 'engine' AND finish_reason = 'error') AS engine_err,
        countIf(call_source = 'gateway') AS att,
        countIf(call_source = 'gateway' AND error_class = '') AS ok,
        countIf(call_source = 'gateway' AND error_class IN ('upstream_error', 'timeout')) AS failed,
        countIf(call_source = 'gateway' AND error_class = 'upstream_error') AS errs,
        countIf(call_source = 'gateway' AND error_type = 'connection_error') AS conn,
        countIf(call_source = 'gateway' AND error_class = 'client_cancel') AS abandoned,
        CAST(NULL AS Nullable(Float64)) AS waiting, CAST(NULL AS Nullable(Float64)) AS running,
        CAST(NULL AS Nullable(Float64)) AS kv, CAST(NULL AS Nullable(Float64)) AS waiting_low,
        0 AS points, 0 AS up_ok, 0 AS up_fail
    FROM llm_calls
    WHERE call_source IN ('engine', 'gateway') AND replica != ''
      AND start_time >= {now:DateTime64(3, 'UTC')} - toIntervalSecond({bucket_s:UInt32} * {buckets:UInt32} + {lookback_s:UInt32})
      AND end_time > {now:DateTime64(3, 'UTC')} - toIntervalSecond({bucket_s:UInt32} * {buckets:UInt32})
      AND end_time <= {now:DateTime64(3, 'UTC')}
    GROUP BY replica, bucket

    UNION ALL

    SELECT
        if(ResourceAttributes['service.instance.id'] != '', ResourceAttributes['service.instance.id'], ServiceName) AS replica,
        intDiv(toUnixTimestamp64Milli({now:DateTime64(3, 'UTC')}) - toUnixTimestamp64Milli(TimeUnix),
               {bucket_s:UInt32} * 1000) AS bucket,
        any(ResourceAttributes['gpu.type']) AS gpu, 0 AS requests, CAST(NULL AS Nullable(Float64)) AS itl, 0 AS itl_n,
        CAST(NULL AS Nullable(Float64)) AS prefill_tok, 0 AS prefill_n, CAST(NULL AS Nullable(Float64)) AS queue_p95,
        0 AS engine_err, 0 AS att, 0 AS ok, 0 AS failed, 0 AS errs, 0 AS conn, 0 AS abandoned,
        -- counts are summed over a data-parallel replica's engines (one series per `engine` label) at
        -- each scrape, then averaged over the bucket's scrapes
        CAST(if(countIf(MetricName = 'vllm:num_requests_waiting') = 0, NULL,
                sumIf(Value, MetricName = 'vllm:num_requests_waiting')
                / uniqExactIf(TimeUnix, MetricName = 'vllm:num_requests_waiting')) AS Nullable(Float64)) AS waiting,
        CAST(if(countIf(MetricName = 'vllm:num_requests_running') = 0, NULL,
                sumIf(Value, MetricName = 'vllm:num_requests_running')
                / uniqExactIf(TimeUnix, MetricName = 'vllm:num_requests_running')) AS Nullable(Float64)) AS running,
        CAST(if(countIf(MetricName IN ('vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc')) = 0, NULL,
                avgIf(Value, MetricName IN ('vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc'))) AS Nullable(Float64)) AS kv,
        CAST(if(countIf(MetricName = 'vllm:num_requests_waiting') = 0, NULL,
                minIf(Value, MetricName = 'vllm:num_requests_waiting')) AS Nullable(Float64)) AS waiting_low,
        countIf(MetricName != 'up') AS points,
        countIf(MetricName = 'up' AND Value > 0) AS up_ok,
        countIf(MetricName = 'up' AND Value = 0) AS up_fail
    FROM otel_metrics_gauge
    WHERE MetricName IN ('vllm:num_requests_waiting', 'vllm:num_requests_running', 'vllm:kv_cache_usage_perc',
                         'vllm:gpu_cache_usage_perc', 'up')
      AND TimeUnix > {now:DateTime64(3, 'UTC')} - toIntervalSecond({bucket_s:UInt32} * {buckets:UInt32})
      AND TimeUnix <= {now:DateTime64(3, 'UTC')}
    GROUP BY replica, bucket
)
GROUP BY replica, bucket
ORDER BY replica, bucket
