-- Planner, the gateway's behaviour in [start, end) (docs/telemetry.md):
-- kind 'policy': name = gateway.policy of the upstream attempts, n = attempts;
-- kind 'admission': name = gateway.admission (admitted | rejected), n = gateway requests,
--   max_retries = the most hidden retries (gateway.retries) one request made: its retry budget seen.
WITH
    {start:DateTime} AS p_start,
    {end:DateTime} AS p_end
SELECT 'policy' AS kind, policy AS name, count() AS n, toUInt32(0) AS max_retries
FROM llm_calls
WHERE call_source = 'gateway' AND start_time >= p_start AND start_time < p_end
GROUP BY policy
UNION ALL
SELECT 'admission' AS kind, admission AS name, count() AS n, toUInt32(max(ifNull(retries, 0))) AS max_retries
FROM gateway_requests
WHERE start_time >= p_start AND start_time < p_end
GROUP BY admission
ORDER BY kind, n DESC
