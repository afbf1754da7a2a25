-- Explicit-window run of the replica_minutes job (after call_costs: it sums that view and reconciles
-- the run's resolved calls with the engine counters), then drop the run's scratch rows.
INSERT INTO replica_minutes_history SELECT * FROM job_replica_minutes(ws = {ws:DateTime}, we = {we:DateTime}, run_id = {run_id:UInt64});
DELETE FROM resolved_calls_runs WHERE run_id = {run_id:UInt64};
DELETE FROM reconciliation_runs WHERE run_id = {run_id:UInt64};
