-- The live series' rollup runs of the last 2 days (ops_series_runs, migration 1006; older ones' marks may
-- be gone: ops_series_marks keeps 3 days), newest per block size and first bucket covered: where the next
-- roll_up_series reads the marks from and which blocks were complete then.
SELECT block_seconds, since, max(marks_from), argMax(complete_to, marks_from)
FROM ops_series_runs
WHERE marks_from >= now64(6, 'UTC') - INTERVAL 2 DAY
GROUP BY block_seconds, since
