-- The live series' blocks (migration 0360): a fingerprint background merges keep, and the
-- rollup step bounded to the buckets that can have changed.
--
-- * fp_output_tokens: 0360's fingerprint was (count of the bucket's rows of ops_engine_hours, summed
--   requests); ops_engine_hours is an AggregatingMergeTree, so a background merge changed the count and
--   the reader fell back to merging the hours until the next rollup wrote the block again. A block now
--   names its rows by two sums a merge keeps exactly: requests (every engine row adds its requests,
--   so a late call changes it) and output tokens. fp_rows stays what it was (the rows when the block
--   was computed), read by nobody. Blocks written before this have fp_output_tokens 0: they stay
--   current only for buckets without output tokens; the others are written again by the first rollup.
-- * ops_series_marks: every insert into ops_engine_hours (the engine and gateway views of migrations
--   0051 / 0066, late spans included) records the hours it wrote and when (the store's clock), so the
--   rollup step (schema/jobs/run_series_blocks.sql) reads only the buckets with hours marked since its
--   last run, and those that became complete since; merges insert nothing, so they mark nothing.
-- * ops_series_runs: one row per rollup step run and block size: what it covered (since: the first
--   bucket; marks_from: marks at or after it still to be read by the next run; complete_to: blocks
--   ending at or before it were complete then).
ALTER TABLE ops_series_blocks
    ADD COLUMN IF NOT EXISTS fp_output_tokens UInt64 DEFAULT 0
    COMMENT 'their summed output tokens (migration 0440; 0 on blocks written before it)' AFTER fp_requests;

CREATE TABLE IF NOT EXISTS ops_series_marks (
    hour DateTime('UTC') COMMENT 'an hour of ops_engine_hours an insert wrote rows for',
    marked_at DateTime64(6, 'UTC') COMMENT 'the store''s clock when the insert wrote them'
) ENGINE = MergeTree()
ORDER BY marked_at
TTL toDateTime(marked_at) + INTERVAL 3 DAY;

CREATE MATERIALIZED VIEW IF NOT EXISTS ops_series_marks_mv TO ops_series_marks
AS SELECT DISTINCT hour, now64(6, 'UTC') AS marked_at
FROM ops_engine_hours;

CREATE TABLE IF NOT EXISTS ops_series_runs (
    block_seconds UInt32 COMMENT 'as ops_series_blocks',
    since DateTime('UTC') COMMENT 'the first bucket the run covered',
    marks_from DateTime64(6, 'UTC') COMMENT 'the next run reads the marks from here (its start less a margin)',
    complete_to DateTime('UTC') COMMENT 'toStartOfHour(we) of the run: blocks ending at or before it were complete'
) ENGINE = MergeTree()
ORDER BY (block_seconds, marks_from)
TTL toDateTime(marks_from) + INTERVAL 3 DAY;
