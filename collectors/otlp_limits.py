"""Limits on what an OTLP request may carry into the store: time bounds and value nesting.

Position: collectors (pure functions, used by :mod:`collectors.otlp_traces` and
:mod:`collectors.otlp_metrics`; re-exported by :mod:`collectors.otlp_common`).

* :class:`TimeBounds` — a span start / point time older than the store's retention would be
  dropped by the table TTL at insert, one far in the future is a clock error (and past 2262 does
  not fit ClickHouse's DateTime64(9)): both are rejected and reported, never a silent 200;
* :func:`prune_json_values` — OTLP/JSON array/kvlist values nested deeper than the one level the
  store keeps are emptied before parsing (deeper levels are stored as null anyway), so a value
  nested 50 levels keeps its span instead of failing the request.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass

DATETIME64_MAX_NS = 9_223_372_036_854_775_807  # DateTime64(9) ends in 2262 (Int64 nanoseconds)
MAX_VALUE_DEPTH = 1  # array/kvlist values nested deeper are stored as null (as the ingest view does)


@dataclass(frozen=True)
class TimeBounds:
    """Times (ns since the epoch) a span start / data point may have to be stored and kept.

    ``oldest_ns``: older data would be dropped by the tables' TTL at insert (``retention_days``);
    ``newest_ns``: later data is a clock error (``max_future_s`` ahead of now), capped at the end of
    ClickHouse's DateTime64(9) range. Build with :meth:`around`.
    """

    oldest_ns: int
    newest_ns: int
    retention_days: int
    max_future_s: float

    @classmethod
    def around(cls, now_ns: int, retention_days: int, max_future_s: float) -> "TimeBounds":
        oldest = now_ns - int(retention_days) * 86_400 * 10**9
        newest = min(now_ns + int(max_future_s * 1e9), DATETIME64_MAX_NS)
        return cls(oldest, newest, int(retention_days), float(max_future_s))

    def problem(self, start_ns: int, end_ns: int | None = None) -> str:
        """'' when the times can be stored; else ``old`` or ``future``."""
        if start_ns < self.oldest_ns:
            return "old"
        if start_ns > self.newest_ns or (end_ns is not None and end_ns > self.newest_ns):
            return "future"
        return ""

    def describe(self, problem: str, count: int, what: str) -> str:
        """A partial-success sentence for ``count`` ``what`` (spans, data points) with ``problem``."""
        if problem == "old":
            return (f"{count} {what} older than the {self.retention_days}-day retention "
                    f"(before {_iso(self.oldest_ns)}; they would be dropped at insert)")
        return f"{count} {what} dated more than {self.max_future_s:g} s in the future (after {_iso(self.newest_ns)})"


def _iso(ns: int) -> str:
    seconds = max(min(ns // 10**9, 253_402_300_799), 0)
    return _dt.datetime.fromtimestamp(seconds, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def prune_json_values(obj, depth: int = 0, limit: int = MAX_VALUE_DEPTH) -> int:
    """In an OTLP JSON fragment, empty every ``arrayValue`` / ``kvlistValue`` nested more than ``limit``
    levels inside an attribute value (stored as null, as the ingest view stores them); returns how many."""
    pruned = 0
    if isinstance(obj, dict):
        for key in list(obj):
            value = obj[key]
            if key in ("arrayValue", "array_value", "kvlistValue", "kvlist_value"):
                if depth >= limit + 1 and isinstance(value, (dict, list)):
                    del obj[key]
                    pruned += 1
                    continue
                pruned += prune_json_values(value, depth + 1, limit)
            elif isinstance(value, (dict, list)):
                pruned += prune_json_values(value, depth, limit)
    elif isinstance(obj, list):
        for item in obj:
            pruned += prune_json_values(item, depth, limit)
    return pruned
