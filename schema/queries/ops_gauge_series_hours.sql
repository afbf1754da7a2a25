-- Live operations, engine gauges over a MULTI-DAY range: ops_gauge_series_rollup.sql with the whole
-- hours of the range read from the hourly rollup ops_gauge_hours (migration 1006) and the minutes of
-- the hours the range cuts from ops_gauge_minutes (migration 1006): the same sums, so the same
-- figures. Per bucket of {bucket_s} seconds (a multiple of 3600); [start, end) at minute granularity
-- as the minute rollup's reader. Same columns as ops_gauge_series.sql.
WITH
    toStartOfMinute({start:DateTime64(3)}) AS m0,
    -- the whole hours: every minute of [h_first, h_last) is in the range
    if(toStartOfHour(m0) = m0, toStartOfHour(m0), toStartOfHour(m0) + INTERVAL 1 HOUR) AS h_first,
    toStartOfHour({end:DateTime64(3)} - INTERVAL 59 MINUTE)
        + if(toStartOfHour({end:DateTime64(3)} - INTERVAL 59 MINUTE) = {end:DateTime64(3)} - INTERVAL 59 MINUTE,
             INTERVAL 0 HOUR, INTERVAL 1 HOUR) AS h_last
SELECT
    bucket,
    sum(waiting) AS waiting,
    sum(running) AS running,
    avg(kv_usage) AS kv_usage
FROM (
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
)
GROUP BY bucket
ORDER BY bucket
