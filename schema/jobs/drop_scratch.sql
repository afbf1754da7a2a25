-- After an explicit run's chunk: drop its scratch rows (one partition per run_id, migration 0110).
ALTER TABLE resolved_calls_runs DROP PARTITION {run_id:UInt64};
ALTER TABLE reconciliation_runs DROP PARTITION {run_id:UInt64};
