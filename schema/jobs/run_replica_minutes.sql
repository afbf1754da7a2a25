-- Explicit-window run of the replica_minutes job (after call_costs: it sums that view and reads the
-- run's reconciliation).
INSERT INTO replica_minutes_history SELECT * FROM job_replica_minutes(ws = {ws:DateTime}, we = {we:DateTime}, run_id = {run_id:UInt64});
