-- Minutes with late data not recomputed since (latest version of each row of late_minutes), newer
-- than the retention bound and below the watermark (a minute marked before the chain copied it,
-- migration 1003, waits until it is history); oldest first.
SELECT minute, min(replica) AS any_replica
FROM (
    SELECT minute, replica, source, argMax(recomputed_at, updated_at) AS last_recompute
    FROM late_minutes
    WHERE minute >= {oldest:DateTime} AND minute < (SELECT max(watermark) FROM cost_watermark)
    GROUP BY minute, replica, source
)
WHERE last_recompute IS NULL
GROUP BY minute
ORDER BY minute
