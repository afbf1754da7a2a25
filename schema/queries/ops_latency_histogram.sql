-- Live operations, a vLLM latency histogram over time (heatmaps and distributions of the vLLM
-- Grafana board): for {metric} (e.g. vllm:time_to_first_token_seconds), the requests observed in
-- each {bucket_s}-second bucket (0 = one bucket for the whole range, labelled {start}) per histogram
-- bucket, summed over replicas (or only {replica}). Per series, the count is the last cumulative
-- BucketCounts of the bucket minus the first (element-wise; a smaller value is a reset and counts
-- from zero). le = the bucket's upper bound in seconds (inf for the last).
WITH series AS (
    SELECT
        if({bucket_s:UInt32} = 0, toDateTime64({start:DateTime64(3)}, 9),
           toStartOfInterval(TimeUnix, toIntervalSecond(greatest({bucket_s:UInt32}, 1)))) AS bucket,
        argMin(BucketCounts, TimeUnix) AS first_counts,
        argMax(BucketCounts, TimeUnix) AS last_counts,
        any(ExplicitBounds) AS bounds
    FROM otel_metrics_histogram
    WHERE MetricName = {metric:String}
      AND TimeUnix >= {start:DateTime64(3)} AND TimeUnix < {end:DateTime64(3)}
      AND ({replica:String} = '' OR ResourceAttributes['service.instance.id'] = {replica:String})
      AND ({model:String} = '' OR Attributes['model_name'] = {model:String})
    GROUP BY bucket, ResourceAttributes['service.instance.id'], toString(Attributes)
),
per_bucket AS (
    SELECT bucket, any(bounds) AS b,
           sumForEach(if(length(first_counts) = length(last_counts),
                         arrayMap((a, z) -> toUInt64(if(z >= a, z - a, z)), first_counts, last_counts),
                         last_counts)) AS counts
    FROM series
    GROUP BY bucket
)
SELECT bucket, if(i <= length(b), b[i], inf) AS le, counts[i] AS requests
FROM per_bucket
ARRAY JOIN arrayEnumerate(counts) AS i
ORDER BY bucket, le
