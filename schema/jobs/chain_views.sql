-- The periodic chain's refreshable views (migrations 0014, 0064, 0240) with their stored queries and
-- comments, read by schema.jobs.periodic.write_out after the migrations.
SELECT name, as_select, comment FROM system.tables
WHERE database = currentDatabase() AND engine = 'MaterializedView' AND startsWith(name, 'cost_') AND endsWith(name, '_mv')
ORDER BY name
