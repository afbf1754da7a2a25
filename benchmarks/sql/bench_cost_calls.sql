-- Cost benchmark data: calls {first}..{first}+{n} of a workload spread evenly over
-- [t0, t0 + n x ms_per_call): each call = a gateway attempt row
-- plus the engine row below it (parent = the attempt), 5 calls per task (steps 0-4), 10 replicas,
-- 2 models, 20 tenants, 3 task types, ~5% errors, ~3% partial streams. Deterministic hashes of the
-- call number, so every run builds the same store.
INSERT INTO llm_calls (start_time, end_time, trace_id, span_id, parent_span_id, call_source, service_name,
                       span_name, replica, gpu_type, model, task_id, task_type, task_step, task_attempt,
                       tenant_id, tenant_priority, prompt_tokens, cached_tokens, output_tokens, ttft_s, e2e_s,
                       finish_reason, status, error_type, partial)
SELECT
    start_time,
    start_time + toIntervalMillisecond(toInt64(e2e_s * 1000)) AS end_time,
    concat('tr', toString(intDiv(i, 5))) AS trace_id,
    concat(if(role = 0, 'g', 'e'), toString(i)) AS span_id,
    if(role = 0, '', concat('g', toString(i))) AS parent_span_id,
    if(role = 0, 'gateway', 'engine') AS call_source,
    if(role = 0, 'gateway', 'vllm') AS service_name,
    if(role = 0, 'gateway.attempt', 'llm_request') AS span_name,
    concat('r', toString(i % 10)) AS replica,
    if(role = 1, if(i % 10 < 6, 'H100', 'A100'), '') AS gpu_type,
    if(intDiv(i, 5) % 3 = 0, 'llama-70b', 'llama-8b') AS model,
    if(role = 0, concat('task-', toString(intDiv(i, 5))), '') AS task_id,
    if(role = 0, ['chat', 'copilot', 'research_agent'][intDiv(i, 5) % 3 + 1], '') AS task_type,
    if(role = 0, toString(i % 5), '') AS task_step,
    if(role = 0, toUInt16(1), NULL) AS task_attempt,
    if(role = 0, concat('tenant-', toString(intDiv(i, 5) % 20)), '') AS tenant_id,
    if(role = 0, 'interactive', '') AS tenant_priority,
    toUInt32(200 + sipHash64(i, 1) % 2000) AS prompt_tokens,
    if(role = 1, toUInt32((sipHash64(i, 2) % 4) * 100), NULL) AS cached_tokens,
    toUInt32(20 + sipHash64(i, 3) % 400) AS output_tokens,
    0.05 + (sipHash64(i, 4) % 400) / 1000.0 AS ttft_s,
    1.0 + (sipHash64(i, 5) % 40000) / 1000.0 AS e2e_s,
    if(sipHash64(i, 6) % 100 < 3, 'abort', 'stop') AS finish_reason,
    if(sipHash64(i, 6) % 100 < 5, 'error', 'ok') AS status,
    if(sipHash64(i, 6) % 100 < 5, 'http.500', '') AS error_type,
    toUInt8(sipHash64(i, 6) % 100 < 3) AS partial
FROM (
    SELECT number + {first:UInt64} AS i,
           {t0:DateTime64(3)} + toIntervalMillisecond(toInt64((number + {first:UInt64}) * {ms_per_call:Float64})) AS start_time
    FROM numbers({n:UInt64})
)
ARRAY JOIN [0, 1] AS role
