-- Resume the periodic cost chain's schedule in this database.
SYSTEM START VIEW cost_copy_call_costs_mv;
SYSTEM START VIEW cost_copy_replica_minutes_mv;
SYSTEM START VIEW cost_copy_tasks_mv;
SYSTEM START VIEW cost_watermark_mv;
SYSTEM START VIEW cost_clock_mv;
SYSTEM START VIEW cost_resolved_calls_mv;
SYSTEM START VIEW cost_engine_counters_mv;
SYSTEM START VIEW cost_replica_gauges_mv;
SYSTEM START VIEW cost_reconciliation_mv;
SYSTEM START VIEW cost_call_costs_mv;
SYSTEM START VIEW cost_replica_minutes_mv;
SYSTEM START VIEW cost_tasks_mv;
