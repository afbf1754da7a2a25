-- Run the periodic chain once now, each step after the steps it reads (migration 1005), the steps
-- that read nothing of each other side by side: a REFRESH returns at once, a WAIT holds until done.
SYSTEM REFRESH VIEW cost_copy_call_costs_mv;
SYSTEM REFRESH VIEW cost_copy_replica_minutes_mv;
SYSTEM REFRESH VIEW cost_copy_tasks_mv;
SYSTEM WAIT VIEW cost_copy_call_costs_mv;
SYSTEM WAIT VIEW cost_copy_replica_minutes_mv;
SYSTEM WAIT VIEW cost_copy_tasks_mv;
SYSTEM REFRESH VIEW cost_watermark_mv;
SYSTEM WAIT VIEW cost_watermark_mv;
SYSTEM REFRESH VIEW cost_clock_mv;
SYSTEM WAIT VIEW cost_clock_mv;
SYSTEM REFRESH VIEW cost_resolved_calls_mv;
SYSTEM REFRESH VIEW cost_engine_counters_mv;
SYSTEM REFRESH VIEW cost_replica_gauges_mv;
SYSTEM WAIT VIEW cost_resolved_calls_mv;
SYSTEM WAIT VIEW cost_engine_counters_mv;
SYSTEM WAIT VIEW cost_replica_gauges_mv;
SYSTEM REFRESH VIEW cost_reconciliation_mv;
SYSTEM WAIT VIEW cost_reconciliation_mv;
SYSTEM REFRESH VIEW cost_call_costs_mv;
SYSTEM WAIT VIEW cost_call_costs_mv;
SYSTEM REFRESH VIEW cost_replica_minutes_mv;
SYSTEM REFRESH VIEW cost_tasks_mv;
SYSTEM WAIT VIEW cost_replica_minutes_mv;
SYSTEM WAIT VIEW cost_tasks_mv;
