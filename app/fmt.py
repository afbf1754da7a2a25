"""Number formatting with units (USD, s/ms, tokens, %), shared by every page. No Streamlit here."""

from __future__ import annotations

import math

DASH = "—"


def _missing(value) -> bool:
    if value is None:
        return True
    try:
        return math.isnan(float(value))
    except (TypeError, ValueError):
        return True


def seconds(value, signed: bool = False) -> str:
    """A latency in seconds as '850 ms' below 1 s, '2.40 s' above; '—' when missing."""
    if _missing(value):
        return DASH
    v = float(value)
    sign = "+" if signed and v > 0 else ""
    if abs(v) < 1:
        return f"{sign}{v * 1000:.0f} ms" if abs(v) >= 0.01 else f"{sign}{v * 1000:.1f} ms"
    return f"{sign}{v:.2f} s"


def rate(value, unit: str, signed: bool = False) -> str:
    """A rate like '12.3 req/s'."""
    if _missing(value):
        return DASH
    v = float(value)
    sign = "+" if signed and v > 0 else ""
    digits = 0 if abs(v) >= 100 else 1 if abs(v) >= 10 else 2
    return f"{sign}{v:,.{digits}f} {unit}"


def pct(value, signed: bool = False) -> str:
    """A ratio 0..1 as '4.2 %' (percentage points when signed)."""
    if _missing(value):
        return DASH
    v = float(value) * 100
    if signed:
        return f"{v:+.1f} pp"
    return f"{v:.1f} %"


def usd(value, signed: bool = False) -> str:
    """Dollars: '$1,234.56', small amounts with more digits ('$0.0042')."""
    if _missing(value):
        return DASH
    v = float(value)
    sign = "+" if signed and v > 0 else "-" if v < 0 else ""
    a = abs(v)
    if a == 0:
        body = "0.00"
    elif a < 0.01:
        body = f"{a:.5f}"
    elif a < 1:
        body = f"{a:.4f}"
    else:
        body = f"{a:,.2f}"
    return f"{sign}${body}"


def count(value, unit: str = "", signed: bool = False) -> str:
    """An integer-ish count with thousands separators and an optional unit."""
    if _missing(value):
        return DASH
    v = float(value)
    sign = "+" if signed and v > 0 else ""
    body = f"{v:,.0f}" if abs(v - round(v)) < 1e-9 or abs(v) >= 100 else f"{v:,.1f}"
    return f"{sign}{body}{(' ' + unit) if unit else ''}"


def duration(value) -> str:
    """A coarse duration in seconds: '12 s', '4 min', '3.5 h', '2.0 d'."""
    if _missing(value):
        return DASH
    v = abs(float(value))
    if v < 90:
        return f"{v:.0f} s"
    if v < 5400:
        return f"{v / 60:.0f} min"
    if v < 172800:
        return f"{v / 3600:.1f} h"
    return f"{v / 86400:.1f} d"
