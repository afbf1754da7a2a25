-- Weekly review, lever "avoid": per replica in [start, end), the allocated cost of prefill work
-- (a call's cost x its prefill share of work: w_prefill x uncached prompt tokens over
-- w_prefill x uncached prompt + w_decode x output, weights from cost_settings as the cost job
-- uses them), and the span-level prompt / cached tokens (a fallback hit rate when vLLM's
-- prefix-cache counters are not scraped). Pieces of one call are summed first (tokens live on
-- the piece of the minute the call started).
WITH
    (SELECT argMax(w_prefill, synced_at) FROM cost_settings) AS w_prefill,
    (SELECT argMax(w_decode, synced_at) FROM cost_settings) AS w_decode
SELECT
    replica,
    sum(call_cost) AS allocated_usd,
    sum(if(call_work > 0, call_cost * w_prefill * uncached / call_work, 0)) AS prefill_usd,
    sum(prompt) AS prompt_tok,
    sum(cached) AS cached_tok
FROM (
    SELECT
        replica,
        call_id,
        sum(cost_usd) AS call_cost,
        sum(prompt_tokens) AS prompt,
        sum(cached_tokens) AS cached,
        greatest(toInt64(prompt) - toInt64(cached), 0) AS uncached,
        w_prefill * uncached + w_decode * sum(output_tokens) AS call_work
    FROM call_costs
    WHERE minute >= {start:DateTime} AND minute < {end:DateTime} AND replica != ''
    GROUP BY replica, call_id
)
GROUP BY replica
ORDER BY replica
