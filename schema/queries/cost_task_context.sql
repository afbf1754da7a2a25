-- Where the tasks that ended in [start, end) got their context: explicit (the task SDK's task.id on the
-- spans) or derived from the spans teams already emit (a trace's root span: OpenTelemetry GenAI agent
-- span, OpenInference, Traceloop, the call itself, another root; or calls whose root never arrived),
-- with their tasks and calls. Calls with no task at all are the waste breakdown's `unattributed`.
SELECT
    context_source,
    if(context_source = 'sdk', 'explicit', 'derived') AS context_kind,
    count() AS tasks,
    sum(calls) AS calls
FROM tasks
WHERE minute >= {start:DateTime} AND minute < {end:DateTime}
GROUP BY context_source
ORDER BY calls DESC, context_source
