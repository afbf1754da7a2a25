-- Fleet queue depth per bucket, newest bucket = 0: bucket b holds points in (now - (b+1) x bucket_s,
-- now - b x bucket_s] (a scrape exactly on a bucket edge belongs to the newer bucket's end).
-- waiting = sum over replicas of the replica's mean vllm:num_requests_waiting in the bucket;
-- replicas = replicas that reported in the bucket.
SELECT
    bucket,
    sum(mean_waiting) AS waiting,
    count() AS replicas
FROM (
    SELECT
        intDiv(toUnixTimestamp64Milli({now:DateTime64(3, 'UTC')}) - toUnixTimestamp64Milli(TimeUnix),
               {bucket_s:UInt32} * 1000) AS bucket,
        if(ResourceAttributes['service.instance.id'] != '', ResourceAttributes['service.instance.id'], ServiceName) AS replica,
        -- per scrape summed over the replica's engines (data parallel), then the bucket's mean
        sum(Value) / uniqExact(TimeUnix) AS mean_waiting
    FROM otel_metrics_gauge
    WHERE MetricName = 'vllm:num_requests_waiting'
      AND TimeUnix > {now:DateTime64(3, 'UTC')} - toIntervalSecond({bucket_s:UInt32} * {buckets:UInt32})
      AND TimeUnix <= {now:DateTime64(3, 'UTC')}
    GROUP BY bucket, replica
)
GROUP BY bucket
ORDER BY bucket
