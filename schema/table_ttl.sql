-- The CREATE statement of one of our tables (its TTL clause names the retention the migrations set).
SELECT create_table_query FROM system.tables WHERE database = currentDatabase() AND name = {table:String}
