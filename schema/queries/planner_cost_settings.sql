-- Planner: the cost model's settings in force (newest cost_settings row): allocation weights,
-- abandon timeout (seconds), the default for replicas missing from fleet.yaml, job windows (seconds).
SELECT w_prefill, w_decode, abandon_timeout_s, default_gpu_type, default_gpu_count, job_window_s, max_call_s,
       task_lookback_s
FROM cost_settings
ORDER BY synced_at DESC
LIMIT 1
