-- The periodic trailing window, seconds.
SELECT argMax(job_window_s, synced_at) FROM cost_settings
