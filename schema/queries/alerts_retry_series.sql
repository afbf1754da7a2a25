-- Fleet retries per time bucket (bucket 0 = newest, (now - (b+1) x bucket_s, now - b x bucket_s]),
-- by attempt END time, over the last {buckets} buckets:
--  client rows (task SDK attempts): client_attempts, client_retries (task.attempt >= 2),
--    client_timeouts (error_class timeout: the client gave up on an attempt);
--  gateway rows (gateway.attempt spans): gateway_attempts, gateway_requests (distinct parent
--    gateway request spans), so hidden retries = attempts - requests.
SELECT
    intDiv(toUnixTimestamp64Milli({now:DateTime64(3, 'UTC')}) - toUnixTimestamp64Milli(end_time),
           {bucket_s:UInt32} * 1000) AS bucket,
    countIf(call_source = 'client') AS client_attempts,
    countIf(call_source = 'client' AND ifNull(task_attempt, 1) >= 2) AS client_retries,
    countIf(call_source = 'client' AND error_class = 'timeout') AS client_timeouts,
    countIf(call_source = 'gateway') AS gateway_attempts,
    uniqExactIf(parent_span_id, call_source = 'gateway') AS gateway_requests
FROM llm_calls
WHERE call_source IN ('client', 'gateway')
  AND start_time >= {now:DateTime64(3, 'UTC')} - toIntervalSecond({bucket_s:UInt32} * {buckets:UInt32} + {lookback_s:UInt32})
  AND end_time > {now:DateTime64(3, 'UTC')} - toIntervalSecond({bucket_s:UInt32} * {buckets:UInt32})
  AND end_time <= {now:DateTime64(3, 'UTC')}
GROUP BY bucket
ORDER BY bucket
