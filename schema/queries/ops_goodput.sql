-- Live operations, goodput: task root spans ('task {task.type}', docs/telemetry.md) that ENDED in
-- 'current' = [start, end) or 'previous' = [prev_start, start): tasks ended, succeeded, and
-- succeeded within their end-to-end SLO (slo.e2e_ms on the root; a task without one counts as met).
-- Read from the spans, not from the cost job's tasks table, so the live tile is fresh to the second.
SELECT
    if(task_end >= {start:DateTime64(3)}, 'current', 'previous') AS window,
    count() AS tasks_ended,
    countIf(outcome = 'success') AS tasks_succeeded,
    countIf(outcome = 'success' AND (slo_e2e_ms IS NULL OR duration_s * 1000 <= slo_e2e_ms)) AS tasks_within_slo
FROM (
    SELECT
        fromUnixTimestamp64Nano(toUnixTimestamp64Nano(Timestamp) + toInt64(Duration), 'UTC') AS task_end,
        Duration / 1e9 AS duration_s,
        SpanAttributes['task.outcome'] AS outcome,
        toFloat64OrNull(SpanAttributes['slo.e2e_ms']) AS slo_e2e_ms
    FROM otel_traces
    WHERE startsWith(SpanName, 'task ')
      AND mapContains(SpanAttributes, 'task.outcome')
      AND Timestamp >= {prev_start:DateTime64(3)} - INTERVAL 6 HOUR AND Timestamp < {end:DateTime64(3)}
      AND ({tenant:String} = '' OR SpanAttributes['tenant.id'] = {tenant:String})
      AND ({task_type:String} = '' OR SpanAttributes['task.type'] = {task_type:String})
)
WHERE task_end >= {prev_start:DateTime64(3)} AND task_end < {end:DateTime64(3)}
GROUP BY window
