-- The periodic chain's refreshable views with their comments (the mark of the written-out query each
-- holds), read by schema.jobs.periodic.write_out after every migrate.
SELECT name, comment FROM system.tables
WHERE database = currentDatabase() AND engine = 'MaterializedView' AND startsWith(name, 'cost_') AND endsWith(name, '_mv')
ORDER BY name
