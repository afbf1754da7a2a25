-- Planner scratch store: the tables a replay writes into (every MergeTree-family table of the
-- scratch database but the migration log), emptied before each candidate. A refreshable view's
-- refresh builds its result in a '.tmp.inner_id.<uuid>' table of the same database and swaps it in
-- (or drops it when cancelled): ClickHouse's own, short-lived, never a replay's: left out.
SELECT name
FROM system.tables
WHERE database = {database:String}
  AND engine LIKE '%MergeTree%'
  AND name != 'schema_migrations'
  AND NOT startsWith(name, '.')
ORDER BY name
