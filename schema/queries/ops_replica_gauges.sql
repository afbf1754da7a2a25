-- Live operations, engine gauges per replica from the per-minute pre-aggregation ops_gauge_minutes
-- (migration 1006; vLLM /metrics scraped into otel_metrics_gauge): for each window ('current' =
-- minutes in [start, end), 'previous' = [prev_start, start), minute-aligned) the replica's mean of
-- its NEWEST minute with points of vllm:num_requests_running, vllm:num_requests_waiting and
-- vllm:kv_cache_usage_perc (0..1), and the window's highest minute mean of KV use. Reading the
-- raw points instead meant decoding every point's attribute maps (the slowest live panel at 10M calls).
SELECT
    window,
    replica,
    '' AS gpu_type,
    anyIf(last_value, metric = 'vllm:num_requests_running') AS running,
    sumIf(pts, metric = 'vllm:num_requests_running') AS running_points,
    anyIf(last_value, metric = 'vllm:num_requests_waiting') AS waiting,
    sumIf(pts, metric = 'vllm:num_requests_waiting') AS waiting_points,
    anyIf(last_value, metric = 'vllm:kv_cache_usage_perc') AS kv_usage,
    anyIf(max_value, metric = 'vllm:kv_cache_usage_perc') AS kv_usage_max,
    sumIf(pts, metric = 'vllm:kv_cache_usage_perc') AS kv_points,
    max(last_minute) AS last_point
FROM (
    SELECT
        if(minute >= toStartOfMinute({start:DateTime64(3)}), 'current', 'previous') AS window,
        replica,
        metric,
        -- counts: the per-scrape sum over the replica's engines (data parallel); KV use: the engines' mean
        argMax(if(metric = 'vllm:kv_cache_usage_perc', value_sum / points, value_sum / if(scrapes > 0, scrapes, points)),
               minute) AS last_value,
        max(if(metric = 'vllm:kv_cache_usage_perc', value_sum / points, value_sum / if(scrapes > 0, scrapes, points)))
            AS max_value,
        sum(points) AS pts,
        max(minute) AS last_minute
    FROM (
        SELECT g.minute AS minute, g.replica AS replica, g.metric AS metric,
               sum(g.value_sum) AS value_sum, sum(g.points) AS points, sum(g.scrapes) AS scrapes
        FROM ops_gauge_minutes AS g
        WHERE g.minute >= toStartOfMinute({prev_start:DateTime64(3)}) AND g.minute < {end:DateTime64(3)}
          AND ({model:String} = '' OR g.model = {model:String})
        GROUP BY minute, replica, metric
    )
    WHERE points > 0
    GROUP BY window, replica, metric
)
GROUP BY window, replica
ORDER BY replica, window
