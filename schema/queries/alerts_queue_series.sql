-- Fleet queue depth per bucket, newest bucket = 0: buckets of bucket_s seconds counted back from now.
-- waiting = sum over replicas of the replica's mean vllm:num_requests_waiting in the bucket;
-- replicas = replicas that reported in the bucket.
SELECT
    bucket,
    sum(mean_waiting) AS waiting,
    count() AS replicas
FROM (
    SELECT
        intDiv(toUnixTimestamp64Milli({now:DateTime64(3, 'UTC')}) - toUnixTimestamp64Milli(TimeUnix) - 1,
               {bucket_s:UInt32} * 1000) AS bucket,
        if(ResourceAttributes['service.instance.id'] != '', ResourceAttributes['service.instance.id'], ServiceName) AS replica,
        avg(Value) AS mean_waiting
    FROM otel_metrics_gauge
    WHERE MetricName = 'vllm:num_requests_waiting'
      AND TimeUnix > {now:DateTime64(3, 'UTC')} - toIntervalSecond({bucket_s:UInt32} * {buckets:UInt32})
      AND TimeUnix <= {now:DateTime64(3, 'UTC')}
    GROUP BY bucket, replica
)
GROUP BY bucket
ORDER BY bucket
