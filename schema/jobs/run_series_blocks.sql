-- The live series' blocks of {s} seconds (migration 1006): every block of [ws, we) whose hours
-- all began before the hour of {we} and whose rows of ops_engine_hours no block row names by their
-- fingerprint (summed requests and output tokens: sums a merge keeps) yet is written (again) by the
-- very merge the reader (schema/queries/ops_latency_series_hours.sql) does over a bucket's hours, fleet
-- (replica '') and per replica, every model; the fingerprint is taken in the same scan as the states.
-- Only the hours {hours} are read (the buckets that can have changed, schema.jobs.roll_up_series),
-- every hour of [ws, we) when {all}. Insert-only.
INSERT INTO ops_series_blocks (block_start, block_seconds, version, fp_rows, fp_requests, fp_output_tokens, replica,
                               ttft_q, itl_p95_s, e2e_p95_s)
SELECT bucket, {s:UInt32}, {run_id:UInt64}, max(n) OVER (PARTITION BY bucket), max(r) OVER (PARTITION BY bucket),
       max(t) OVER (PARTITION BY bucket), replica, ttft_q, itl_p95_s, e2e_p95_s
FROM (
    SELECT
        toStartOfInterval(e.hour, toIntervalSecond({s:UInt32})) AS bucket,
        e.replica AS replica,
        count() AS n,
        sum(e.requests) AS r,
        sum(e.output_tokens) AS t,
        quantilesTDigestMerge(0.5, 0.95, 0.99)(e.ttft_q) AS ttft_q,
        quantileTDigestMerge(0.95)(e.itl_q) AS itl_p95_s,
        quantileTDigestMerge(0.95)(e.e2e_q) AS e2e_p95_s
    FROM ops_engine_hours AS e
    WHERE e.hour >= toStartOfInterval(toStartOfHour({ws:DateTime}), toIntervalSecond({s:UInt32}))
      AND e.hour < toStartOfHour({we:DateTime})
      AND ({all:Bool} OR e.hour IN {hours:Array(DateTime)})
      AND toStartOfInterval(e.hour, toIntervalSecond({s:UInt32})) IN (
          SELECT toStartOfInterval(h.hour, toIntervalSecond({s:UInt32})) AS d_start
          FROM ops_engine_hours AS h
          WHERE h.hour >= toStartOfInterval(toStartOfHour({ws:DateTime}), toIntervalSecond({s:UInt32}))
            AND h.hour < toStartOfHour({we:DateTime})
            AND ({all:Bool} OR h.hour IN {hours:Array(DateTime)})
          GROUP BY d_start
          HAVING d_start + toIntervalSecond({s:UInt32}) <= toStartOfHour({we:DateTime})
             AND (d_start, sum(h.requests), sum(h.output_tokens)) NOT IN (
                 SELECT block_start, fp_requests, fp_output_tokens FROM ops_series_blocks
                 WHERE block_seconds = {s:UInt32}
                   AND block_start >= toStartOfInterval(toStartOfHour({ws:DateTime}), toIntervalSecond({s:UInt32}))))
    GROUP BY GROUPING SETS ((bucket), (bucket, replica))
)
