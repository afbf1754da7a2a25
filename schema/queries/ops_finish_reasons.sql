-- Live operations, finish reasons of the engine requests that ENDED in [start, end), one per call
-- (the n > 1 choices of one request are one call): vLLM 0.32's llm_request spans carry none, so a
-- call's reason is its engine row's, else its gateway attempt's, else its client attempt's (the
-- response they relayed), grouped as the cost job groups rows into calls (engine rows under their
-- parent attempt). 'unknown' = no row of the call saw one. Filters as ops_fleet_window.
WITH
    covered AS (
        SELECT trace_id, parent_span_id FROM gateway_requests
        WHERE start_time >= {start:DateTime64(3)} - INTERVAL 1 HOUR AND start_time < {end:DateTime64(3)}
    ),
    units AS (
        SELECT
            cityHash64(trace_id, if(call_source = 'engine' AND parent_span_id != '', parent_span_id, span_id)) AS unit,
            argMax(finish_reason, (finish_reason != '', multiIf(call_source = 'engine', 3, call_source = 'gateway', 2, 1)))
                AS reason,
            max(end_time) AS ended,
            countIf(call_source = 'engine') AS engines,
            anyIf(model, model != '' AND model_scraped = 0) AS span_model,
            anyIf(model, model_scraped = 1) AS scraped_model,
            anyIf(tenant_id, call_source != 'engine') AS tenant,
            anyIf(task_type, call_source != 'engine') AS kind
        FROM llm_calls
        WHERE start_time >= {start:DateTime64(3)} - INTERVAL 1 HOUR AND start_time < {end:DateTime64(3)}
          -- only the traces with a row that ended in the window (a unit's end is its last row's):
          -- the same units, without grouping the hour before the window
          AND trace_id IN (SELECT trace_id FROM llm_calls
                           WHERE start_time >= {start:DateTime64(3)} - INTERVAL 1 HOUR AND start_time < {end:DateTime64(3)}
                             AND end_time >= {start:DateTime64(3)} AND end_time < {end:DateTime64(3)})
          AND NOT (call_source = 'client' AND (trace_id, span_id) IN (SELECT trace_id, parent_span_id FROM covered))
        GROUP BY unit
    )
SELECT
    if(reason = '', 'unknown', reason) AS finish_reason,
    count() AS requests
FROM units
WHERE engines > 0 AND ended >= {start:DateTime64(3)} AND ended < {end:DateTime64(3)}
  AND ({model:String} = '' OR if(span_model != '', span_model, scraped_model) = {model:String})
  AND ({tenant:String} = '' OR tenant = {tenant:String})
  AND ({task_type:String} = '' OR kind = {task_type:String})
GROUP BY finish_reason
ORDER BY requests DESC, finish_reason
