-- The triangle's 6-hour and 1-day blocks (migration 1003), after the hourly rollups and their marks
-- (run_cost_rollup.sql): every block overlapping [ws, we) with a complete rollup for each of its
-- hours and no mark naming exactly those hours' current versions (job_triangle_blocks_due) is
-- written (again) from the hours' rows of those versions: sums, and the exact p99 by merging the
-- hours' quantile states. Rows first, then the marks (a reader takes a block only through its
-- mark). Insert-only. Over the retention it also writes the due blocks that were never written
-- (jobs.roll_up_pending).
INSERT INTO cost_triangle_blocks (block_start, block_seconds, version, replica, requests, tokens, out_tokens,
                                  ttft_p99_s, e2e_p99_s)
SELECT dh_start, dh_seconds, {run_id:UInt64}, th.replica,
       sum(th.requests), sum(th.tokens), sum(th.out_tokens),
       quantileExactMerge(0.99)(th.ttft_state), quantileExactMerge(0.99)(th.e2e_state)
FROM cost_triangle_hours AS th
INNER JOIN (SELECT d_seconds AS dh_seconds, d_start AS dh_start,
                   d_start + toIntervalHour(i - 1) AS dh_hour, d_versions[i] AS dh_version
            FROM job_triangle_blocks_due(ws = {ws:DateTime}, we = {we:DateTime})
            ARRAY JOIN arrayEnumerate(d_versions) AS i) AS dh
    ON th.hour = dh.dh_hour AND th.version = dh.dh_version
WHERE th.part = 'engine'
  AND th.hour >= toStartOfDay(toStartOfHour({ws:DateTime}))
  AND th.hour < toStartOfDay(toStartOfHour({we:DateTime} - INTERVAL 1 SECOND)) + INTERVAL 1 DAY
GROUP BY dh_start, dh_seconds, th.replica;

-- Last: the marks, with the hour versions the rows were computed from (the same selection: the
-- marks above are not written yet, and the chunks of a run roll up one after the other).
INSERT INTO cost_triangle_block_marks (block_start, block_seconds, version, hour_versions)
SELECT d_start, d_seconds, {run_id:UInt64}, d_versions
FROM job_triangle_blocks_due(ws = {ws:DateTime}, we = {we:DateTime});
