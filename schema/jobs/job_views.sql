-- The job views' stored queries, read by the explicit runner once per run (schema/jobs/inline.py:
-- it runs them in place of the views, the same rows planned in about half the time).
SELECT name, as_select FROM system.tables
WHERE database = currentDatabase() AND engine = 'View' AND name IN {names:Array(String)}
