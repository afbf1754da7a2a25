-- Live operations, vLLM engine counters per replica and bucket (the vLLM Grafana board's token,
-- preemption and prefix-cache panels): the increase of vllm:prompt_tokens, vllm:generation_tokens,
-- vllm:num_preemptions, vllm:prefix_cache_queries and vllm:prefix_cache_hits within each
-- {bucket_s}-second bucket, per replica (resource service.instance.id). Increase = the sum of the
-- steps between consecutive scrapes of one series inside the bucket, a counter reset (a drop in
-- value, or a new series start time StartTimeUnix: a restart whose counter climbed past the old value
-- before the next scrape) counting the new value from zero; the step from the previous bucket's last
-- scrape is not counted (at most one scrape interval per bucket is missed).
WITH series AS (
    SELECT
        toStartOfInterval(TimeUnix, toIntervalSecond({bucket_s:UInt32})) AS bucket,
        ResourceAttributes['service.instance.id'] AS replica,
        MetricName AS metric,
        arraySort(p -> p.1, groupArray((TimeUnix, Value, toUnixTimestamp64Nano(StartTimeUnix)))) AS points,
        arrayMap(p -> p.2, points) AS v,
        arrayMap(p -> p.3, points) AS st
    FROM otel_metrics_sum
    WHERE MetricName IN ('vllm:prompt_tokens', 'vllm:generation_tokens', 'vllm:num_preemptions',
                         'vllm:prefix_cache_queries', 'vllm:prefix_cache_hits')
      AND TimeUnix >= {start:DateTime64(3)} AND TimeUnix < {end:DateTime64(3)}
      AND ({model:String} = '' OR Attributes['model_name'] = {model:String})
    GROUP BY bucket, replica, metric, toString(Attributes)
)
SELECT
    bucket,
    replica,
    sumIf(increase, metric = 'vllm:prompt_tokens') AS prompt_tokens,
    sumIf(increase, metric = 'vllm:generation_tokens') AS generation_tokens,
    sumIf(increase, metric = 'vllm:num_preemptions') AS preemptions,
    sumIf(increase, metric = 'vllm:prefix_cache_queries') AS prefix_cache_queries,
    sumIf(increase, metric = 'vllm:prefix_cache_hits') AS prefix_cache_hits
FROM (
    SELECT bucket, replica, metric,
           arraySum(arrayMap((d, x, s, ps) -> if(d >= 0 AND (s = ps OR s = 0 OR ps = 0), d, x),
                             arrayDifference(v), v, st, arrayPushFront(arrayPopBack(st), st[1]))) AS increase
    FROM series
)
GROUP BY bucket, replica
ORDER BY bucket, replica
