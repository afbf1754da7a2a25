-- Explicit-window run of the hourly rollups (migration 1003): the replica rows, after the chunk's
-- replica_minutes (schema/jobs/schedule.py: step *rollup_replicas*, beside its tasks). As in
-- run_cost_rollup_calls.sql: every hour [ws, we) touched, a new version (run_id), readable once
-- run_cost_rollup_marks.sql marks it.
-- h0 = first touched hour, h1 = end of the complete hours, h_end = end of the touched hours.
INSERT INTO cost_replica_hours
WITH toStartOfHour({ws:DateTime}) AS h0,
     toStartOfHour({we:DateTime} - INTERVAL 1 SECOND) + INTERVAL 1 HOUR AS h_end,
     least(h_end, toStartOfHour((SELECT max(watermark) FROM cost_watermark))) AS h1
SELECT toStartOfHour(minute) AS hour, {run_id:UInt64} AS version, replica,
       count(), sum(spend_usd), sum(allocated_usd), sum(idle_usd), sumIf(idle_usd, up = 0), countIf(up = 0),
       sum(ifNull(running_avg, 0)), count(running_avg),
       sum(prompt_tokens + output_tokens),
       sumIf(ifNull(counter_prompt_tokens, 0) + ifNull(counter_generation_tokens, 0),
             counter_prompt_tokens IS NOT NULL OR counter_generation_tokens IS NOT NULL),
       countIf(counter_prompt_tokens IS NOT NULL OR counter_generation_tokens IS NOT NULL),
       sumIf(ifNull(counted_tokens, 0), counter_prompt_tokens IS NOT NULL OR counter_generation_tokens IS NOT NULL),
       countIf(in_fleet = 0), countIf(priced = 0), sum(unspanned_usd), sum(cached_estimated_tokens)
FROM replica_minutes_history
WHERE minute >= h0 AND minute < h1
GROUP BY hour, replica;
