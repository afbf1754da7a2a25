-- Data quality per replica over [start, end): tokens the spans report vs the engine's own
-- counters (vllm:prompt_tokens + vllm:generation_tokens increases per scrape, in the minute of the
-- scrape), the gap = counters - the span tokens those scrapes observed (replica_minutes.counted_tokens:
-- work the spans missed, e.g. requests aborted by the client), the money that gap cost as
-- `unspanned` work, minutes priced at the default (replica not in fleet.yaml) or unpriced, reserved
-- minutes the replica was down, cached tokens estimated from the counter hit rate, calls whose
-- evidence was a gateway or client span (no engine span), and minutes recomputed because their data
-- arrived after the live window (late_minutes; replica '' = not tied to one replica).
-- Each CTE is referenced once (ClickHouse inlines a CTE at every reference): FULL JOINs give the keys.
-- Whole hours the cost jobs rolled up (migration 1003) are read from the hourly rollups, [p_hs, p_re);
-- the partial edge hours and hours not rolled up (the live window) from the raw tables.
-- Sections rollup (those reads) are omitted when the span is empty (cost._without_rollup): ClickHouse
-- would plan them for an empty range too.
WITH
    {start:DateTime} AS p_start,
    {end:DateTime} AS p_end,
    -- include: cost_rollup_params
    rm AS (
        SELECT replica,
               sum(r_up_minutes) AS up_minutes,
               sum(r_span_tokens) AS span_tokens,
               sum(r_counter_tokens) AS counter_tokens,
               sum(r_counter_minutes) AS counter_minutes,
               sum(r_span_tokens_counted) AS span_tokens_counted,
               sum(r_default_priced_minutes) AS default_priced_minutes,
               sum(r_unpriced_minutes) AS unpriced_minutes,
               sum(r_down_minutes) AS down_minutes,
               sum(r_unspanned) AS unspanned,
               sum(r_cached_estimated) AS cached_estimated,
               sum(r_spend) AS spend
        FROM (
            SELECT replica,
                   count() AS r_up_minutes,
                   sum(prompt_tokens + output_tokens) AS r_span_tokens,
                   sumIf(ifNull(counter_prompt_tokens, 0) + ifNull(counter_generation_tokens, 0),
                         counter_prompt_tokens IS NOT NULL OR counter_generation_tokens IS NOT NULL) AS r_counter_tokens,
                   countIf(counter_prompt_tokens IS NOT NULL OR counter_generation_tokens IS NOT NULL) AS r_counter_minutes,
                   sumIf(ifNull(counted_tokens, 0),
                         counter_prompt_tokens IS NOT NULL OR counter_generation_tokens IS NOT NULL) AS r_span_tokens_counted,
                   countIf(in_fleet = 0) AS r_default_priced_minutes,
                   countIf(priced = 0) AS r_unpriced_minutes,
                   countIf(up = 0) AS r_down_minutes,
                   sum(unspanned_usd) AS r_unspanned,
                   sum(cached_estimated_tokens) AS r_cached_estimated,
                   sum(spend_usd) AS r_spend
            FROM (SELECT * FROM replica_minutes_history WHERE minute < p_wm
                  UNION ALL SELECT * FROM replica_minutes_live WHERE minute >= p_wm)
            WHERE ((minute >= p_start AND minute < least(p_hs, p_end)) OR (minute >= p_re AND minute < p_end))
            GROUP BY replica
            -- section: rollup
            UNION ALL
            SELECT replica, sum(minutes), sum(span_tokens), sum(counter_tokens), sum(counter_minutes),
                   sum(counted_tokens), sum(default_priced_minutes), sum(unpriced_minutes), sum(down_minutes),
                   sum(unspanned_usd), sum(cached_estimated_tokens), sum(spend_usd)
            FROM cost_replica_hours
            WHERE hour >= p_hs AND hour < p_re
              AND version = p_versions[dateDiff('hour', p_hs, hour) + 1]
            GROUP BY replica
            -- end section: rollup
        )
        GROUP BY replica
    ),
    ev AS (
        SELECT replica,
               sumIf(requests, call_source = 'gateway') AS gateway_evidence_calls,
               sumIf(requests, call_source = 'client') AS client_evidence_calls
        FROM (
            SELECT replica, call_source, requests
            FROM (SELECT * FROM call_costs_history WHERE minute < p_wm
                  UNION ALL SELECT * FROM call_costs_live WHERE minute >= p_wm)
            WHERE ((minute >= p_start AND minute < least(p_hs, p_end)) OR (minute >= p_re AND minute < p_end))
            -- section: rollup
            UNION ALL
            SELECT replica, call_source, requests FROM cost_hours
            WHERE hour >= p_hs AND hour < p_re
              AND version = p_versions[dateDiff('hour', p_hs, hour) + 1]
            -- end section: rollup
        )
        GROUP BY replica
    ),
    late AS (
        SELECT replica, uniqExact(minute) AS late_minutes
        FROM late_minutes
        WHERE minute >= p_start AND minute < p_end AND recomputed_at IS NOT NULL
        GROUP BY replica
    )
SELECT
    replica,
    toUInt64(ifNull(rm.up_minutes, 0)) AS up_minutes,
    toUInt64(ifNull(rm.span_tokens, 0)) AS span_tokens,
    if(ifNull(rm.counter_minutes, 0) > 0, rm.counter_tokens, NULL) AS counter_tokens,
    if(ifNull(rm.counter_minutes, 0) > 0, rm.counter_tokens - rm.span_tokens_counted, NULL) AS token_gap,
    if(ifNull(rm.counter_minutes, 0) > 0 AND rm.counter_tokens > 0,
       (rm.counter_tokens - rm.span_tokens_counted) / rm.counter_tokens, NULL) AS token_gap_ratio,
    toUInt64(ifNull(rm.default_priced_minutes, 0)) AS default_priced_minutes,
    toUInt64(ifNull(rm.unpriced_minutes, 0)) AS unpriced_minutes,
    toUInt64(ifNull(ev.gateway_evidence_calls, 0)) AS gateway_evidence_calls,
    toUInt64(ifNull(ev.client_evidence_calls, 0)) AS client_evidence_calls,
    toUInt64(ifNull(rm.down_minutes, 0)) AS down_minutes,
    ifNull(rm.unspanned, 0) AS unspanned_usd,
    toUInt64(ifNull(rm.cached_estimated, 0)) AS cached_estimated_tokens,
    toUInt64(ifNull(late.late_minutes, 0)) AS late_minutes_recomputed,
    ifNull(rm.spend, 0) AS spend_usd
FROM rm
FULL JOIN ev USING (replica)
FULL JOIN late USING (replica)
ORDER BY replica
SETTINGS join_use_nulls = 1
