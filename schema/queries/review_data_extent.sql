-- Weekly review: the first and last telemetry time in [start, end) (spans and gauge points), so
-- `infercost review` recomputes the cost jobs only where there is data. NULLs when there is none.
SELECT
    minOrNull(t) AS first_time,
    maxOrNull(t) AS last_time
FROM (
    SELECT min(Timestamp) AS t FROM otel_traces
    WHERE Timestamp >= {start:DateTime64(3)} AND Timestamp < {end:DateTime64(3)}
    HAVING count() > 0
    UNION ALL
    SELECT max(Timestamp + toIntervalNanosecond(Duration)) AS t FROM otel_traces
    WHERE Timestamp >= {start:DateTime64(3)} AND Timestamp < {end:DateTime64(3)}
    HAVING count() > 0
    UNION ALL
    SELECT min(TimeUnix) AS t FROM otel_metrics_gauge
    WHERE TimeUnix >= {start:DateTime64(3)} AND TimeUnix < {end:DateTime64(3)}
    HAVING count() > 0
    UNION ALL
    SELECT max(TimeUnix) AS t FROM otel_metrics_gauge
    WHERE TimeUnix >= {start:DateTime64(3)} AND TimeUnix < {end:DateTime64(3)}
    HAVING count() > 0
)
