-- Explicit-window run, first step beside run_resolve.sql: the engine counters and gauges of
-- [ws, we) once into engine_counters_runs / replica_gauges_runs under this run's id (migration
-- 1003; the periodic chain's cost_engine_counters_mv / cost_replica_gauges_mv write the _live
-- tables). run_reconcile.sql and the replica_minutes step read them; the runner drops them after
-- (drop_scratch.sql).
INSERT INTO engine_counters_runs
SELECT {run_id:UInt64}, *, toDateTime(now(), 'UTC') FROM job_engine_counters(ws = {ws:DateTime}, we = {we:DateTime});
INSERT INTO replica_gauges_runs
SELECT {run_id:UInt64}, *, toDateTime(now(), 'UTC') FROM job_replica_gauges(ws = {ws:DateTime}, we = {we:DateTime});
