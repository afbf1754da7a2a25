-- The hours of ops_engine_hours that inserts wrote rows for since {since} (ops_series_marks, migration 1006).
SELECT DISTINCT hour FROM ops_series_marks WHERE marked_at >= {since:DateTime64(6)}
