-- Explicit-window run of the hourly rollups (migration 1003), last part: after every row of the chunk
-- (run_cost_rollup_calls.sql, run_cost_rollup_replicas.sql, run_cost_rollup.sql), the marks of every
-- hour [ws, we) touched, as a new version (run_id): until its mark is written a reader keeps the
-- hour's previous version. Then run_cost_blocks.sql.
-- Complete = the whole hour below the watermark.
INSERT INTO cost_rollup_hours (hour, version, complete)
WITH toStartOfHour({ws:DateTime}) AS h0,
     toStartOfHour({we:DateTime} - INTERVAL 1 SECOND) + INTERVAL 1 HOUR AS h_end,
     least(h_end, toStartOfHour((SELECT max(watermark) FROM cost_watermark))) AS h1
SELECT h0 + toIntervalHour(number) AS hour, {run_id:UInt64}, toUInt8(hour < h1)
FROM numbers(toUInt64(dateDiff('hour', h0, h_end)));
