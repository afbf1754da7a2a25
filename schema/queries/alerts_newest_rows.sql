-- Newest telemetry at or before now, for the ingestion-lag rule: the latest span end and the latest
-- gauge point (NULL when none in the look-back).
SELECT
    (SELECT maxOrNull(fromUnixTimestamp64Nano(toUnixTimestamp64Nano(Timestamp) + toInt64(Duration), 'UTC'))
     FROM otel_traces
     WHERE Timestamp > {now:DateTime64(3, 'UTC')} - toIntervalSecond({lookback_s:UInt32})
       AND Timestamp <= {now:DateTime64(3, 'UTC')}
       AND fromUnixTimestamp64Nano(toUnixTimestamp64Nano(Timestamp) + toInt64(Duration), 'UTC') <= {now:DateTime64(3, 'UTC')}) AS newest_span,
    (SELECT maxOrNull(TimeUnix)
     FROM otel_metrics_gauge
     WHERE TimeUnix > {now:DateTime64(3, 'UTC')} - toIntervalSecond({lookback_s:UInt32})
       AND TimeUnix <= {now:DateTime64(3, 'UTC')}) AS newest_metric
