"""Number formatting with units (USD, s/ms, tokens, %), shared by every page. No Streamlit here."""

from __future__ import annotations

import math
import re

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
# strikethrough) plus '$' (LaTeX in Streamlit and GitHub) and '#' (headings); backslash-escaped, each
# stands for itself (CommonMark). Others are escaped only where they would open a block (below): figures
# and dates in the Markdown review stay readable ('$1.50' is '\$1.50', not '\$1\.50').
_MD_SPECIAL = frozenset("\\`*_[]<>!|~$&#")
# A value that starts with a list marker or a thematic break ('- x', '+ x', '1. x', '---') would open
# a block where it begins a paragraph (an alert summary, a metric value): that marker is escaped too
# ('-4.0 %' and '1.5 s' are no markers and stay as they are).
_BLOCK_START = re.compile(r"^(\s*)(?:([-+])(?=[\s-]|$)|(\d{1,9})([.)])(?=\s|$))")
# What escaping cannot stop: GitHub-flavoured autolinks ('http://', 'www.', 'user@host') and Streamlit's
# directives (':material/icon:', ':smile:', ':red[…]') are found in the text after the escapes are
# resolved. A word joiner (U+2060: no width, no line break) inside each keeps the text as it reads while
# no pattern matches it.
WORD_JOINER = "\u2060"
_TEXT_PATTERNS = re.compile(r"(?i):(?=//|[a-z][\w+-]*[:\[/])|www(?=\.)|(?=@)")


def md_escape(text) -> str:
    """``text`` as Markdown that renders as exactly that text in Streamlit (``st.markdown``, captions,
    alerts, widget labels, metric labels and values, tab and expander labels) and in a Markdown file:
    Markdown's active characters backslash-escaped (a leading list marker too), a :data:`WORD_JOINER`
    inside anything that would become an autolink, an icon, an emoji or a colour, newlines as spaces (a
    value never starts a new block). For every string from telemetry or the URL (replica ids, task ids
    and types, tenants, models, alert text, link parameters) that reaches a Markdown-rendering element."""
    text = "".join("\\" + ch if ch in _MD_SPECIAL else ch for ch in _plain(text))
    return _BLOCK_START.sub(lambda m: m.group(1) + ("\\" + m.group(2) if m.group(2) else f"{m.group(3)}\\{m.group(4)}"),
                            text)


def _plain(text) -> str:
    """``text`` on one line, a :data:`WORD_JOINER` inside each autolink or directive trigger."""
    return _TEXT_PATTERNS.sub(lambda m: m.group(0) + WORD_JOINER, str(text).replace("\r", " ").replace("\n", " "))


def md_code(text) -> str:
    """``text`` as one Markdown code span (monospace, shown literally: no escapes needed inside), its
    fence longer than any run of backticks in it (CommonMark), newlines as spaces (Streamlit rewrites a
    ':material/icon:' even there: a :data:`WORD_JOINER` stops it). For ids."""
    body = _plain(text)
    fence = "`" * (max((len(run) for run in re.findall("`+", body)), default=0) + 1)
    pad = " " if body.startswith("`") or body.endswith("`") else ""
    return f"{fence}{pad}{body}{pad}{fence}"


def md_code_spans(text: str) -> str:
    """``text`` where `code spans` are kept as Markdown code and everything else is :func:`md_escape`d:
    the review's paragraphs use backticks as their only markup."""
    parts = str(text).split("`")
    if len(parts) % 2 == 0:  # an unbalanced backtick: no code spans at all
        return md_escape(text)
    return "".join(md_code(p) if i % 2 else md_escape(p) for i, p in enumerate(parts))
