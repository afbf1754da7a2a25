-- Per replica and window of window_seconds over [start, end): the latency-cost-throughput
-- triangle. Throughput and latency from the engine's spans (llm_calls, calls that ENDED in the
-- window: quantileExact = nearest rank), spend from replica_minutes, successful tasks = distinct
-- tasks that succeeded (ended in the window) and ran a call on the replica.
-- Each CTE is referenced once (ClickHouse inlines a CTE at every reference): the keys are the
-- FULL JOIN of the parts. Successes: the window's successful tasks are the (small) right side of
-- the join and the call pieces are probed against it, counted distinct per replica and window
-- (a DISTINCT (task, replica) over every piece of the last day first was most of the query).
-- A call that started more than a day before the hour it ended is out of the triangle, and a task
-- counts for a replica that ran one of its calls from the day before the hour it ended to that
-- hour's end (the successes look back a day).
-- With windows of whole hours, the hours the cost jobs rolled up (migration 1003:
-- cost_triangle_hours, cost_replica_hours) are read from the rollups, [p_hs, p_re): latencies as
-- quantile states, merged exactly, and successes as distinct counts per hour, summed (a task ends
-- in one hour); the partial edge hours and hours not rolled up (the live window) from the raw
-- tables. Shorter windows read raw only. With 6-hour or 1-day windows, a window that is one of the
-- triangle's blocks (migration 1003) whose mark names its hours' current versions (cost.rollup_span:
-- p_blocks, p_block_versions) takes the block's exact p99 and sums, computed once by the cost jobs,
-- instead of merging its hours' quantile states (which hold every call's latencies).
WITH
    {start:DateTime} AS p_start,
    {end:DateTime} AS p_end,
    {window_seconds:UInt32} AS p_win,
    toStartOfHour(p_start) AS p_h0,
    -- include: cost_rollup_params
    -- the blocks read whole (cost.rollup_span): start of each, and the version of its rows
    {block_starts:Array(DateTime)} AS p_blocks,
    {block_versions:Array(UInt64)} AS p_block_versions,
    eng AS (
        -- the blocks: one window each, nothing else falls in it (it lies in the rolled-up hours)
        SELECT replica, block_start AS window_start, requests, tokens, out_tokens,
               ttft_p99_s, e2e_p99_s
        FROM cost_triangle_blocks
        WHERE block_seconds = p_win AND has(p_blocks, block_start)
          AND version = p_block_versions[indexOf(p_blocks, block_start)]
        UNION ALL
        SELECT replica, window_start,
               sum(e_requests) AS requests, sum(e_tokens) AS tokens, sum(e_out_tokens) AS out_tokens,
               toNullable(toFloat64(quantileExactMerge(0.99)(e_ttft))) AS ttft_p99_s,
               toNullable(toFloat64(quantileExactMerge(0.99)(e_e2e))) AS e2e_p99_s
        FROM (
            SELECT replica, toStartOfInterval(end_time, toIntervalSecond(p_win)) AS window_start,
                   count() AS e_requests,
                   sum(ifNull(prompt_tokens, 0) + ifNull(output_tokens, 0)) AS e_tokens,
                   sum(ifNull(output_tokens, 0)) AS e_out_tokens,
                   quantileExactState(0.99)(ttft_s) AS e_ttft,
                   quantileExactState(0.99)(e2e_s) AS e_e2e
            FROM llm_calls
            WHERE call_source = 'engine'
              AND ((end_time >= p_start AND end_time < least(p_hs, p_end)) OR (end_time >= p_re AND end_time < p_end))
              -- the sort key is the start minute: bound the start too (a call ends after it starts)
              AND start_time >= p_h0 - INTERVAL 1 DAY AND start_time < p_end
              AND start_time >= toStartOfHour(end_time) - INTERVAL 1 DAY
            GROUP BY replica, window_start
            UNION ALL
            SELECT replica, toStartOfInterval(hour, toIntervalSecond(p_win)) AS window_start,
                   sum(requests), sum(tokens), sum(out_tokens),
                   quantileExactMergeState(0.99)(ttft_state), quantileExactMergeState(0.99)(e2e_state)
            FROM cost_triangle_hours
            WHERE part = 'engine' AND hour >= p_hs AND hour < p_re
              AND version = p_versions[dateDiff('hour', p_hs, hour) + 1]
              AND NOT has(p_blocks, toStartOfInterval(hour, toIntervalSecond(p_win)))
            GROUP BY replica, window_start
        )
        GROUP BY replica, window_start
    ),
    rm AS (
        SELECT replica, window_start, sum(r_spend) AS spend, sum(r_idle) AS idle,
               if(sum(r_running_n) > 0, sum(r_running_sum) / sum(r_running_n), NULL) AS running
        FROM (
            SELECT replica, toStartOfInterval(minute, toIntervalSecond(p_win)) AS window_start,
                   sum(spend_usd) AS r_spend, sum(idle_usd) AS r_idle,
                   sum(ifNull(running_avg, 0)) AS r_running_sum, count(running_avg) AS r_running_n
            FROM (SELECT * FROM replica_minutes_history WHERE minute < p_wm
                  UNION ALL SELECT * FROM replica_minutes_live WHERE minute >= p_wm)
            WHERE ((minute >= p_start AND minute < least(p_hs, p_end)) OR (minute >= p_re AND minute < p_end))
            GROUP BY replica, window_start
            UNION ALL
            SELECT replica, toStartOfInterval(hour, toIntervalSecond(p_win)) AS window_start,
                   sum(spend_usd), sum(idle_usd), sum(running_sum), sum(running_n)
            FROM cost_replica_hours
            WHERE hour >= p_hs AND hour < p_re
              AND version = p_versions[dateDiff('hour', p_hs, hour) + 1]
            GROUP BY replica, window_start
        )
        GROUP BY replica, window_start
    ),
    ok AS (
        -- successful tasks that ended in the raw part of the range
        SELECT task_id, minute
        FROM (SELECT * FROM tasks_history WHERE minute < p_wm
              UNION ALL SELECT * FROM tasks_live WHERE minute >= p_wm)
        WHERE outcome = 'success'
          AND ((minute >= p_start AND minute < least(p_hs, p_end)) OR (minute >= p_re AND minute < p_end))
    ),
    succ AS (
        SELECT replica, window_start, sum(s_successes) AS successes
        FROM (
            SELECT c.replica AS replica, toStartOfInterval(t.minute, toIntervalSecond(p_win)) AS window_start,
                   uniqExact(c.task_id) AS s_successes
            FROM (SELECT task_id, replica, minute FROM (SELECT * FROM call_costs_history WHERE minute < p_wm
                                                        UNION ALL SELECT * FROM call_costs_live WHERE minute >= p_wm)
                  WHERE ((minute >= p_h0 - INTERVAL 1 DAY AND minute < least(p_hs, p_end))
                         OR (minute >= p_re - INTERVAL 1 DAY AND minute < p_end))
                    AND task_id != '' AND task_id IN (SELECT task_id FROM ok)) AS c
            INNER JOIN ok AS t ON c.task_id = t.task_id
            WHERE c.minute >= toStartOfHour(t.minute) - INTERVAL 1 DAY
              AND c.minute < toStartOfHour(t.minute) + INTERVAL 1 HOUR
            GROUP BY replica, window_start
            UNION ALL
            SELECT replica, toStartOfInterval(hour, toIntervalSecond(p_win)) AS window_start,
                   sum(successes)
            FROM cost_triangle_hours
            WHERE part = 'successes' AND hour >= p_hs AND hour < p_re
              AND version = p_versions[dateDiff('hour', p_hs, hour) + 1]
            GROUP BY replica, window_start
        )
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
    rm.running AS running_requests_avg
FROM eng
FULL JOIN rm USING (replica, window_start)
LEFT JOIN succ USING (replica, window_start)
ORDER BY window_start, replica
SETTINGS join_use_nulls = 1
