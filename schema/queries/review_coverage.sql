-- Weekly review: how much of [start, end) has data — the hours in which some replica was up (the
-- cost job's replica_minutes: a successful scrape or spans in that minute) and the first and last
-- such minute (UTC). 0 hours and NULL times when the period holds none.
SELECT
    uniqExact(toStartOfHour(minute)) AS hours_with_data,
    uniqExact(minute) AS minutes_with_data,
    minOrNull(minute) AS first_minute,
    maxOrNull(minute) AS last_minute
FROM replica_minutes
WHERE minute >= {start:DateTime} AND minute < {end:DateTime}
