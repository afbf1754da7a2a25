-- Weekly review, lever "move": the gateway's routing in [start, end): per routing policy
-- (gateway.policy on gateway attempts), the attempts, the replicas used, and the attempts that
-- failed through the replica's fault (error_class upstream_error or timeout; not client errors or
-- aborts); plus admission decisions (gateway.admission on the gateway's request spans) counted
-- over otel_traces, where that span lives (it is not an LLM call).
SELECT kind, name, n, replicas, failed
FROM (
    SELECT
        'policy' AS kind,
        policy AS name,
        count() AS n,
        uniqExact(replica) AS replicas,
        countIf(error_class IN ('upstream_error', 'timeout')) AS failed
    FROM llm_calls
    WHERE call_source = 'gateway'
      AND start_time >= {start:DateTime64(3)} AND start_time < {end:DateTime64(3)}
    GROUP BY policy
    UNION ALL
    SELECT
        'admission' AS kind,
        SpanAttributes['gateway.admission'] AS name,
        count() AS n,
        0 AS replicas,
        0 AS failed
    FROM otel_traces
    WHERE mapContains(SpanAttributes, 'gateway.admission')
      AND Timestamp >= {start:DateTime64(3)} AND Timestamp < {end:DateTime64(3)}
    GROUP BY name
)
ORDER BY kind, name
