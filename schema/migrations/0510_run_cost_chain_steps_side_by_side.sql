-- The periodic chain (0014, 0064, 0240) as the graph of what each step reads, not one line: a step
-- now waits only for the steps that write the tables it reads, so steps that read nothing of each
-- other run side by side (ClickHouse starts a refreshable view when every view in its DEPENDS ON has
-- refreshed for the same minute):
--   the three copies to history (each reads its own *_live table and the previous run's clock and
--   watermark)                                                  -> watermark -> clock
--   clock -> resolution, engine counters, gauges (each reads the clock's window of raw rows only)
--         -> reconciliation (reads all three) -> call costs
--   call costs -> replica-minutes (call costs, reconciliation, gauges) and tasks (call costs)
-- The rows are the same; a step never runs beside one that replaces a table it reads
-- (tests/test_jobs_chain_graph.py derives that from the stored queries). The copies keep APPEND
-- (ClickHouse cannot change it).
ALTER TABLE cost_copy_replica_minutes_mv MODIFY REFRESH EVERY 1 MINUTE APPEND;
ALTER TABLE cost_copy_tasks_mv MODIFY REFRESH EVERY 1 MINUTE APPEND;
ALTER TABLE cost_watermark_mv MODIFY REFRESH EVERY 1 MINUTE
    DEPENDS ON cost_copy_call_costs_mv, cost_copy_replica_minutes_mv, cost_copy_tasks_mv APPEND;
ALTER TABLE cost_engine_counters_mv MODIFY REFRESH EVERY 1 MINUTE DEPENDS ON cost_clock_mv;
ALTER TABLE cost_replica_gauges_mv MODIFY REFRESH EVERY 1 MINUTE DEPENDS ON cost_clock_mv;
ALTER TABLE cost_reconciliation_mv MODIFY REFRESH EVERY 1 MINUTE
    DEPENDS ON cost_resolved_calls_mv, cost_engine_counters_mv, cost_replica_gauges_mv;
ALTER TABLE cost_tasks_mv MODIFY REFRESH EVERY 1 MINUTE DEPENDS ON cost_call_costs_mv;
