-- Planner: per replica and minute of [start, end) (`replica_minutes`) what tells a slowed or
-- crashed replica apart: up (a scrape or a span in the minute), the running batch and queue (mean
-- of vLLM's gauges), generation_tokens (the engine counter's increase) and itl_p50_s (median
-- inter-token latency of the calls that ended in the minute, seconds; NULL when none ended).
SELECT
    minute,
    replica,
    up,
    running_avg,
    queue_waiting_avg,
    counter_generation_tokens AS generation_tokens,
    itl_p50_s
FROM replica_minutes
WHERE minute >= {start:DateTime} AND minute < {end:DateTime} AND in_fleet = 1
ORDER BY replica, minute
