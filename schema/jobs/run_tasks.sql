-- Explicit-window run of the tasks job (after call_costs: it sums that view).
INSERT INTO tasks_history SELECT * FROM job_tasks(ws = {ws:DateTime}, we = {we:DateTime});
