-- Values offered by the dashboard's sidebar filters: distinct models, tenants and task types seen
-- in LLM calls that started in [start, end), each list capped at 200 values.
SELECT
    arraySort(groupUniqArrayIf(200)(toString(model), model != '')) AS models,
    arraySort(groupUniqArrayIf(200)(toString(tenant_id), tenant_id != '')) AS tenants,
    arraySort(groupUniqArrayIf(200)(toString(task_type), task_type != '')) AS task_types
FROM llm_calls
WHERE start_time >= {start:DateTime64(3)} AND start_time < {end:DateTime64(3)}
