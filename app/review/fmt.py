"""Number formatting shared by the HTML and Markdown renderers, so both print identical figures.

Units: USD as the dashboard prints it (:func:`app.fmt.usd`), ratios as percent, tokens with thousands
separators.
"""

from __future__ import annotations

import math
from datetime import datetime

from app.fmt import usd  # noqa: F401 - the one money formatter, the dashboard's

DASH = "—"


def _missing(x) -> bool:
    return x is None or (isinstance(x, float) and not math.isfinite(x))


def usd_delta(x: float | None) -> str:
    """Signed USD change: ``+$12.30`` / ``-$0.00400``."""
    return usd(x, signed=True)


def pct(ratio: float | None, digits: int = 1) -> str:
    """A ratio 0..1 as ``12.3 %``."""
    if _missing(ratio):
        return DASH
    return f"{ratio * 100:.{digits}f} %"


def wow(ratio: float | None) -> str:
    """A week-over-week change ratio as ``+12.3 %`` / ``-4.0 %``; ``n/a`` when undefined."""
    if _missing(ratio):
        return "n/a"
    return f"{ratio * 100:+.1f} %"


def count(x: float | None) -> str:
    """An integer count with thousands separators."""
    if _missing(x):
        return DASH
    return f"{int(round(x)):,}"


def number(x: float | None, digits: int = 2) -> str:
    if _missing(x):
        return DASH
    return f"{x:,.{digits}f}"


def tokens(x: float | None) -> str:
    """Tokens: ``12,345``, ``1.23 M`` from a million up."""
    if _missing(x):
        return DASH
    if abs(x) >= 1e6:
        return f"{x / 1e6:,.2f} M"
    return f"{int(round(x)):,}"


def seconds(x: float | None) -> str:
    """A duration: ``850 ms``, ``12.3 s``, ``4 min 05 s``, ``2 h 03 min``."""
    if _missing(x):
        return DASH
    if x < 1:
        return f"{x * 1000:.0f} ms"
    if x < 60:
        return f"{x:.1f} s"
    if x < 3600:
        m, s = divmod(int(round(x)), 60)
        return f"{m} min {s:02d} s"
    h, rest = divmod(int(round(x)), 3600)
    return f"{h} h {rest // 60:02d} min"


def when(t: datetime | None) -> str:
    """``Mon 2026-11-23 14:05 UTC``."""
    if t is None:
        return DASH
    return t.strftime("%a %Y-%m-%d %H:%M UTC")


def measure(value: float | None, unit: str) -> str:
    """Format ``value`` by its unit name (as used by drivers and levers)."""
    if unit == "%":
        return pct(value)
    if unit.startswith("USD"):
        return usd(value) + (unit[3:] if len(unit) > 3 else "")
    if unit == "s":
        return seconds(value)
    if unit == "requests":
        return f"{number(value, 1)} requests"
    if unit in ("successful tasks", "tasks", "count"):
        return count(value) + ("" if unit == "count" else f" {unit}")
    if unit.startswith("tokens"):
        return f"{number(value, 0)} {unit}"
    return f"{number(value)} {unit}"
