-- Live operations, time series over a MULTI-DAY range, from the hourly pre-aggregation
-- ops_engine_hours (migration 1006): per bucket of {bucket_s} seconds (a multiple of 3600) and per
-- replica (replica = '' rows are the fleet). [start, end) is taken at hour granularity. Same
-- columns as ops_latency_series.sql (errors / attempts: the gateway's view where it routed).
-- A bucket wholly inside the range takes its quantiles from its block (migration 1006, written by
-- the rollup step: the same merge of the same rows) while the bucket's rows still have the block's
-- fingerprint (summed requests and output tokens, migration 1006: a background merge keeps both) and no
-- model filter applies; every other bucket merges its hours' t-digest states here. The sums of every
-- bucket are read from the hours.
WITH
    -- [(bucket, version)] of the buckets wholly inside the range whose newest block is current: a
    -- scalar, computed once (a CTE is inlined, and run, at each of its three references)
    (SELECT groupArray((cb_start, cb_version)) FROM (
        SELECT b.block_start AS cb_start, max(b.version) AS cb_version
        FROM ops_series_blocks AS b
        WHERE {model:String} = '' AND b.block_seconds = {bucket_s:UInt32} AND b.replica = ''
          AND b.block_start >= toStartOfHour({start:DateTime64(3)})
          AND b.block_start + toIntervalSecond({bucket_s:UInt32} - 3600) < {end:DateTime64(3)}
          AND (b.block_start, b.fp_requests, b.fp_output_tokens) IN (
              SELECT toStartOfInterval(h.hour, toIntervalSecond({bucket_s:UInt32})) AS fb, sum(h.requests),
                     sum(h.output_tokens)
              FROM ops_engine_hours AS h
              WHERE {model:String} = '' AND h.hour >= toStartOfHour({start:DateTime64(3)})
                AND h.hour < {end:DateTime64(3)}
              GROUP BY fb)
        GROUP BY cb_start)) AS p_blocks,
    arrayMap(x -> x.1, p_blocks) AS p_block_starts
SELECT s.bucket AS bucket, s.replica AS replica, s.requests AS requests, s.output_tokens_sum AS output_tokens_sum,
       s.errors AS errors, q.ttft_q AS ttft_q, q.itl_p95_s AS itl_p95_s, q.e2e_p95_s AS e2e_p95_s,
       s.attempts AS attempts
FROM (
    -- the sums of every bucket, from the hours
    SELECT
        toStartOfInterval(e.hour, toIntervalSecond({bucket_s:UInt32})) AS bucket,
        e.replica AS replica,
        sum(e.requests) AS requests,
        sum(e.output_tokens) AS output_tokens_sum,
        if(sum(e.gateway_attempts) > 0, sum(e.gateway_errors), sum(e.errors)) AS errors,
        if(sum(e.gateway_attempts) > 0, sum(e.gateway_attempts), sum(e.requests)) AS attempts
    FROM ops_engine_hours AS e
    WHERE e.hour >= toStartOfHour({start:DateTime64(3)}) AND e.hour < {end:DateTime64(3)}
      AND ({model:String} = '' OR e.model = {model:String})
    GROUP BY GROUPING SETS ((bucket), (bucket, replica))
) AS s
INNER JOIN (
    -- the quantiles: the current blocks' rows, the other buckets' merged hours
    SELECT block_start AS bucket, replica, ttft_q, itl_p95_s, e2e_p95_s
    FROM ops_series_blocks
    WHERE block_seconds = {bucket_s:UInt32} AND has(p_blocks, (block_start, version))
    UNION ALL
    SELECT
        toStartOfInterval(e.hour, toIntervalSecond({bucket_s:UInt32})) AS bucket,
        e.replica AS replica,
        quantilesTDigestMerge(0.5, 0.95, 0.99)(e.ttft_q) AS ttft_q,
        quantileTDigestMerge(0.95)(e.itl_q) AS itl_p95_s,
        quantileTDigestMerge(0.95)(e.e2e_q) AS e2e_p95_s
    FROM ops_engine_hours AS e
    WHERE e.hour >= toStartOfHour({start:DateTime64(3)}) AND e.hour < {end:DateTime64(3)}
      AND ({model:String} = '' OR e.model = {model:String})
      AND NOT has(p_block_starts, toStartOfInterval(e.hour, toIntervalSecond({bucket_s:UInt32})))
    GROUP BY GROUPING SETS ((bucket), (bucket, replica))
) AS q ON s.bucket = q.bucket AND s.replica = q.replica
ORDER BY bucket, replica
