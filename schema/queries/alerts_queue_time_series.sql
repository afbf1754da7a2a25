-- Fleet engine queue-time p95 (s; vLLM gen_ai.latency.time_in_queue) per bucket, newest bucket = 0,
-- over engine calls that ended in the bucket.
SELECT
    intDiv(toUnixTimestamp64Milli({now:DateTime64(3, 'UTC')}) - toUnixTimestamp64Milli(end_time),
           {bucket_s:UInt32} * 1000) AS bucket,
    count() AS requests,
    quantileExact(0.95)(queue_s) AS queue_p95_s
FROM llm_calls
WHERE call_source = 'engine'
  AND queue_s IS NOT NULL
  AND start_time >= {now:DateTime64(3, 'UTC')} - toIntervalSecond({bucket_s:UInt32} * {buckets:UInt32} + {lookback_s:UInt32})
  AND end_time > {now:DateTime64(3, 'UTC')} - toIntervalSecond({bucket_s:UInt32} * {buckets:UInt32})
  AND end_time <= {now:DateTime64(3, 'UTC')}
GROUP BY bucket
ORDER BY bucket
