-- Planner scratch store: the tables a replay writes into (every MergeTree-family table of the
-- scratch database but the migration log), emptied before each candidate.
SELECT name
FROM system.tables
WHERE database = {database:String}
  AND engine LIKE '%MergeTree%'
  AND name != 'schema_migrations'
ORDER BY name
