-- Planner: every configured GPU price (gpu_prices, synced from fleet.yaml), so a scratch store
-- prices replayed minutes exactly as the measured ones were priced. USD per GPU-hour; valid_from UTC.
SELECT gpu_type, valid_from, usd_per_gpu_hour
FROM gpu_prices
ORDER BY gpu_type, valid_from
