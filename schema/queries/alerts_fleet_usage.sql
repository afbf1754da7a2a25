-- Fallback input of an incident's cost estimate when the cost engine's tables are absent: over
-- (start, end], the replicas seen (engine calls or gauges) and, from client/gateway attempts, how
-- many attempts there were and how many were retries (the retry share of the work).
SELECT
    (SELECT uniqExact(replica) FROM llm_calls
     WHERE call_source = 'engine' AND replica != ''
       AND end_time > {start:DateTime64(3, 'UTC')} AND start_time <= {end:DateTime64(3, 'UTC')}) AS engine_replicas,
    (SELECT uniqExact(if(ResourceAttributes['service.instance.id'] != '', ResourceAttributes['service.instance.id'], ServiceName))
     FROM otel_metrics_gauge
     WHERE MetricName = 'vllm:num_requests_running'
       AND TimeUnix > {start:DateTime64(3, 'UTC')} AND TimeUnix <= {end:DateTime64(3, 'UTC')}) AS gauge_replicas,
    (SELECT count() FROM llm_calls
     WHERE call_source = 'client'
       AND end_time > {start:DateTime64(3, 'UTC')} AND end_time <= {end:DateTime64(3, 'UTC')}) AS client_attempts,
    (SELECT countIf(ifNull(task_attempt, 1) > 1) FROM llm_calls
     WHERE call_source = 'client'
       AND end_time > {start:DateTime64(3, 'UTC')} AND end_time <= {end:DateTime64(3, 'UTC')}) AS client_retries,
    (SELECT count() FROM llm_calls
     WHERE call_source = 'gateway'
       AND end_time > {start:DateTime64(3, 'UTC')} AND end_time <= {end:DateTime64(3, 'UTC')}) AS gateway_attempts,
    (SELECT count() - uniqExact(parent_span_id) FROM llm_calls
     WHERE call_source = 'gateway'
       AND end_time > {start:DateTime64(3, 'UTC')} AND end_time <= {end:DateTime64(3, 'UTC')}) AS gateway_retries
