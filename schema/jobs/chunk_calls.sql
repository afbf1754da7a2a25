-- Calls per hour of [ws, we) by end time (the calls a chunk's resolution reads: run_resolve.sql), to
-- size an explicit run's chunks (schema.jobs.chunk_windows). One column read over the table (its
-- partitions and key are by start time, so an end-time bound prunes nothing); once per long run.
SELECT toStartOfHour(end_time) AS hour, count() AS calls
FROM llm_calls
WHERE end_time >= {ws:DateTime} AND end_time < {we:DateTime}
GROUP BY hour
ORDER BY hour
