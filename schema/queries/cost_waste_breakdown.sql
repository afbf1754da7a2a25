-- Where the money of [start, end) went, by category of the minute the work ran: the seven
-- mutually exclusive categories add up to the spend (useful + retry_waste + failed_task_waste +
-- pending + unattributed + unspanned + idle = spend); 'partial' (calls that streamed, then broke)
-- and 'down' (idle spend of reserved replicas in minutes they were not up) are measures inside
-- them (is_subset = 1).
WITH
    {start:DateTime} AS p_start,
    {end:DateTime} AS p_end,
    pieces AS (
        -- one read of the pieces: a partial piece counts in its category and in 'partial'
        -- (partial tokens = the output tokens streamed before the call broke)
        SELECT arrayJoin(if(partial = 1, [category, 'partial'], [category])) AS cat,
               sum(cost_usd) AS usd, sum(requests) AS calls,
               sum(if(cat = 'partial', toUInt64(output_tokens), prompt_tokens + output_tokens)) AS tokens
        FROM call_costs
        WHERE minute >= p_start AND minute < p_end
        GROUP BY cat
    ),
    rm AS (
        SELECT sum(spend_usd) AS spend, sum(idle_usd) AS idle, sumIf(idle_usd, up = 0) AS down,
               countIf(up = 0) AS down_minutes
        FROM replica_minutes
        WHERE minute >= p_start AND minute < p_end
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
