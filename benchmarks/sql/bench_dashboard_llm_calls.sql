-- Benchmark data: {n} LLM call rows spread evenly over [t0, t0 + span_s), 10 calls per task
-- (4 engine, 3 gateway, 3 client), 16 replicas, 2 models, 20 tenants, 3 task types. Values are
-- deterministic hashes of the row number (no randomness), so every run builds the same store.
INSERT INTO llm_calls (start_time, end_time, trace_id, span_id, parent_span_id, call_source, service_name,
                       span_name, replica, gpu_type, model, request_id, task_id, task_type, task_step, task_attempt,
                       tenant_id, tenant_priority, prompt_tokens, cached_tokens, output_tokens, ttft_s, e2e_s,
                       queue_s, prefill_s, decode_s, inference_s, finish_reason, status, error_type, partial,
                       gateway_retries, upstream_status, policy)
SELECT
    start_time,
    start_time + toIntervalMillisecond(toInt64(e2e_s * 1000)) AS end_time,
    hex(sipHash64(intDiv(number, 10))) AS trace_id,
    hex(sipHash64(number, 1)) AS span_id,
    if(source = 'engine', hex(sipHash64(number + 4, 1)), if(source = 'gateway', hex(sipHash64(number, 7)), '')) AS parent_span_id,
    source AS call_source,
    multiIf(source = 'engine', 'vllm', source = 'gateway', 'gateway', 'agent') AS service_name,
    multiIf(source = 'engine', 'llm_request', source = 'gateway', 'gateway.attempt', 'chat') AS span_name,
    if(source = 'client', '', concat('r', toString(number % 16))) AS replica,
    if(number % 16 < 8, 'H100', 'A100') AS gpu_type,
    if(number % 3 = 0, 'llama-70b', 'llama-8b') AS model,
    '' AS request_id,
    if(source = 'engine', '', toString(intDiv(number, 10))) AS task_id,
    if(source = 'engine', '', ['chat', 'copilot', 'research_agent'][intDiv(number, 10) % 3 + 1]) AS task_type,
    concat('step', toString(number % 4)) AS task_step,
    toUInt16(1 + (sipHash64(number, 2) % 20 = 0)) AS task_attempt,
    if(source = 'engine', '', concat('tenant', toString(intDiv(number, 10) % 20))) AS tenant_id,
    'interactive' AS tenant_priority,
    toUInt32(200 + sipHash64(number, 3) % 4000) AS prompt_tokens,
    toUInt32(0) AS cached_tokens,
    toUInt32(10 + sipHash64(number, 4) % 500) AS output_tokens,
    0.05 + (sipHash64(number, 5) % 1000) / 500.0 * if(number % 16 = 3, 3, 1) AS ttft_s,
    ttft_s + output_tokens * 0.015 AS e2e_s,
    (sipHash64(number, 6) % 100) / 1000.0 AS queue_s,
    ttft_s - queue_s AS prefill_s,
    output_tokens * 0.015 AS decode_s,
    ttft_s - queue_s + output_tokens * 0.015 AS inference_s,
    if(sipHash64(number, 8) % 50 = 0, 'abort', 'stop') AS finish_reason,
    if(sipHash64(number, 8) % 50 = 0, 'error', 'ok') AS status,
    '' AS error_type,
    toUInt8(0) AS partial,
    NULL AS gateway_retries,
    NULL AS upstream_status,
    '' AS policy
FROM (
    SELECT number,
           {t0:DateTime64(3)} + toIntervalMillisecond(toInt64(number * ({span_s:UInt64} * 1000 / {n:UInt64}))) AS start_time,
           ['engine', 'engine', 'engine', 'engine', 'gateway', 'gateway', 'gateway', 'client', 'client', 'client'][number % 10 + 1] AS source
    FROM numbers({n:UInt64})
)
