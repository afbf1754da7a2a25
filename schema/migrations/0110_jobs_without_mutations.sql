-- The explicit cost runner without mutations. A lightweight DELETE ran as an
-- ALTER UPDATE mutation over every part of the table and waited for it: 0.2-4 s per statement
-- whatever the window held, six statements per chunk. Now
--   * the history tables keep _block_number / _block_offset, so `DELETE ... SETTINGS
--     lightweight_delete_mode = 'lightweight_update'` (schema/jobs/delete_*.sql) writes a small
--     patch part (the deleted rows' addresses) instead, visible at once, applied by later merges.
--     Metadata only: existing parts are not rewritten;
--   * the scratch tables of an explicit run are partitioned by run_id, so a run drops its rows
--     with `ALTER TABLE ... DROP PARTITION` (schema/jobs/drop_scratch.sql). They hold only rows
--     of runs in progress: recreated empty with the same columns (an interrupted run's leftovers
--     expire by TTL anyway).
ALTER TABLE call_costs_history MODIFY SETTING enable_block_number_column = 1, enable_block_offset_column = 1;
ALTER TABLE replica_minutes_history MODIFY SETTING enable_block_number_column = 1, enable_block_offset_column = 1;
ALTER TABLE tasks_history MODIFY SETTING enable_block_number_column = 1, enable_block_offset_column = 1;

DROP TABLE IF EXISTS resolved_calls_runs_unpartitioned;
DROP TABLE IF EXISTS resolved_calls_runs_by_run;
CREATE TABLE resolved_calls_runs_by_run AS resolved_calls_runs
ENGINE = MergeTree() PARTITION BY run_id ORDER BY (run_id, replica, start_time) TTL written_at + INTERVAL 1 DAY;
RENAME TABLE resolved_calls_runs TO resolved_calls_runs_unpartitioned, resolved_calls_runs_by_run TO resolved_calls_runs;
DROP TABLE resolved_calls_runs_unpartitioned;

DROP TABLE IF EXISTS reconciliation_runs_unpartitioned;
DROP TABLE IF EXISTS reconciliation_runs_by_run;
CREATE TABLE reconciliation_runs_by_run AS reconciliation_runs
ENGINE = MergeTree() PARTITION BY run_id ORDER BY (run_id, replica, minute) TTL written_at + INTERVAL 1 DAY;
RENAME TABLE reconciliation_runs TO reconciliation_runs_unpartitioned, reconciliation_runs_by_run TO reconciliation_runs;
DROP TABLE reconciliation_runs_unpartitioned;
