-- Weekly review, lever "avoid": prefix-cache hits and queries (tokens) per replica in [start, end),
-- from vLLM's counters vllm:prefix_cache_hits / vllm:prefix_cache_queries (Prometheus names
-- without _total, as stored; the _total spelling is accepted too). Counters are cumulative: the
-- increase of one series is the sum of its positive steps, a drop being a restart (then the new
-- value is the increase since the restart), plus its first value when the series started inside
-- the period (StartTimeUnix >= start). Hit rate = hits / queries.
SELECT
    replica,
    sumIf(increase, metric = 'hits') AS hit_tokens,
    sumIf(increase, metric = 'queries') AS query_tokens
FROM (
    SELECT
        replica,
        metric,
        arraySum(arrayMap((v, p) -> if(v >= p, v - p, v), vals, arrayPushFront(arrayPopBack(vals), vals[1])))
            + if(first_start >= {start:DateTime64(3)}, vals[1], 0) AS increase
    FROM (
        SELECT
            if(ResourceAttributes['service.instance.id'] != '', ResourceAttributes['service.instance.id'], ServiceName) AS replica,
            if(MetricName IN ('vllm:prefix_cache_hits', 'vllm:prefix_cache_hits_total'), 'hits', 'queries') AS metric,
            Attributes,
            arrayMap(x -> x.2, arraySort(x -> x.1, groupArray((TimeUnix, Value)))) AS vals,
            min(StartTimeUnix) AS first_start
        FROM otel_metrics_sum
        WHERE MetricName IN ('vllm:prefix_cache_hits', 'vllm:prefix_cache_hits_total',
                             'vllm:prefix_cache_queries', 'vllm:prefix_cache_queries_total')
          AND TimeUnix >= {start:DateTime64(3)} AND TimeUnix < {end:DateTime64(3)}
        GROUP BY replica, metric, Attributes
    )
)
GROUP BY replica
ORDER BY replica
