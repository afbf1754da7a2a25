-- Late data (0065) is marked against the minutes the NEXT copy step moves to history, not only the
-- minutes already there. The chain's copy step (0014) copies [watermark, cutoff) of *_live into
-- *_history, cutoff = the previous run's window end - (job_window_s - 600): the *_live rows the previous
-- run computed. A span or metric point that arrives after that run's compute for a minute below the
-- next cutoff reached neither table: it is newer than the watermark (0065 did not mark it), and the copy
-- moved the minute without it (a collector replaying its spool, a client retrying an export for 20 min,
-- or the first minutes of a store: a run fired between the fleet sync and the first spans). Rows now
-- count as late below greatest(watermark, cutoff of the next copy + 1 minute): job_clock holds the
-- previous run's end (max(we)); the extra minute covers an insert that read job_clock just before a
-- run replaced it. Marking a minute the copy then takes fresh only costs one extra recompute of it;
-- schema.jobs.recompute_late re-runs pending minutes once they are below the watermark.
ALTER TABLE late_minutes_spans_mv MODIFY QUERY
SELECT
    toStartOfMinute(Timestamp) AS minute,
    if(ResourceAttributes['service.instance.id'] != '', ResourceAttributes['service.instance.id'],
       SpanAttributes['gateway.replica']) AS replica,
    'spans' AS source,
    toUInt64(count()) AS rows,
    now64(3, 'UTC') AS updated_at,
    CAST(NULL, 'Nullable(DateTime(\'UTC\'))') AS recomputed_at
FROM otel_traces
WHERE Timestamp < greatest((SELECT max(watermark) FROM cost_watermark),
                           (SELECT max(we) + toIntervalSecond(660 - max(window_s)) FROM job_clock))
GROUP BY minute, replica;

ALTER TABLE late_minutes_gauge_mv MODIFY QUERY
SELECT
    toStartOfMinute(TimeUnix) AS minute, ResourceAttributes['service.instance.id'] AS replica, 'metrics' AS source,
    toUInt64(count()) AS rows, now64(3, 'UTC') AS updated_at, CAST(NULL, 'Nullable(DateTime(\'UTC\'))') AS recomputed_at
FROM otel_metrics_gauge
WHERE TimeUnix < greatest((SELECT max(watermark) FROM cost_watermark),
                          (SELECT max(we) + toIntervalSecond(660 - max(window_s)) FROM job_clock))
GROUP BY minute, replica;

ALTER TABLE late_minutes_sum_mv MODIFY QUERY
SELECT
    toStartOfMinute(TimeUnix) AS minute, ResourceAttributes['service.instance.id'] AS replica, 'metrics' AS source,
    toUInt64(count()) AS rows, now64(3, 'UTC') AS updated_at, CAST(NULL, 'Nullable(DateTime(\'UTC\'))') AS recomputed_at
FROM otel_metrics_sum
WHERE TimeUnix < greatest((SELECT max(watermark) FROM cost_watermark),
                          (SELECT max(we) + toIntervalSecond(660 - max(window_s)) FROM job_clock))
GROUP BY minute, replica;

ALTER TABLE late_minutes_histogram_mv MODIFY QUERY
SELECT
    toStartOfMinute(TimeUnix) AS minute, ResourceAttributes['service.instance.id'] AS replica, 'metrics' AS source,
    toUInt64(count()) AS rows, now64(3, 'UTC') AS updated_at, CAST(NULL, 'Nullable(DateTime(\'UTC\'))') AS recomputed_at
FROM otel_metrics_histogram
WHERE TimeUnix < greatest((SELECT max(watermark) FROM cost_watermark),
                          (SELECT max(we) + toIntervalSecond(660 - max(window_s)) FROM job_clock))
GROUP BY minute, replica;
