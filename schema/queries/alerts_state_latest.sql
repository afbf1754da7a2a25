-- The newest saved lifecycle state of one evaluator (alerts_state, migration 1007): the time it
-- evaluated up to and its JSON state; no row when it never saved.
SELECT
    argMax(evaluated_at, saved_at) AS evaluated_at,
    argMax(state, saved_at) AS state
FROM alerts_state
WHERE evaluator = {evaluator:String}
HAVING count() > 0
