-- After an explicit run's chunk: drop its scratch rows (one partition per run_id, migrations 1003, 1004).
ALTER TABLE resolved_calls_runs DROP PARTITION {run_id:UInt64};
ALTER TABLE reconciliation_runs DROP PARTITION {run_id:UInt64};
ALTER TABLE engine_counters_runs DROP PARTITION {run_id:UInt64};
ALTER TABLE replica_gauges_runs DROP PARTITION {run_id:UInt64};
