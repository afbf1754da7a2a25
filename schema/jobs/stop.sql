-- Stop the periodic cost chain's schedule in this database.
SYSTEM STOP VIEW cost_copy_call_costs_mv;
SYSTEM STOP VIEW cost_copy_replica_minutes_mv;
SYSTEM STOP VIEW cost_copy_tasks_mv;
SYSTEM STOP VIEW cost_watermark_mv;
SYSTEM STOP VIEW cost_clock_mv;
SYSTEM STOP VIEW cost_resolved_calls_mv;
SYSTEM STOP VIEW cost_engine_counters_mv;
SYSTEM STOP VIEW cost_replica_gauges_mv;
SYSTEM STOP VIEW cost_reconciliation_mv;
SYSTEM STOP VIEW cost_call_costs_mv;
SYSTEM STOP VIEW cost_replica_minutes_mv;
SYSTEM STOP VIEW cost_tasks_mv;
