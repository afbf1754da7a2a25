-- Where the money of [start, end) went, by category of the minute the work ran: the seven
-- mutually exclusive categories add up to the spend (useful + retry_waste + failed_task_waste +
-- pending + unattributed + unspanned + idle = spend); 'partial' (calls that streamed, then broke)
-- and 'down' (idle spend of reserved replicas in minutes they were not up) are measures inside
-- them (is_subset = 1).
-- Whole hours the cost jobs rolled up (migration 1003) are read from the hourly rollups, [p_hs, p_re);
-- the partial edge hours and hours not rolled up (the live window) from the raw tables.
WITH
    {start:DateTime} AS p_start,
    {end:DateTime} AS p_end,
    -- include: cost_rollup_params
    pieces AS (
        -- one read of the pieces: a partial piece counts in its category and in 'partial'
        -- (partial tokens = the output tokens streamed before the call broke)
        SELECT arrayJoin(if(partial = 1, [category, 'partial'], [category])) AS cat,
               sum(cost_usd) AS usd, sum(requests) AS calls,
               sum(if(cat = 'partial', toUInt64(output_tokens), prompt_tokens + output_tokens)) AS tokens
        FROM (
            SELECT category, partial, cost_usd, requests, prompt_tokens, output_tokens
            FROM (SELECT * FROM call_costs_history WHERE minute < p_wm
                  UNION ALL SELECT * FROM call_costs_live WHERE minute >= p_wm)
            WHERE ((minute >= p_start AND minute < least(p_hs, p_end)) OR (minute >= p_re AND minute < p_end))
            UNION ALL
            SELECT category, partial, cost_usd, requests, prompt_tokens, output_tokens FROM cost_hours
            WHERE hour >= p_hs AND hour < p_re
              AND version = p_versions[dateDiff('hour', p_hs, hour) + 1]
        )
        GROUP BY cat
    ),
    rm AS (
        SELECT sum(r_spend) AS spend, sum(r_idle) AS idle, sum(r_down) AS down, sum(r_down_minutes) AS down_minutes
        FROM (
            SELECT sum(spend_usd) AS r_spend, sum(idle_usd) AS r_idle, sumIf(idle_usd, up = 0) AS r_down,
                   countIf(up = 0) AS r_down_minutes
            FROM (SELECT * FROM replica_minutes_history WHERE minute < p_wm
                  UNION ALL SELECT * FROM replica_minutes_live WHERE minute >= p_wm)
            WHERE ((minute >= p_start AND minute < least(p_hs, p_end)) OR (minute >= p_re AND minute < p_end))
            UNION ALL
            SELECT sum(spend_usd), sum(idle_usd), sum(down_usd), sum(down_minutes) FROM cost_replica_hours
            WHERE hour >= p_hs AND hour < p_re
              AND version = p_versions[dateDiff('hour', p_hs, hour) + 1]
        )
    ),
    cats AS (
        SELECT arrayJoin([('useful', 1), ('retry_waste', 2), ('failed_task_waste', 3), ('pending', 4),
                          ('unattributed', 5), ('unspanned', 6), ('idle', 7), ('partial', 8), ('down', 9)]) AS c,
               c.1 AS category, c.2 AS ord
    )
SELECT
    cats.category AS category,
    toUInt8(cats.category IN ('partial', 'down')) AS is_subset,
    multiIf(cats.category = 'idle', rm.idle, cats.category = 'down', rm.down, ifNull(pieces.usd, 0)) AS usd,
    if(rm.spend > 0, usd / rm.spend, NULL) AS share_of_spend,
    toUInt64(if(cats.category IN ('idle', 'down'), 0, ifNull(pieces.calls, 0))) AS calls,
    toUInt64(if(cats.category IN ('idle', 'down'), 0, ifNull(pieces.tokens, 0))) AS tokens
FROM cats
LEFT JOIN pieces ON pieces.cat = cats.category
CROSS JOIN rm
ORDER BY cats.ord
SETTINGS join_use_nulls = 1
