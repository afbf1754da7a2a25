-- Explicit-window run of the call_costs job: replace the history rows of [ws, we) with the job
-- view's output (the same view the refreshable materialized view runs).
DELETE FROM call_costs_history WHERE minute >= {ws:DateTime} AND minute < {we:DateTime};
INSERT INTO call_costs_history SELECT * FROM job_call_costs(ws = {ws:DateTime}, we = {we:DateTime});
