-- Fragment, not a query: the CTE `started`, the ids of the tasks that started in [p_start, p_end)
-- (the cost job's `tasks` rows; a task's row lives in the minute it ended, so rows up to a day after
-- p_end are read), as an item of a planner query's WITH clause ("-- include: planner_started_tasks").
    started AS (
        SELECT task_id FROM tasks
        WHERE minute >= p_start AND minute < p_end + INTERVAL 1 DAY
          AND start_time >= p_start AND start_time < p_end
          AND task_id != ''
    )
