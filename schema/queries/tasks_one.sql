-- One task by id (any time): the cost job's row for it, all its columns (tasks.task_detail keeps
-- tasks_table's). A task's row is rewritten when late data recomputes it: the newest end_time wins.
-- Money in USD, times UTC.
SELECT *
FROM tasks
WHERE task_id = {task_id:String}
ORDER BY end_time DESC
LIMIT 1
