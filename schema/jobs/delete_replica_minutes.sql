-- Before an explicit run of [ws, we): drop the history rows it replaces (skipped when there are none).
DELETE FROM replica_minutes_history WHERE minute >= {ws:DateTime} AND minute < {we:DateTime};
