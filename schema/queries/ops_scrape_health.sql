-- Live operations, scrape health per target (replica) over [start, end): the scraper's `up` gauge
-- (1 = /metrics answered, 0 = it did not), its count of scrapes, the failed ones, and the last
-- scrape and last successful scrape times (UTC).
SELECT
    ResourceAttributes['service.instance.id'] AS replica,
    count() AS scrapes,
    countIf(Value < 1) AS failed,
    max(TimeUnix) AS last_scrape,
    maxIf(TimeUnix, Value >= 1) AS last_ok
FROM otel_metrics_gauge
WHERE MetricName = 'up' AND TimeUnix >= {start:DateTime64(3)} AND TimeUnix < {end:DateTime64(3)}
GROUP BY replica
ORDER BY replica
