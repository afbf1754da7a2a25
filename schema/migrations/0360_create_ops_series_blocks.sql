-- The live page's multi-day latency series per block of hours: the t-digest
-- quantiles of every 2-hour and 12-hour bucket (the series buckets of the 7-day and 30-day ranges,
-- app.charts.series_bucket), fleet (replica '') and per replica, computed once by the rollup step
-- (schema/jobs/run_series_blocks.sql) by the very merge ops_latency_series_hours.sql does over the
-- bucket's rows of ops_engine_hours (migration 0051). On 10M calls that merge of ~10,700 hour states
-- was ~250-500 ms of the 7-day live page; a block is the same numbers (the merge of the same rows
-- reads them in the same order: checked equal to the last bit on the 10M bench store).
-- ops_engine_hours is written on insert (late spans too) and merged in the background, so a block
-- carries the fingerprint of the rows it was computed from (their count and summed requests); the
-- reader takes a block only while the bucket's rows have that fingerprint now, else it merges the
-- hours as before. Insert-only: a rewrite adds a newer version; plain MergeTree (a merge must not
-- drop a version a reader may still be reading).
CREATE TABLE IF NOT EXISTS ops_series_blocks (
    block_start DateTime('UTC') COMMENT 'toStartOfInterval(hour, block_seconds)',
    block_seconds UInt32 COMMENT '7200 (7-day range) or 43200 (30-day range)',
    version UInt64 COMMENT 'run id of the rollup step that wrote it',
    fp_rows UInt64 COMMENT 'rows of ops_engine_hours in the block when it was computed (all models)',
    fp_requests UInt64 COMMENT 'their summed requests',
    replica LowCardinality(String) COMMENT 'empty = the fleet',
    ttft_q Array(Float32) COMMENT 'seconds: quantilesTDigestMerge(0.5, 0.95, 0.99) of the hours ttft_q',
    itl_p95_s Float32 COMMENT 'seconds: quantileTDigestMerge(0.95) of itl_q',
    e2e_p95_s Float32 COMMENT 'seconds: quantileTDigestMerge(0.95) of e2e_q'
) ENGINE = MergeTree()
PARTITION BY toYYYYMM(block_start)
ORDER BY (block_seconds, block_start, version, replica)
TTL block_start + toIntervalDay({{retention_days}});
