-- The job views' table UUIDs, read by the explicit runner each run: a view's definition changes only
-- with a new UUID (CREATE OR REPLACE, DROP + CREATE; a View takes no MODIFY QUERY), so the runner keeps
-- the statements it wrote out from job_views.sql while these are the same (schema/jobs/inline.py).
SELECT name, toString(uuid) FROM system.tables
WHERE database = currentDatabase() AND engine = 'View' AND name IN {names:Array(String)}
