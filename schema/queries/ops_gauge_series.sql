-- Live operations, engine gauges over time: per bucket of {bucket_s} seconds, the fleet's queue
-- (sum over replicas of each replica's mean vllm:num_requests_waiting in the bucket), running batch
-- (same for vllm:num_requests_running) and mean KV-cache use (0..1) across replicas.
-- Two sources of the per-replica bucket means, one section each; the caller (ops.gauge_series) omits
-- the other:
-- * raw: the scraped points of otel_metrics_gauge (short ranges).
-- * rollup: the per-minute pre-aggregation ops_gauge_minutes (migration 1006) for WIDE ranges, bucket
--   a multiple of 60, [start, end) at minute granularity. A replica's count gauges are summed over its
--   engines per scrape (data parallel: value_sum / scrapes). With hours = 1 (MULTI-DAY ranges, bucket a
--   multiple of 3600) the whole hours of the range come from the hourly rollup ops_gauge_hours
--   (migration 1006) and only the minutes of the hours the range cuts from ops_gauge_minutes: the same
--   sums, so the same figures.
WITH
    toStartOfMinute({start:DateTime64(3)}) AS m0,
    -- the whole hours: every minute of [h_first, h_last) is in the range; none with hours = 0
    if(toStartOfHour(m0) = m0, toStartOfHour(m0), toStartOfHour(m0) + INTERVAL 1 HOUR) AS h_first,
    if({hours:UInt8} = 1,
       toStartOfHour({end:DateTime64(3)} - INTERVAL 59 MINUTE)
           + if(toStartOfHour({end:DateTime64(3)} - INTERVAL 59 MINUTE) = {end:DateTime64(3)} - INTERVAL 59 MINUTE,
                INTERVAL 0 HOUR, INTERVAL 1 HOUR),
       h_first) AS h_last
SELECT
    bucket,
    sum(waiting) AS waiting,
    sum(running) AS running,
    avg(kv_usage) AS kv_usage
FROM (
    -- section: raw
    SELECT
        toStartOfInterval(TimeUnix, toIntervalSecond({bucket_s:UInt32})) AS bucket,
        if(ResourceAttributes['service.instance.id'] != '', ResourceAttributes['service.instance.id'], ServiceName) AS replica,
        -- per scrape, summed over the replica's engines (data parallel), then the bucket's mean
        sumIf(Value, MetricName = 'vllm:num_requests_waiting')
            / nullIf(uniqExactIf(TimeUnix, MetricName = 'vllm:num_requests_waiting'), 0) AS waiting,
        sumIf(Value, MetricName = 'vllm:num_requests_running')
            / nullIf(uniqExactIf(TimeUnix, MetricName = 'vllm:num_requests_running'), 0) AS running,
        avgIf(Value, MetricName IN ('vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc')) AS kv_usage
    FROM otel_metrics_gauge
    WHERE MetricName IN ('vllm:num_requests_running', 'vllm:num_requests_waiting',
                         'vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc')
      AND TimeUnix >= {start:DateTime64(3)} AND TimeUnix < {end:DateTime64(3)}
      AND ({model:String} = '' OR Attributes['model_name'] = {model:String})
    GROUP BY bucket, replica
    -- end section: raw
    -- section: rollup
    SELECT
        toStartOfInterval(g.t, toIntervalSecond({bucket_s:UInt32})) AS bucket,
        g.replica AS replica,
        sumIf(g.value_sum, g.metric = 'vllm:num_requests_waiting')
            / nullIf(sumIf(if(g.scrapes > 0, g.scrapes, g.points), g.metric = 'vllm:num_requests_waiting'), 0) AS waiting,
        sumIf(g.value_sum, g.metric = 'vllm:num_requests_running')
            / nullIf(sumIf(if(g.scrapes > 0, g.scrapes, g.points), g.metric = 'vllm:num_requests_running'), 0) AS running,
        sumIf(g.value_sum, g.metric = 'vllm:kv_cache_usage_perc')
            / nullIf(sumIf(g.points, g.metric = 'vllm:kv_cache_usage_perc'), 0) AS kv_usage
    FROM (
        SELECT h.hour AS t, h.replica AS replica, h.metric AS metric, h.value_sum AS value_sum, h.points AS points,
               h.scrapes AS scrapes
        FROM ops_gauge_hours AS h
        WHERE h.hour >= h_first AND h.hour < h_last
          AND ({model:String} = '' OR h.model = {model:String})
        UNION ALL
        SELECT m.minute, m.replica, m.metric, m.value_sum, m.points, m.scrapes
        FROM ops_gauge_minutes AS m
        WHERE m.minute >= m0 AND m.minute < {end:DateTime64(3)}
          AND (m.minute < h_first OR m.minute >= h_last)
          AND ({model:String} = '' OR m.model = {model:String})
    ) AS g
    GROUP BY bucket, replica
    -- end section: rollup
)
GROUP BY bucket
ORDER BY bucket
