-- Task outcomes per look-back window (seconds, from windows_s), from task root spans
-- ("task {task.type}", docs/telemetry.md) that ENDED in (now - window, now]:
--  tasks; failed = outcome failure or abandoned (task-success SLO);
--  not_good = not (success and within slo.e2e_ms when the task has one) (goodput SLO; DESIGN.md:
--  goodput = successful tasks that also met their latency SLO).
SELECT
    w AS window_s,
    countIf(end_time > {now:DateTime64(3, 'UTC')} - toIntervalSecond(w)) AS tasks,
    countIf(end_time > {now:DateTime64(3, 'UTC')} - toIntervalSecond(w) AND outcome != 'success') AS failed,
    countIf(end_time > {now:DateTime64(3, 'UTC')} - toIntervalSecond(w)
            AND NOT (outcome = 'success' AND (slo_e2e_ms IS NULL OR duration_ms <= slo_e2e_ms))) AS not_good
FROM (
    SELECT
        fromUnixTimestamp64Nano(toUnixTimestamp64Nano(Timestamp) + toInt64(Duration), 'UTC') AS end_time,
        SpanAttributes['task.outcome'] AS outcome,
        Duration / 1e6 AS duration_ms,
        toFloat64OrNull(SpanAttributes['slo.e2e_ms']) AS slo_e2e_ms
    FROM otel_traces
    WHERE startsWith(SpanName, 'task ')
      AND mapContains(SpanAttributes, 'task.outcome')
      AND Timestamp >= {now:DateTime64(3, 'UTC')} - toIntervalSecond({max_window_s:UInt32} + {lookback_s:UInt32})
      AND Timestamp <= {now:DateTime64(3, 'UTC')}
)
ARRAY JOIN {windows_s:Array(UInt32)} AS w
WHERE end_time <= {now:DateTime64(3, 'UTC')}
GROUP BY w
ORDER BY w
