"""Screening a long period on its busiest day: candidates are compared on the 24 hours with the most
task arrivals, and only the finalists are replayed over the whole period.

Position: planner. A week of the demo's size replays at ~100 tasks per second per core, so twenty
full-week candidates cannot fit the planner's ten minutes. The busiest day decides which fleets meet
the SLOs (a fleet that keeps up with the peak keeps up with the quieter days) and ranks fleets by
cost the way the week does (the same diurnal curve, each fleet's idle hours included); the whole
period then confirms the finalists' figures, and the recommendation and its saving come from that
confirmation alone. Periods up to ``1.5 x`` the window are not screened.
"""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import timedelta

from planner.workload import HOUR, Workload, hourly_counts

SCREEN_HOURS = 24.0
SCREEN_FROM = 1.5  # periods longer than this multiple of the window are screened


def busiest_window(hourly: tuple[int, ...], hours: int) -> int:
    """The first hour of the ``hours`` consecutive hours with the most task arrivals (earliest on a tie)."""
    if hours >= len(hourly):
        return 0
    best, total = 0, sum(hourly[:hours])
    top = total
    for h in range(1, len(hourly) - hours + 1):
        total += hourly[h + hours - 1] - hourly[h - 1]
        if total > top:
            best, top = h, total
    return best


def window(workload: Workload, from_s: float, to_s: float) -> Workload:
    """The tasks of ``workload`` that arrived in ``[from_s, to_s)`` seconds from its start, as a workload
    of that window (arrivals shifted to its start; every inferred setting kept)."""
    plans = tuple(replace(p, arrival_s=p.arrival_s - from_s) for p in workload.plans if from_s <= p.arrival_s < to_s)
    return replace(workload, start=workload.start + timedelta(seconds=from_s),
                   end=workload.start + timedelta(seconds=to_s), plans=plans,
                   hourly=hourly_counts(plans, to_s - from_s))


def _window_hours(workload: Workload, screen_hours: float) -> int | None:
    """Whole hours of the screening window; None when ``workload`` is not screened (too short, or 0 hours)."""
    if screen_hours <= 0 or workload.seconds <= SCREEN_FROM * screen_hours * HOUR:
        return None
    return max(1, int(round(screen_hours)))


def screening_window(workload: Workload, screen_hours: float) -> Workload | None:
    """The busiest ``screen_hours`` of ``workload`` (None: the period is too short to screen, or 0 hours)."""
    hours = _window_hours(workload, screen_hours)
    if hours is None:
        return None
    first = busiest_window(workload.hourly, hours)
    return window(workload, first * HOUR, min(workload.seconds, (first + hours) * HOUR))


def incident_window(workload: Workload, faults: list, screen_hours: float) -> Workload | None:
    """The busiest ``screen_hours`` of ``workload`` that hold every fault (seconds from its start), for
    replaying candidates under the measured incidents; None when there are no faults, the period is
    not screened, or the faults span more than the window."""
    hours = _window_hours(workload, screen_hours)
    if not faults or hours is None:
        return None
    first = min(f.at_s for f in faults)
    last = max(f.until_s if f.until_s is not None else f.at_s for f in faults)
    lo = max(0, math.ceil((last - hours * HOUR) / HOUR))
    hi = min(int(first // HOUR), len(workload.hourly) - hours)
    if lo > hi:
        return None
    h = lo + busiest_window(workload.hourly[lo:hi + hours], hours)
    return window(workload, h * HOUR, min(workload.seconds, (h + hours) * HOUR))


def faults_within(faults: list, screen: Workload, full: Workload) -> list | None:
    """``faults`` (seconds from ``full``'s start) moved onto ``screen``'s clock; None when one of them lies
    partly outside the window (the window does not hold every incident)."""
    offset = (screen.start - full.start).total_seconds()
    out = []
    for f in faults:
        until = f.until_s if f.until_s is not None else f.at_s
        if f.at_s < offset or until > offset + screen.seconds:
            return None
        out.append(replace(f, at_s=f.at_s - offset, until_s=None if f.until_s is None else f.until_s - offset))
    return out


def backtest_replays(seeds: int, seconds: float) -> int:
    """Replays the backtest takes the median of: ``seeds`` for a day or less, fewer for longer periods
    (a week's one replay holds seven days of tasks, more than five replays of one day)."""
    days = max(1.0, seconds / 86400.0)
    return max(1, min(seeds, math.ceil(seeds / days)))
