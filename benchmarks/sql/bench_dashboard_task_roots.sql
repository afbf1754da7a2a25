-- Benchmark data: one task root span per task ({tasks} tasks over [t0, t0 + span_s)), 93 % success,
-- half of them with an e2e SLO of 30 s.
INSERT INTO otel_traces (Timestamp, TraceId, SpanId, ParentSpanId, SpanName, SpanKind, ServiceName, SpanAttributes,
                         Duration, StatusCode)
SELECT
    {t0:DateTime64(3)} + toIntervalMillisecond(toInt64(number * ({span_s:UInt64} * 1000 / {tasks:UInt64}))) AS ts,
    hex(sipHash64(number)), hex(sipHash64(number, 9)), '',
    concat('task ', ['chat', 'copilot', 'research_agent'][number % 3 + 1]), 'Internal', 'agent',
    map('task.id', toString(number), 'task.type', ['chat', 'copilot', 'research_agent'][number % 3 + 1],
        'tenant.id', concat('tenant', toString(number % 20)),
        'task.outcome', if(sipHash64(number, 10) % 100 < 93, 'success', 'failure'),
        'slo.e2e_ms', if(number % 2 = 0, '30000', '')),
    toUInt64((1 + sipHash64(number, 11) % 60) * 1e9), 'Ok'
FROM numbers({tasks:UInt64})
