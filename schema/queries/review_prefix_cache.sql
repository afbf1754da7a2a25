-- Weekly review, lever "avoid": prefix-cache hits and queries (tokens) per replica in [start, end),
-- from vLLM's counters vllm:prefix_cache_hits / vllm:prefix_cache_queries (Prometheus names
-- without _total, as stored; the _total spelling is accepted too). Counters are cumulative: the
-- increase of one series is the sum of its steps, where a restart (a drop in value, or a new series
-- start time StartTimeUnix: a restarted engine whose counter climbed past the old value before the
-- next scrape) counts the new value whole (the increase since the restart), plus its first value
-- when the series started inside the period (its first point's StartTimeUnix >= start). Hit rate =
-- hits / queries.
SELECT
    replica,
    sumIf(increase, metric = 'hits') AS hit_tokens,
    sumIf(increase, metric = 'queries') AS query_tokens
FROM (
    SELECT
        replica,
        metric,
        arraySum(arrayMap((v, p, s, ps) -> if(v >= p AND (s = ps OR s = 0 OR ps = 0), v - p, v),
                          vals, arrayPushFront(arrayPopBack(vals), vals[1]),
                          starts, arrayPushFront(arrayPopBack(starts), starts[1])))
            + if(starts[1] >= toUnixTimestamp64Nano(toDateTime64({start:DateTime64(3)}, 9)), vals[1], 0) AS increase
    FROM (
        SELECT
            if(ResourceAttributes['service.instance.id'] != '', ResourceAttributes['service.instance.id'], ServiceName) AS replica,
            if(MetricName IN ('vllm:prefix_cache_hits', 'vllm:prefix_cache_hits_total'), 'hits', 'queries') AS metric,
            Attributes,
            arraySort(x -> x.1, groupArray((TimeUnix, Value, toUnixTimestamp64Nano(StartTimeUnix)))) AS points,
            arrayMap(x -> x.2, points) AS vals,
            arrayMap(x -> x.3, points) AS starts
        FROM otel_metrics_sum
        WHERE MetricName IN ('vllm:prefix_cache_hits', 'vllm:prefix_cache_hits_total',
                             'vllm:prefix_cache_queries', 'vllm:prefix_cache_queries_total')
          AND TimeUnix >= {start:DateTime64(3)} AND TimeUnix < {end:DateTime64(3)}
        GROUP BY replica, metric, Attributes
    )
)
GROUP BY replica
ORDER BY replica
