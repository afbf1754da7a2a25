-- The comments of the periodic chain's refreshable views (their write-out marks), read by
-- schema.jobs.periodic.write_out(quick=True) to tell whether the chain is written out already.
SELECT comment FROM system.tables
WHERE database = currentDatabase() AND engine = 'MaterializedView' AND startsWith(name, 'cost_') AND endsWith(name, '_mv')
