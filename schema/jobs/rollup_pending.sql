-- The first hour in [oldest, the watermark's hour) without a complete rollup (migration 1003): hours
-- the periodic chain copied into *_history (it does not roll up), or an explicit run that failed.
-- 1970-01-01 when every hour is rolled up.
WITH toStartOfHour((SELECT max(watermark) FROM cost_watermark)) AS h1,
     greatest(toStartOfHour({oldest:DateTime}),
              (SELECT toStartOfHour(min(minute)) FROM replica_minutes_history)) AS h0
SELECT min(h)
FROM (SELECT arrayJoin(arrayMap(i -> h0 + toIntervalHour(i), range(toUInt64(ifNull(greatest(0, dateDiff('hour', h0, h1)), 0))))) AS h)
WHERE h NOT IN (SELECT hour FROM cost_rollup_hours WHERE hour >= h0 AND hour < h1
                GROUP BY hour HAVING argMax(complete, version) = 1)
