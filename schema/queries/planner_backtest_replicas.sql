-- Planner backtest: the fleet per hour of [start, end) and overall (hour = 1970-01-01 00:00:00)
-- from `replica_minutes`, outside the excluded windows [ex_from[i], ex_to[i]): spend_usd (what the
-- backtest's CPST divides), the prefix-cache hit rate of vLLM's counters (cached / prompt tokens,
-- 0..1), and over the minutes a replica was up its mean running batch and mean queue (requests,
-- vLLM's num_requests_running / waiting gauges).
WITH
    {start:DateTime} AS p_start,
    {end:DateTime} AS p_end
SELECT
    hour,
    sum(spend_usd) AS spend_usd,
    if(sum(counter_prompt_tokens) > 0, sum(counter_cached_tokens) / sum(counter_prompt_tokens), NULL) AS hit_rate,
    avgIf(running_avg, up = 1) AS running_avg,
    avgIf(queue_waiting_avg, up = 1) AS waiting_avg
FROM (
    SELECT toStartOfHour(minute) AS hour, spend_usd, counter_prompt_tokens, counter_cached_tokens, running_avg,
           queue_waiting_avg, up
    FROM replica_minutes
    WHERE minute >= p_start AND minute < p_end
      AND NOT arrayExists((a, b) -> minute >= a AND minute < b, {ex_from:Array(DateTime)}, {ex_to:Array(DateTime)})
)
GROUP BY GROUPING SETS ((hour), ())
ORDER BY hour
