"""ISO-8601 weeks as UTC periods: ``2026-W48`` -> [Monday 00:00 UTC, next Monday 00:00 UTC).

The weekly review compares a week with the previous ISO week. ISO weeks start on Monday and week 1
is the week holding the year's first Thursday (ISO 8601:2004 section 3.2.2), which Python's
``date.fromisocalendar`` implements; a year has 52 or 53 weeks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone

_WEEK = re.compile(r"^\s*(\d{4})-?[Ww](\d{1,2})\s*$")


class BadWeek(ValueError):
    """A week string that is not an ISO week (``YYYY-Www``) or names a week the year lacks."""


@dataclass(frozen=True, order=True)
class IsoWeek:
    """One ISO week. ``start`` is Monday 00:00 UTC, ``end`` the next Monday 00:00 UTC (exclusive)."""

    year: int
    week: int

    @property
    def label(self) -> str:
        """``2026-W48``."""
        return f"{self.year:04d}-W{self.week:02d}"

    @property
    def monday(self) -> date:
        return date.fromisocalendar(self.year, self.week, 1)

    @property
    def start(self) -> datetime:
        """Monday 00:00:00 UTC (inclusive)."""
        m = self.monday
        return datetime(m.year, m.month, m.day, tzinfo=timezone.utc)

    @property
    def end(self) -> datetime:
        """The next Monday 00:00:00 UTC (exclusive)."""
        return self.start + timedelta(days=7)

    def previous(self) -> "IsoWeek":
        """The ISO week before this one (crosses years: 2027-W01 -> 2026-W53 when 2026 has 53 weeks)."""
        return week_of(self.start - timedelta(days=1))

    def next(self) -> "IsoWeek":
        return week_of(self.end)

    def days(self) -> list[date]:
        """The seven dates Monday..Sunday."""
        return [self.monday + timedelta(days=i) for i in range(7)]

    def __str__(self) -> str:
        return self.label


def weeks_in_year(year: int) -> int:
    """52 or 53: the ISO week number of December 28th (always in the year's last week)."""
    return date(year, 12, 28).isocalendar()[1]


def parse_week(text: str) -> IsoWeek:
    """Parse ``2026-W48`` (also ``2026W48``, ``2026-w48``) into an :class:`IsoWeek`.

    Raises:
        BadWeek: the text is not ``YYYY-Www`` or the week number is outside 1..52/53 for that year.
    """
    match = _WEEK.match(text or "")
    if not match:
        raise BadWeek(f"not an ISO week: {text!r} (expected YYYY-Www, e.g. 2026-W48)")
    year, week = int(match.group(1)), int(match.group(2))
    if year < 1970:
        raise BadWeek(f"week {text!r} is before 1970")
    last = weeks_in_year(year)
    if not 1 <= week <= last:
        raise BadWeek(f"{year} has ISO weeks 1..{last}; got week {week} in {text!r}")
    return IsoWeek(year, week)


def week_of(moment: datetime | date) -> IsoWeek:
    """The ISO week containing ``moment`` (a naive datetime is taken as UTC)."""
    if isinstance(moment, datetime):
        if moment.tzinfo is not None:
            moment = moment.astimezone(timezone.utc)
        moment = moment.date()
    year, week, _ = moment.isocalendar()
    return IsoWeek(year, week)


def last_complete_week(now: datetime) -> IsoWeek:
    """The most recent ISO week that has fully ended at ``now`` (the one a Monday review covers)."""
    return week_of(now).previous()
