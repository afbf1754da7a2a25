-- Explicit-window run of the hourly rollups (migration 1003), first part: the rows that need only the
-- chunk's call_costs (and the raw engine calls), so they run right after the chunk's cost step, beside
-- its replica_minutes and tasks (schema/jobs/schedule.py: step *rollup_calls*);
-- run_cost_rollup_replicas.sql writes the replica rows after replica_minutes, run_cost_rollup.sql the
-- task rows after tasks, run_cost_rollup_marks.sql then the marks. Every hour [ws, we) touched is
-- rewritten as a new version (run_id); hours wholly below the watermark are summed from *_history.
-- Until the marks are written a reader keeps the hour's previous version. Insert-only: no mutation,
-- no delete.
-- h0 = first touched hour, h1 = end of the complete hours, h_end = end of the touched hours.
INSERT INTO cost_hours
WITH toStartOfHour({ws:DateTime}) AS h0,
     toStartOfHour({we:DateTime} - INTERVAL 1 SECOND) + INTERVAL 1 HOUR AS h_end,
     least(h_end, toStartOfHour((SELECT max(watermark) FROM cost_watermark))) AS h1
SELECT toStartOfHour(minute) AS hour, {run_id:UInt64} AS version, replica, model, task_type, tenant_id,
       category, call_source, partial, cached_estimated,
       sum(cost_usd), sum(requests), sum(prompt_tokens), sum(cached_tokens), sum(output_tokens)
FROM call_costs_history
WHERE minute >= h0 AND minute < h1
GROUP BY hour, replica, model, task_type, tenant_id, category, call_source, partial, cached_estimated;

-- The triangle's engine figures: engine calls that ended in the hour and started at most a day before it.
INSERT INTO cost_triangle_hours (hour, version, replica, part, requests, tokens, out_tokens, ttft_state, e2e_state)
WITH toStartOfHour({ws:DateTime}) AS h0,
     toStartOfHour({we:DateTime} - INTERVAL 1 SECOND) + INTERVAL 1 HOUR AS h_end,
     least(h_end, toStartOfHour((SELECT max(watermark) FROM cost_watermark))) AS h1
SELECT toDateTime(toStartOfHour(end_time), 'UTC') AS hour, {run_id:UInt64} AS version, replica, 'engine',
       count(), sum(ifNull(prompt_tokens, 0) + ifNull(output_tokens, 0)), sum(ifNull(output_tokens, 0)),
       quantileExactState(0.99)(ttft_s), quantileExactState(0.99)(e2e_s)
FROM llm_calls
WHERE call_source = 'engine' AND end_time >= h0 AND end_time < h1
  AND start_time >= h0 - INTERVAL 1 DAY AND start_time < h1
  AND start_time >= toStartOfHour(end_time) - INTERVAL 1 DAY
GROUP BY hour, replica;
