-- Record that the late minutes in [lo, hi] pending before {before} were recomputed (a newer
-- version of each row).
INSERT INTO late_minutes (minute, replica, source, rows, updated_at, recomputed_at)
SELECT minute, replica, source, 0, now64(3, 'UTC'), toDateTime(now(), 'UTC')
FROM late_minutes
WHERE minute >= {lo:DateTime} AND minute <= {hi:DateTime} AND updated_at <= {before:DateTime64(3)}
GROUP BY minute, replica, source
HAVING argMax(recomputed_at, updated_at) IS NULL
