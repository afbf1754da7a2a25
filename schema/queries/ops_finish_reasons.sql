-- Live operations, finish reasons of engine requests that ended in [start, end): vLLM's
-- gen_ai.response.finish_reasons (stop, length, abort, ...), '' shown as 'unknown'.
WITH ctx AS (
    SELECT span_id
    FROM llm_calls
    WHERE call_source IN ('gateway', 'client')
      AND start_time >= {start:DateTime64(3)} - INTERVAL 1 HOUR AND start_time < {end:DateTime64(3)}
      AND ({tenant:String} = '' OR tenant_id = {tenant:String})
      AND ({task_type:String} = '' OR task_type = {task_type:String})
)
SELECT
    if(finish_reason = '', 'unknown', finish_reason) AS finish_reason,
    count() AS requests
FROM llm_calls
WHERE call_source = 'engine'
  AND start_time >= {start:DateTime64(3)} - INTERVAL 1 HOUR AND start_time < {end:DateTime64(3)}
  AND end_time >= {start:DateTime64(3)} AND end_time < {end:DateTime64(3)}
  AND ({model:String} = '' OR model = {model:String})
  AND (({tenant:String} = '' AND {task_type:String} = '') OR parent_span_id IN (SELECT span_id FROM ctx))
GROUP BY finish_reason
ORDER BY requests DESC, finish_reason
