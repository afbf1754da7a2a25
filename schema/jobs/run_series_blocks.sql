-- The live series' blocks of {s} seconds (migrations 0360, 0440): every block of [ws, we) whose hours
-- all began before the hour of {we} and whose rows of ops_engine_hours no block row names by their
-- fingerprint (summed requests and output tokens: sums a merge keeps) yet is written (again) by the
-- very merge the reader (schema/queries/ops_latency_series_hours.sql) does over a bucket's hours, fleet
-- (replica '') and per replica, every model; the fingerprint is taken in the same scan as the states.
-- Only the buckets that can have changed since the last run of this size covering [ws, ...) (the
-- newest row of ops_series_runs) are read: those with an hour marked since its marks_from (an insert
-- into ops_engine_hours, late rows included: ops_series_marks) and those that became complete since
-- (ending after its complete_to). Without such a run, or when its marks may be gone (older than 2
-- days; marks are kept 3), every bucket of [ws, we) is read. Insert-only.
INSERT INTO ops_series_blocks (block_start, block_seconds, version, fp_rows, fp_requests, fp_output_tokens, replica,
                               ttft_q, itl_p95_s, e2e_p95_s)
WITH
    (SELECT argMax((marks_from, complete_to), marks_from) FROM ops_series_runs
     WHERE block_seconds = {s:UInt32}
       AND since <= toStartOfInterval(toStartOfHour({ws:DateTime}), toIntervalSecond({s:UInt32}))) AS p_last,
    p_last.1 < now64(6, 'UTC') - INTERVAL 2 DAY AS p_all
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
      AND toStartOfInterval(e.hour, toIntervalSecond({s:UInt32})) IN (
          SELECT toStartOfInterval(h.hour, toIntervalSecond({s:UInt32})) AS d_start
          FROM ops_engine_hours AS h
          WHERE h.hour >= toStartOfInterval(toStartOfHour({ws:DateTime}), toIntervalSecond({s:UInt32}))
            AND h.hour < toStartOfHour({we:DateTime})
            -- the buckets that can have changed: every hour of a bucket with a marked hour, the buckets
            -- ending after the last run's complete_to
            AND (p_all
                 OR h.hour >= toStartOfInterval(p_last.2, toIntervalSecond({s:UInt32}))
                 OR h.hour IN (
                     SELECT arrayJoin(arrayMap(i -> m_start + toIntervalHour(i), range(intDiv({s:UInt32}, 3600))))
                     FROM (SELECT DISTINCT toStartOfInterval(m.hour, toIntervalSecond({s:UInt32})) AS m_start
                           FROM ops_series_marks AS m
                           WHERE m.marked_at >= p_last.1)))
          GROUP BY d_start
          HAVING d_start + toIntervalSecond({s:UInt32}) <= toStartOfHour({we:DateTime})
             AND (d_start, sum(h.requests), sum(h.output_tokens)) NOT IN (
                 SELECT block_start, fp_requests, fp_output_tokens FROM ops_series_blocks
                 WHERE block_seconds = {s:UInt32}
                   AND block_start >= toStartOfInterval(toStartOfHour({ws:DateTime}), toIntervalSecond({s:UInt32}))))
    GROUP BY GROUPING SETS ((bucket), (bucket, replica))
);
-- What this run covered, for the next (ops_series_runs): marks from {marks_from} (the run's start less a
-- margin for inserts still being written) are left to it.
INSERT INTO ops_series_runs (block_seconds, since, marks_from, complete_to)
VALUES ({s:UInt32}, toStartOfInterval(toStartOfHour({ws:DateTime}), toIntervalSecond({s:UInt32})),
        {marks_from:DateTime64(6)}, toStartOfHour({we:DateTime}));
