-- Values offered by the dashboard's sidebar filters: distinct models, tenants and task types seen
-- in LLM calls that started in the hours overlapping [start, end), each list capped at 200 values.
-- Reads the hourly pre-aggregation ops_dims_hours (migration 1006), not the calls.
SELECT
    arraySort(groupUniqArrayIf(200)(toString(model), model != '')) AS models,
    arraySort(groupUniqArrayIf(200)(toString(tenant_id), tenant_id != '')) AS tenants,
    arraySort(groupUniqArrayIf(200)(toString(task_type), task_type != '')) AS task_types
FROM ops_dims_hours
WHERE hour >= toStartOfHour({start:DateTime64(3)}) AND hour < {end:DateTime64(3)}
