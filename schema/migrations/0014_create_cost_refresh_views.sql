-- The periodic cost jobs as ClickHouse refreshable materialized views: a ClickHouse server (or the
-- embedded engine inside `infercost up`) runs them every minute without our process. One chain,
-- each step DEPENDS ON the previous one:
--   cost_copy_call_costs_mv -> cost_copy_replica_minutes_mv -> cost_copy_tasks_mv   (APPEND)
--     copy the minutes [watermark, cutoff) of the *_live tables into *_history, where
--     cutoff = the live window's end - (job_window_s - 600): minutes older than the window less
--     10 minutes, i.e. still inside the live window they are copied from;
--   -> cost_watermark_mv   (APPEND) watermark := greatest(watermark, cutoff)
--   -> cost_clock_mv       (replace) the next window: we = this minute, ws = we - job_window_s,
--                          reaching back to the watermark (at most 1 day) after downtime;
--   -> cost_resolved_calls_mv -> cost_call_costs_mv -> cost_replica_minutes_mv -> cost_tasks_mv
--     (replace resolved_calls_live and *_live) the job views of 0013 over [ws, we) from
--     job_clock: the same SQL the explicit runner uses.
-- Readers see history below the watermark and live from it on (views below): every minute is
-- read from exactly one table; a minute's late spans are absorbed until it is copied. A copy
-- skips minutes history already holds, so an extra run (SYSTEM REFRESH VIEW while the schedule
-- fires) never duplicates rows.

CREATE TABLE IF NOT EXISTS cost_watermark (
    watermark DateTime('UTC') COMMENT 'minutes before this are read from *_history, from it on from *_live',
    updated_at DateTime('UTC') DEFAULT now()
) ENGINE = MergeTree()
ORDER BY watermark;

CREATE TABLE IF NOT EXISTS job_clock (
    ws DateTime('UTC') COMMENT 'first minute of the live window',
    we DateTime('UTC') COMMENT 'end of the live window (exclusive); "now" of the run',
    window_s UInt32 COMMENT 'job_window_s when computed, seconds'
) ENGINE = MergeTree()
ORDER BY ws;

CREATE OR REPLACE VIEW call_costs AS
SELECT * FROM call_costs_history WHERE minute < (SELECT max(watermark) FROM cost_watermark)
UNION ALL
SELECT * FROM call_costs_live WHERE minute >= (SELECT max(watermark) FROM cost_watermark);

CREATE OR REPLACE VIEW replica_minutes AS
SELECT * FROM replica_minutes_history WHERE minute < (SELECT max(watermark) FROM cost_watermark)
UNION ALL
SELECT * FROM replica_minutes_live WHERE minute >= (SELECT max(watermark) FROM cost_watermark);

CREATE OR REPLACE VIEW tasks AS
SELECT * FROM tasks_history WHERE minute < (SELECT max(watermark) FROM cost_watermark)
UNION ALL
SELECT * FROM tasks_live WHERE minute >= (SELECT max(watermark) FROM cost_watermark);

CREATE MATERIALIZED VIEW IF NOT EXISTS cost_copy_call_costs_mv
REFRESH EVERY 1 MINUTE APPEND TO call_costs_history EMPTY
AS SELECT * FROM call_costs_live
WHERE minute >= (SELECT max(watermark) FROM cost_watermark)
  AND minute < (SELECT max(we) - toIntervalSecond(max(window_s) - 600) FROM job_clock)
  AND minute NOT IN (SELECT DISTINCT minute FROM call_costs_history
                     WHERE minute >= (SELECT max(watermark) FROM cost_watermark));

CREATE MATERIALIZED VIEW IF NOT EXISTS cost_copy_replica_minutes_mv
REFRESH EVERY 1 MINUTE DEPENDS ON cost_copy_call_costs_mv APPEND TO replica_minutes_history EMPTY
AS SELECT * FROM replica_minutes_live
WHERE minute >= (SELECT max(watermark) FROM cost_watermark)
  AND minute < (SELECT max(we) - toIntervalSecond(max(window_s) - 600) FROM job_clock)
  AND minute NOT IN (SELECT DISTINCT minute FROM replica_minutes_history
                     WHERE minute >= (SELECT max(watermark) FROM cost_watermark));

CREATE MATERIALIZED VIEW IF NOT EXISTS cost_copy_tasks_mv
REFRESH EVERY 1 MINUTE DEPENDS ON cost_copy_replica_minutes_mv APPEND TO tasks_history EMPTY
AS SELECT * FROM tasks_live
WHERE minute >= (SELECT max(watermark) FROM cost_watermark)
  AND minute < (SELECT max(we) - toIntervalSecond(max(window_s) - 600) FROM job_clock)
  AND minute NOT IN (SELECT DISTINCT minute FROM tasks_history
                     WHERE minute >= (SELECT max(watermark) FROM cost_watermark));

CREATE MATERIALIZED VIEW IF NOT EXISTS cost_watermark_mv
REFRESH EVERY 1 MINUTE DEPENDS ON cost_copy_tasks_mv APPEND TO cost_watermark EMPTY
AS SELECT
    greatest((SELECT max(watermark) FROM cost_watermark),
             (SELECT max(we) - toIntervalSecond(max(window_s) - 600) FROM job_clock)) AS watermark,
    toDateTime(now(), 'UTC') AS updated_at
WHERE (SELECT count() FROM job_clock) > 0;

CREATE MATERIALIZED VIEW IF NOT EXISTS cost_clock_mv
REFRESH EVERY 1 MINUTE DEPENDS ON cost_watermark_mv TO job_clock EMPTY
AS SELECT
    greatest(we - INTERVAL 1 DAY, least(we - toIntervalSecond(window_s), (SELECT max(watermark) FROM cost_watermark))) AS ws,
    toDateTime(toStartOfMinute(now()), 'UTC') AS we,
    (SELECT argMax(job_window_s, synced_at) FROM cost_settings) AS window_s;

CREATE MATERIALIZED VIEW IF NOT EXISTS cost_resolved_calls_mv
REFRESH EVERY 1 MINUTE DEPENDS ON cost_clock_mv TO resolved_calls_live EMPTY
AS SELECT * FROM job_resolved_calls(ws = (SELECT max(ws) FROM job_clock), we = (SELECT max(we) FROM job_clock));

CREATE MATERIALIZED VIEW IF NOT EXISTS cost_call_costs_mv
REFRESH EVERY 1 MINUTE DEPENDS ON cost_resolved_calls_mv TO call_costs_live EMPTY
AS SELECT * FROM job_call_costs(ws = (SELECT max(ws) FROM job_clock), we = (SELECT max(we) FROM job_clock), run_id = 0);

CREATE MATERIALIZED VIEW IF NOT EXISTS cost_replica_minutes_mv
REFRESH EVERY 1 MINUTE DEPENDS ON cost_call_costs_mv TO replica_minutes_live EMPTY
AS SELECT * FROM job_replica_minutes(ws = (SELECT max(ws) FROM job_clock), we = (SELECT max(we) FROM job_clock));

CREATE MATERIALIZED VIEW IF NOT EXISTS cost_tasks_mv
REFRESH EVERY 1 MINUTE DEPENDS ON cost_replica_minutes_mv TO tasks_live EMPTY
AS SELECT * FROM job_tasks(ws = (SELECT max(ws) FROM job_clock), we = (SELECT max(we) FROM job_clock));
