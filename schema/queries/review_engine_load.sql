-- Weekly review, levers "move" and "delay": per replica in [start, end), the engine requests
-- (llm_calls rows with call_source 'engine'), their work in tokens (prompt minus cached, plus
-- output), busy time (sum of e2e seconds), and time waiting in the engine queue
-- (gen_ai.latency.time_in_queue: mean, p95, and the count of requests queued over
-- {queue_threshold_s} seconds).
SELECT
    replica,
    anyLast(model) AS model_name,
    anyLast(gpu_type) AS gpu,
    count() AS requests,
    sum(greatest(toInt64(ifNull(prompt_tokens, 0)) - toInt64(ifNull(cached_tokens, 0)), 0)) AS uncached_prompt_tok,
    sum(ifNull(prompt_tokens, 0)) AS prompt_tok,
    sum(ifNull(output_tokens, 0)) AS output_tok,
    sum(e2e_s) AS busy_s,
    avg(queue_s) AS queue_mean_s,
    quantile(0.95)(queue_s) AS queue_p95_s,
    countIf(queue_s > {queue_threshold_s:Float64}) AS queued_over_threshold
FROM llm_calls
WHERE call_source = 'engine'
  AND start_time >= {start:DateTime64(3)} AND start_time < {end:DateTime64(3)}
GROUP BY replica
ORDER BY replica
