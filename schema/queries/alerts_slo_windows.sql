-- Task outcomes per look-back window (seconds, from windows_s): sums of the per-minute rollup
-- alerts_task_minutes (migration 1007) over minutes of task end in [now - window, now). Exact when
-- now is on a minute boundary (virtual-time replays); live, the window starts up to one minute late.
--  tasks; failed = outcome failure or abandoned (task-success SLO);
--  not_good = not (success and within slo.e2e_ms) (goodput SLO: goodput = successful
--  tasks that also met their latency SLO).
SELECT
    w AS window_s,
    sumIf(tasks, minute >= {now:DateTime64(3, 'UTC')} - toIntervalSecond(w)) AS tasks,
    sumIf(failed, minute >= {now:DateTime64(3, 'UTC')} - toIntervalSecond(w)) AS failed,
    sumIf(not_good, minute >= {now:DateTime64(3, 'UTC')} - toIntervalSecond(w)) AS not_good
FROM alerts_task_minutes
ARRAY JOIN {windows_s:Array(UInt32)} AS w
WHERE minute >= {now:DateTime64(3, 'UTC')} - toIntervalSecond({max_window_s:UInt32})
  AND minute < {now:DateTime64(3, 'UTC')}
GROUP BY w
ORDER BY w
