-- Per replica and window of window_seconds over [start, end): the latency-cost-throughput
-- triangle. Throughput and latency from the engine's spans (llm_calls, calls that ENDED in the
-- window: quantileExact = nearest rank), spend from replica_minutes, successful tasks = distinct
-- tasks that succeeded (ended in the window) and ran a call on the replica.
-- Each CTE is referenced once (ClickHouse inlines a CTE at every reference): the keys are the
-- FULL JOIN of the parts. Successes: the window's successful tasks are the (small) right side of
-- the join and the call pieces are probed against it, counted distinct per replica and window
-- (a DISTINCT (task, replica) over every piece of the last day first was most of the query).
WITH
    {start:DateTime} AS p_start,
    {end:DateTime} AS p_end,
    {window_seconds:UInt32} AS p_win,
    eng AS (
        SELECT replica, toStartOfInterval(end_time, toIntervalSecond(p_win)) AS window_start,
               count() AS requests,
               sum(ifNull(prompt_tokens, 0) + ifNull(output_tokens, 0)) AS tokens,
               sum(ifNull(output_tokens, 0)) AS out_tokens,
               quantileExact(0.99)(ttft_s) AS ttft_p99_s,
               quantileExact(0.99)(e2e_s) AS e2e_p99_s
        FROM llm_calls
        WHERE call_source = 'engine' AND end_time >= p_start AND end_time < p_end
          -- the sort key is the start minute: bound the start by the day the successes look back
          -- (a call ends after it starts; one running longer than a day is out of the triangle)
          AND start_time >= p_start - INTERVAL 1 DAY AND start_time < p_end
        GROUP BY replica, window_start
    ),
    rm AS (
        SELECT replica, toStartOfInterval(minute, toIntervalSecond(p_win)) AS window_start,
               sum(spend_usd) AS spend, sum(idle_usd) AS idle, avg(running_avg) AS running
        FROM replica_minutes
        WHERE minute >= p_start AND minute < p_end
        GROUP BY replica, window_start
    ),
    ok AS (
        SELECT task_id, minute FROM tasks
        WHERE outcome = 'success' AND minute >= p_start AND minute < p_end
    ),
    succ AS (
        SELECT c.replica AS replica, toStartOfInterval(t.minute, toIntervalSecond(p_win)) AS window_start,
               uniqExact(c.task_id) AS successes
        FROM (SELECT task_id, replica FROM call_costs
              WHERE minute >= p_start - INTERVAL 1 DAY AND minute < p_end AND task_id != '') AS c
        INNER JOIN ok AS t ON c.task_id = t.task_id
        GROUP BY replica, window_start
    )
SELECT
    replica,
    window_start,
    toUInt64(ifNull(eng.requests, 0)) AS requests,
    ifNull(eng.tokens, 0) / p_win AS throughput_tokens_per_s,
    ifNull(eng.out_tokens, 0) / p_win AS output_tokens_per_s,
    toUInt64(ifNull(succ.successes, 0)) AS successful_tasks,
    successful_tasks * 3600.0 / p_win AS successful_tasks_per_hour,
    eng.ttft_p99_s AS ttft_p99_s,
    eng.e2e_p99_s AS e2e_p99_s,
    ifNull(rm.spend, 0) AS spend_usd,
    ifNull(rm.idle, 0) AS idle_usd,
    if(successful_tasks > 0, spend_usd / successful_tasks, NULL) AS cpst_usd,
    rm.running AS running_requests_avg
FROM eng
FULL JOIN rm USING (replica, window_start)
LEFT JOIN succ USING (replica, window_start)
ORDER BY window_start, replica
SETTINGS join_use_nulls = 1
