-- Run the periodic chain once now, in dependency order, waiting for each step.
SYSTEM REFRESH VIEW cost_copy_call_costs_mv;
SYSTEM WAIT VIEW cost_copy_call_costs_mv;
SYSTEM REFRESH VIEW cost_copy_replica_minutes_mv;
SYSTEM WAIT VIEW cost_copy_replica_minutes_mv;
SYSTEM REFRESH VIEW cost_copy_tasks_mv;
SYSTEM WAIT VIEW cost_copy_tasks_mv;
SYSTEM REFRESH VIEW cost_watermark_mv;
SYSTEM WAIT VIEW cost_watermark_mv;
SYSTEM REFRESH VIEW cost_clock_mv;
SYSTEM WAIT VIEW cost_clock_mv;
SYSTEM REFRESH VIEW cost_call_costs_mv;
SYSTEM WAIT VIEW cost_call_costs_mv;
SYSTEM REFRESH VIEW cost_replica_minutes_mv;
SYSTEM WAIT VIEW cost_replica_minutes_mv;
SYSTEM REFRESH VIEW cost_tasks_mv;
SYSTEM WAIT VIEW cost_tasks_mv;
