-- Live operations, vLLM's latency histograms over time (the heatmaps and distributions of the vLLM
-- Grafana board), every family of {metrics} in one pass: per metric and {bucket_s}-second bucket,
-- the requests observed per histogram bucket, summed over replicas (or only {replica}). Per series,
-- the count is the last cumulative BucketCounts of the bucket minus the first (element-wise; a
-- smaller value is a reset and counts from zero). le = the bucket's upper bound in seconds (inf last).
WITH series AS (
    SELECT
        MetricName AS metric,
        toStartOfInterval(TimeUnix, toIntervalSecond({bucket_s:UInt32})) AS bucket,
        argMin(BucketCounts, TimeUnix) AS first_counts,
        argMax(BucketCounts, TimeUnix) AS last_counts,
        any(ExplicitBounds) AS bounds
    FROM otel_metrics_histogram
    WHERE MetricName IN {metrics:Array(String)}
      AND TimeUnix >= {start:DateTime64(3)} AND TimeUnix < {end:DateTime64(3)}
      AND ({replica:String} = '' OR ResourceAttributes['service.instance.id'] = {replica:String})
      AND ({model:String} = '' OR Attributes['model_name'] = {model:String})
    GROUP BY metric, bucket, ResourceAttributes['service.instance.id'], toString(Attributes)
),
per_bucket AS (
    SELECT metric, bucket, any(bounds) AS b,
           sumForEach(if(length(first_counts) = length(last_counts),
                         arrayMap((a, z) -> toUInt64(if(z >= a, z - a, z)), first_counts, last_counts),
                         last_counts)) AS counts
    FROM series
    GROUP BY metric, bucket
)
SELECT metric, bucket, if(i <= length(b), b[i], inf) AS le, counts[i] AS requests
FROM per_bucket
ARRAY JOIN arrayEnumerate(counts) AS i
WHERE requests > 0
ORDER BY metric, bucket, le
