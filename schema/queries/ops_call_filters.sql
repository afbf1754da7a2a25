-- Fragment, not a query: the model / tenant / task-type filters of the live page's reads of
-- llm_calls, as conditions of their WHERE clause ("-- include: ops_call_filters" after the first
-- condition). The including query names p_from, the start of its window of end times. Engine rows
-- (vLLM llm_request) carry no task context, so the tenant / task-type filters reach them through
-- their parent span: the gateway or client attempt that sent them, started at most an hour before.
  AND ({model:String} = '' OR model = {model:String})
  AND (({tenant:String} = '' AND {task_type:String} = '')
       OR (call_source = 'engine' AND parent_span_id IN (
               SELECT span_id
               FROM llm_calls
               WHERE call_source IN ('gateway', 'client')
                 AND start_time >= p_from - INTERVAL 1 HOUR AND start_time < {end:DateTime64(3)}
                 AND ({tenant:String} = '' OR tenant_id = {tenant:String})
                 AND ({task_type:String} = '' OR task_type = {task_type:String})))
       OR (call_source != 'engine'
           AND ({tenant:String} = '' OR tenant_id = {tenant:String})
           AND ({task_type:String} = '' OR task_type = {task_type:String})))
