-- Planner: the first minute of [start, end) in which a fleet replica was up (`replica_minutes`) and how
-- many such replica-minutes there are: where the store's telemetry of a requested period begins (a
-- week's plan of a store holding one day replays that day, not six days of idle replicas before it).
SELECT
    min(minute) AS first_minute,
    count() AS up_minutes
FROM replica_minutes
WHERE minute >= {start:DateTime} AND minute < {end:DateTime} AND in_fleet = 1 AND up = 1
