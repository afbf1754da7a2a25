-- Weekly review, lever "delay": waste (retry_waste, failed_task_waste) in [start, end) by the
-- error type of the call that was paid for ('' = the call itself succeeded but its task failed or
-- it was superseded). USD and calls started.
SELECT
    error_type,
    sum(cost_usd) AS usd,
    sum(requests) AS calls
FROM call_costs
WHERE minute >= {start:DateTime} AND minute < {end:DateTime}
  AND category IN ('retry_waste', 'failed_task_waste')
GROUP BY error_type
ORDER BY usd DESC, error_type
