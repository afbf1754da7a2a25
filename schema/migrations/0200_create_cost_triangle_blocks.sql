-- The triangle's engine figures per block of hours: the exact p99 of every
-- 6-hour and 1-day block (the triangle's windows at 7 days and at longer ranges), computed once by the
-- rollup step (schema/jobs/run_cost_blocks.sql) when every hour of the block has a complete rollup
-- (migration 0170), by merging the hours' quantile states (cost_triangle_hours, part 'engine') of
-- their current versions. The reader (cost_replica_windows.sql) takes a block's row instead of
-- merging its hours' states (which hold every call's TTFT and e2e) when the window is the block and
-- the block's mark names exactly the versions its hours have now; otherwise it merges the hours.
-- Same insert-only scheme as 0170: rows first with a new version (the chunk's run_id), then the
-- mark; older versions are never read (a recompute of an hour gives it a new version, so the block's
-- mark no longer matches until the next rollup step writes the block again). Plain MergeTree: a
-- merge must not drop a version a reader may still be reading.

-- Which blocks are written, from which hour versions.
CREATE TABLE IF NOT EXISTS cost_triangle_block_marks (
    block_start DateTime('UTC') COMMENT 'start of the block (toStartOfInterval(hour, block_seconds))',
    block_seconds UInt32 COMMENT '21600 (6 h) or 86400 (1 day)',
    version UInt64 COMMENT 'run_id of the chunk that wrote it',
    hour_versions Array(UInt64) COMMENT 'the version of each hour of the block it was computed from, in hour order',
    written_at DateTime('UTC') DEFAULT now()
) ENGINE = MergeTree()
ORDER BY (block_seconds, block_start, version)
TTL block_start + toIntervalDay({{retention_days}});

-- Engine calls that ended in the block per replica: the sums of cost_triangle_hours and the exact p99.
CREATE TABLE IF NOT EXISTS cost_triangle_blocks (
    block_start DateTime('UTC'),
    block_seconds UInt32,
    version UInt64,
    replica LowCardinality(String),
    requests UInt64,
    tokens UInt64 COMMENT 'prompt + output',
    out_tokens UInt64,
    ttft_p99_s Nullable(Float64) COMMENT 'seconds, quantileExact(0.99) (nearest rank) over the calls of the block',
    e2e_p99_s Nullable(Float64) COMMENT 'seconds, quantileExact(0.99)'
) ENGINE = MergeTree()
PARTITION BY toYYYYMM(block_start)
ORDER BY (block_seconds, block_start, version, replica)
TTL block_start + toIntervalDay({{retention_days}});

-- The blocks the rollup step writes for a run over [ws, we): those overlapping it whose every hour
-- has a complete rollup and whose current hour versions no mark names yet (d_versions in hour order).
CREATE OR REPLACE VIEW job_triangle_blocks_due AS
WITH toStartOfDay(toStartOfHour({ws:DateTime})) AS b0,
     toStartOfDay(toStartOfHour({we:DateTime} - INTERVAL 1 SECOND)) + INTERVAL 1 DAY AS b_end
SELECT d_seconds, d_start, d_versions
FROM (SELECT s AS d_seconds,
             if(s = 21600, toStartOfInterval(hour, toIntervalSecond(21600)),
                toStartOfInterval(hour, toIntervalSecond(86400))) AS d_start,
             arrayMap(x -> x.2, arraySort(groupArray((hour, newest)))) AS d_versions
      FROM (SELECT hour, max(version) AS newest FROM cost_rollup_hours
            WHERE hour >= b0 AND hour < b_end
            GROUP BY hour HAVING argMax(complete, version) = 1)
      ARRAY JOIN [toUInt32(21600), toUInt32(86400)] AS s
      GROUP BY d_seconds, d_start
      HAVING length(d_versions) = intDiv(d_seconds, 3600)
         AND d_start + toIntervalSecond(d_seconds) > toStartOfHour({ws:DateTime})
         AND d_start < {we:DateTime})
WHERE (d_seconds, d_start, d_versions) NOT IN (
    SELECT block_seconds, block_start, hour_versions FROM cost_triangle_block_marks
    WHERE block_start >= b0 AND block_start < b_end);
