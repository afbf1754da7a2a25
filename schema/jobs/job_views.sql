-- The job views' stored queries, read by the generator of schema/jobs/written/ (schema.jobs.writeout):
-- it writes them out in place of the views (the same rows, planned in about half the time).
SELECT name, as_select FROM system.tables
WHERE database = currentDatabase() AND engine = 'View' AND name IN {names:Array(String)}
