-- Planner, workload extraction: the steps of the tasks that started in [start, end), as their
-- clients asked for them, from the client attempt spans (llm_calls, call_source = 'client': ONE PER
-- CLIENT ATTEMPT, docs/telemetry.md). One row per (task, step), in the order the steps started:
-- calls = the step's attempts numbered 1 (a fan-out of k calls has k first attempts); max_attempt;
-- ok = (input, output) tokens of the attempts that succeeded, i.e. each accepted call's lengths, in
-- call order (task.call, then start time).
-- step_start: the step's first attempt start (DateTime64(9), UTC); tokens are counts.
WITH
    {start:DateTime} AS p_start,
    {end:DateTime} AS p_end,
    -- include: planner_started_tasks
SELECT
    task_id,
    task_step AS step,
    min(start_time) AS step_start,
    toUInt32(countIf(ifNull(task_attempt, 1) <= 1)) AS calls,
    toUInt32(max(ifNull(task_attempt, 1))) AS max_attempt,
    -- in the order the client sent the step's calls (task.call, 0 when not sent, then start): the
    -- simulator routes a fan-out's calls in that order, so a replay keeps it
    arrayMap(x -> tuple(x.3, x.4), arraySort(x -> (x.1, x.2), groupArrayIf(
        tuple(ifNull(task_call, 0), start_time, ifNull(prompt_tokens, 0), ifNull(output_tokens, 0)),
        status != 'error' AND error_type = '' AND prompt_tokens IS NOT NULL
        AND output_tokens IS NOT NULL))) AS ok
FROM llm_calls
WHERE call_source = 'client'
  AND start_time >= p_start AND start_time < p_end + INTERVAL 1 DAY
  AND task_id IN (SELECT task_id FROM started)
GROUP BY task_id, step
ORDER BY task_id, step_start, step
