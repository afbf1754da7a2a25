-- Data quality per replica over [start, end): tokens the spans report vs the engine's own
-- counters (vllm:prompt_tokens + vllm:generation_tokens increases per scrape, in the minute of the
-- scrape), the gap = counters - the span tokens those scrapes observed (replica_minutes.counted_tokens:
-- work the spans missed, e.g. requests aborted by the client), the money that gap cost as
-- `unspanned` work, minutes priced at the default (replica not in fleet.yaml) or unpriced, reserved
-- minutes the replica was down, cached tokens estimated from the counter hit rate, calls whose
-- evidence was a gateway or client span (no engine span), and minutes recomputed because their data
-- arrived after the live window (late_minutes; replica '' = not tied to one replica).
-- Each CTE is referenced once (ClickHouse inlines a CTE at every reference): FULL JOINs give the keys.
WITH
    {start:DateTime} AS p_start,
    {end:DateTime} AS p_end,
    rm AS (
        SELECT replica,
               count() AS up_minutes,
               sum(prompt_tokens + output_tokens) AS span_tokens,
               sumIf(ifNull(counter_prompt_tokens, 0) + ifNull(counter_generation_tokens, 0),
                     counter_prompt_tokens IS NOT NULL OR counter_generation_tokens IS NOT NULL) AS counter_tokens,
               countIf(counter_prompt_tokens IS NOT NULL OR counter_generation_tokens IS NOT NULL) AS counter_minutes,
               sumIf(ifNull(counted_tokens, 0),
                     counter_prompt_tokens IS NOT NULL OR counter_generation_tokens IS NOT NULL) AS span_tokens_counted,
               countIf(in_fleet = 0) AS default_priced_minutes,
               countIf(priced = 0) AS unpriced_minutes,
               countIf(up = 0) AS down_minutes,
               sum(unspanned_usd) AS unspanned,
               sum(cached_estimated_tokens) AS cached_estimated,
               sum(spend_usd) AS spend
        FROM replica_minutes
        WHERE minute >= p_start AND minute < p_end
        GROUP BY replica
    ),
    ev AS (
        SELECT replica,
               sumIf(requests, call_source = 'gateway') AS gateway_evidence_calls,
               sumIf(requests, call_source = 'client') AS client_evidence_calls
        FROM call_costs
        WHERE minute >= p_start AND minute < p_end
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
