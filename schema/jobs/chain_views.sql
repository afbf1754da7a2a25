-- The periodic chain's refreshable views with their stored queries and comments, read by the generator
-- of schema/jobs/written/ (schema.jobs.writeout) from a store migrated without the written-out queries.
SELECT name, as_select, comment FROM system.tables
WHERE database = currentDatabase() AND engine = 'MaterializedView' AND startsWith(name, 'cost_') AND endsWith(name, '_mv')
ORDER BY name
