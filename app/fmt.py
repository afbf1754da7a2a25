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


# The characters that start inline Markdown (emphasis, code, links, images, HTML, entities, tables,
# strikethrough) plus '$' (LaTeX in Streamlit and GitHub) and '#' (headings). Dots and dashes are
# left alone: they only matter at the start of a line, and values never start one (newlines are
# replaced). Streamlit's ':color[...]' needs '[', escaped here.
_MD_SPECIAL = set("\\`*_[]<>!|~$&#")


def md_escape(text) -> str:
    """``text`` with every Markdown-active character backslash-escaped, so Markdown renders it as the
    literal text (no links, images, HTML, emphasis, LaTeX or icons). For user-controlled strings
    (replica ids, task types, URL parameters, alert text) shown in ``st.markdown`` / ``st.warning`` /
    a Markdown report. Newlines become spaces (a value never starts a new block)."""
    out = []
    for ch in str(text).replace("\r", " ").replace("\n", " "):
        out.append("\\" + ch if ch in _MD_SPECIAL else ch)
    return "".join(out)


def md_code_spans(text: str) -> str:
    """``text`` where `code spans` are kept as Markdown code and everything else is :func:`md_escape`d:
    the review's paragraphs use backticks as their only markup."""
    parts = str(text).split("`")
    if len(parts) % 2 == 0:  # an unbalanced backtick: no code spans at all
        return md_escape(text)
    return "".join(f"`{p}`" if i % 2 else md_escape(p) for i, p in enumerate(parts))
