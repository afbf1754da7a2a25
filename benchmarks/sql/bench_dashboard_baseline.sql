-- Baseline for the dashboard benchmark: the fleet tiles computed the naive way, over every engine
-- call ever stored (a lifetime full scan) instead of a time window.
SELECT count(), quantilesExact(0.5, 0.95, 0.99)(ttft_s), quantileExact(0.95)(e2e_s),
       countIf(status = 'error') / count()
FROM llm_calls
WHERE call_source = 'engine'
