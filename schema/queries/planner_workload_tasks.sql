-- Planner, workload extraction: the tasks that STARTED in [start, end) and whose row the cost job's
-- `tasks` holds for a minute before `end` (a task's row lives in the minute it ended, or was found
-- abandoned). A task still running at `end` is left out: its row comes later, when the periodic chain
-- reaches its end, so reading it would make a plan of the same period depend on when it ran.
-- One row per task, in start order: what the planner replays (arrival, type, tenant, priority,
-- model, SLO) and what it learns client behaviour from (outcome, e2e of abandoned tasks).
-- Times UTC; start_time DateTime64(9); e2e_s seconds; SLOs milliseconds (root span, else task_slos).
WITH
    {start:DateTime} AS p_start,
    {end:DateTime} AS p_end
SELECT
    task_id,
    task_type,
    tenant_id,
    tenant_priority,
    model,
    start_time,
    outcome,
    e2e_s,
    slo_ttft_ms,
    slo_e2e_ms
FROM tasks
WHERE minute >= p_start AND minute < p_end
  AND start_time >= p_start AND start_time < p_end
  AND task_id != ''
ORDER BY start_time, task_id
