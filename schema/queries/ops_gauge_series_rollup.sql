-- Live operations, engine gauges over a WIDE range, from the per-minute pre-aggregation
-- ops_gauge_minutes (migration 1006): per bucket of {bucket_s} seconds (a multiple of 60), the
-- fleet's waiting and running requests (sums over replicas of each replica's mean in the bucket)
-- and mean KV-cache use (0..1) across replicas. A replica's count gauges are summed over its
-- engines per scrape (data parallel: value_sum / scrapes). Same columns as ops_gauge_series.sql.
SELECT
    bucket,
    sum(waiting) AS waiting,
    sum(running) AS running,
    avg(kv_usage) AS kv_usage
FROM (
    SELECT
        toStartOfInterval(g.minute, toIntervalSecond({bucket_s:UInt32})) AS bucket,
        g.replica AS replica,
        sumIf(g.value_sum, g.metric = 'vllm:num_requests_waiting')
            / nullIf(sumIf(if(g.scrapes > 0, g.scrapes, g.points), g.metric = 'vllm:num_requests_waiting'), 0) AS waiting,
        sumIf(g.value_sum, g.metric = 'vllm:num_requests_running')
            / nullIf(sumIf(if(g.scrapes > 0, g.scrapes, g.points), g.metric = 'vllm:num_requests_running'), 0) AS running,
        sumIf(g.value_sum, g.metric = 'vllm:kv_cache_usage_perc')
            / nullIf(sumIf(g.points, g.metric = 'vllm:kv_cache_usage_perc'), 0) AS kv_usage
    FROM ops_gauge_minutes AS g
    WHERE g.minute >= toStartOfMinute({start:DateTime64(3)}) AND g.minute < {end:DateTime64(3)}
      AND ({model:String} = '' OR g.model = {model:String})
    GROUP BY bucket, replica
)
GROUP BY bucket
ORDER BY bucket
