-- Weekly review, driver "price": the GPU-hours behind each group's allocated cost in [start, end).
-- A piece of a call holds cost_usd of its replica-minute's spend; the GPU-hours it used are
-- cost_usd / usd_per_gpu_hour of that replica-minute (spend_usd = usd_per_gpu_hour x gpu_count / 60,
-- so the GPU-hours of a whole minute are gpu_count / 60). The group's mean price paid is then
-- allocated_usd / gpu_hours (USD per GPU-hour). by: '' (fleet) | task_type | tenant | model.
-- Pieces on unpriced minutes (price 0) or without a replica (client-only evidence) carry no GPU-hours.
SELECT
    multiIf({by:String} = 'task_type', c.task_type, {by:String} = 'tenant', c.tenant_id,
            {by:String} = 'model', c.model, '') AS grp,
    sum(c.cost_usd) AS priced_allocated_usd,
    sumIf(c.cost_usd / r.price, r.price > 0) AS gpu_hours
FROM call_costs AS c
INNER JOIN (
    SELECT minute, replica, any(usd_per_gpu_hour) AS price
    FROM replica_minutes
    WHERE minute >= {start:DateTime} AND minute < {end:DateTime}
    GROUP BY minute, replica
) AS r ON r.minute = c.minute AND r.replica = c.replica
WHERE c.minute >= {start:DateTime} AND c.minute < {end:DateTime}
GROUP BY grp
ORDER BY grp
