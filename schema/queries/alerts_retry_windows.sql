-- Retry amplification inputs per call source, for the current window (now - window_s, now] and the
-- baseline window (now - window_s - baseline_s, now - window_s], by call END time (a span exists
-- only once its call ended).
--  client rows (task SDK attempts): first attempts = task.attempt 1 (or missing), retries = task.attempt >= 2.
--  gateway rows (gateway.attempt spans): requests = distinct parent gateway request spans,
--  retries = attempts - requests (the gateway's hidden retries).
SELECT
    call_source,
    countIf(end_time > {now:DateTime64(3, 'UTC')} - toIntervalSecond({window_s:UInt32})) AS attempts,
    if(call_source = 'gateway',
       uniqExactIf(parent_span_id, end_time > {now:DateTime64(3, 'UTC')} - toIntervalSecond({window_s:UInt32})),
       countIf(end_time > {now:DateTime64(3, 'UTC')} - toIntervalSecond({window_s:UInt32}) AND ifNull(task_attempt, 1) <= 1)) AS first_attempts,
    countIf(end_time <= {now:DateTime64(3, 'UTC')} - toIntervalSecond({window_s:UInt32})) AS baseline_attempts,
    if(call_source = 'gateway',
       uniqExactIf(parent_span_id, end_time <= {now:DateTime64(3, 'UTC')} - toIntervalSecond({window_s:UInt32})),
       countIf(end_time <= {now:DateTime64(3, 'UTC')} - toIntervalSecond({window_s:UInt32}) AND ifNull(task_attempt, 1) <= 1)) AS baseline_first_attempts
FROM llm_calls
WHERE call_source IN ('client', 'gateway')
  AND start_time >= {now:DateTime64(3, 'UTC')} - toIntervalSecond({window_s:UInt32} + {baseline_s:UInt32} + {lookback_s:UInt32})
  AND end_time > {now:DateTime64(3, 'UTC')} - toIntervalSecond({window_s:UInt32} + {baseline_s:UInt32})
  AND end_time <= {now:DateTime64(3, 'UTC')}
GROUP BY call_source
ORDER BY call_source
