-- Cost benchmark data: the task root spans of calls {first}..{first}+{n} (5 calls per task):
-- 90% success, 7% failure, 3% with no root span (abandoned by the jobs).
INSERT INTO task_spans (trace_id, span_id, task_id, task_type, tenant_id, tenant_priority, outcome, start_time,
                        end_time, slo_ttft_ms, slo_e2e_ms, status, error_type)
SELECT
    concat('tr', toString(k)), concat('t', toString(k)), concat('task-', toString(k)),
    ['chat', 'copilot', 'research_agent'][k % 3 + 1], concat('tenant-', toString(k % 20)), 'interactive',
    if(sipHash64(k, 9) % 100 < 90, 'success', 'failure'),
    {t0:DateTime64(3)} + toIntervalMillisecond(toInt64(k * 5 * {ms_per_call:Float64})),
    {t0:DateTime64(3)} + toIntervalMillisecond(toInt64((k * 5 + 4) * {ms_per_call:Float64}) + 45000),
    2000, 120000, 'ok', ''
FROM (SELECT intDiv({first:UInt64}, 5) + number AS k FROM numbers(intDiv({n:UInt64}, 5)))
WHERE sipHash64(k, 9) % 100 < 97
