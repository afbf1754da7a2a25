-- The newest alert state change one evaluator wrote (NULL when none): a replay at an earlier time
-- would write a second history next to it.
SELECT maxOrNull(event_time) AS last_event
FROM alerts
WHERE evaluator = {evaluator:String}
