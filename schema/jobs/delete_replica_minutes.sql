-- Before an explicit run of [ws, we): drop the history rows it replaces (skipped when there are none).
-- As a lightweight update (a patch part, migration 1003), not an ALTER UPDATE mutation that waits
-- on every part of the table; falls back to the mutation where the table cannot take patches.
DELETE FROM replica_minutes_history WHERE minute >= {ws:DateTime} AND minute < {we:DateTime}
SETTINGS lightweight_delete_mode = 'lightweight_update';
