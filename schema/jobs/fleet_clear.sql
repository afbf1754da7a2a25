-- fleet.yaml is the whole truth: sync empties these before writing the file's rows
-- (cost_settings is appended to; the jobs read its newest row).
TRUNCATE TABLE IF EXISTS gpu_prices;
TRUNCATE TABLE IF EXISTS replicas;
TRUNCATE TABLE IF EXISTS task_slos;
