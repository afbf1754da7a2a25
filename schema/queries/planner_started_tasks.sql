-- Fragment, not a query: the CTE `started`, the ids of the tasks that started in [p_start, p_end)
-- and ended before p_end (the cost job's `tasks` rows of the period's minutes: a task's row lives in
-- the minute it ended; one still running at p_end is left out, as in planner_workload_tasks.sql), as
-- an item of a planner query's WITH clause ("-- include: planner_started_tasks").
    started AS (
        SELECT task_id FROM tasks
        WHERE minute >= p_start AND minute < p_end
          AND start_time >= p_start AND start_time < p_end
          AND task_id != ''
    )
