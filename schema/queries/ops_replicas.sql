-- Live operations, the replicas seen in [start, end) (engine requests or gauges), for the replica
-- filter; read from the per-minute rollups (migration 1006).
SELECT DISTINCT replica
FROM (
    SELECT replica FROM ops_engine_minutes WHERE minute >= toStartOfMinute({start:DateTime}) AND minute < {end:DateTime}
    UNION ALL
    SELECT replica FROM ops_gauge_minutes WHERE minute >= toStartOfMinute({start:DateTime}) AND minute < {end:DateTime}
)
WHERE replica != ''
ORDER BY replica
