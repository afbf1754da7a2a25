-- Explicit-window run of the call_costs job (after run_resolve.sql and the history delete): the
-- job view's output over this run's resolved calls and reconciliation into the history table.
INSERT INTO call_costs_history SELECT * FROM job_call_costs(ws = {ws:DateTime}, we = {we:DateTime}, run_id = {run_id:UInt64});
