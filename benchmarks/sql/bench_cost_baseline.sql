-- Baseline of the cost benchmark: one plain aggregate scan of the window's call rows (what any
-- cost figure must at least read), to compare the job's run time against.
SELECT count(), sum(ifNull(prompt_tokens, 0) + ifNull(output_tokens, 0)), uniqExact(task_id)
FROM llm_calls
WHERE start_time >= {ws:DateTime} AND start_time < {we:DateTime}
