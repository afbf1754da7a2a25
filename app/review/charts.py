"""Small inline SVG charts for the self-contained HTML report (no script, no network, no fonts).

Hand-built SVG rather than a plotting library: the report must open offline in any browser and
in mail clients, stay a few kilobytes, and render identically in tests. Each function returns an
``<svg>`` string; text is escaped; colours are colour-blind safe (Okabe & Ito, "Color Universal
Design", 2008).
"""

from __future__ import annotations

import math
from html import escape
from typing import Callable, Sequence

THIS_WEEK = "#0072B2"  # blue
LAST_WEEK = "#999999"  # grey
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
FONT = "font-family:system-ui,-apple-system,'Segoe UI',Roboto,Arial,sans-serif"


def _nice_max(x: float) -> float:
    """The smallest 1/2/2.5/5 x 10^k at or above x (axis top)."""
    if x <= 0 or not math.isfinite(x):
        return 1.0
    exp = math.floor(math.log10(x))
    for m in (1, 2, 2.5, 5, 10):
        top = m * 10**exp
        if top >= x * (1 - 1e-12):
            return top
    return 10 ** (exp + 1)


def _svg_open(title: str, width: int, height: int, title_x: int) -> list[str]:
    """The ``<svg>`` element's opening (labelled with the title for screen readers) and the title line."""
    return [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}" style="{FONT}">',
            f'<text x="{title_x}" y="18" font-size="13" font-weight="600" fill="#222">{escape(title)}</text>']


def _legend(series: Sequence[tuple[str, str, Sequence[float | None]]], left: int, height: int) -> list[str]:
    """One colour swatch and name per series, left to right along the chart's bottom edge."""
    out, lx = [], left
    for name, colour, _ in series:
        out.append(f'<rect x="{lx}" y="{height - 14}" width="10" height="10" fill="{colour}"/>')
        out.append(f'<text x="{lx + 14}" y="{height - 5}" font-size="11" fill="#333">{escape(name)}</text>')
        lx += 24 + 7 * len(name)
    return out


def line_chart(title: str, x_labels: Sequence[str], series: Sequence[tuple[str, str, Sequence[float | None]]],
               y_format: Callable[[float], str], width: int = 640, height: int = 240) -> str:
    """Lines over shared x labels; ``series`` = (name, colour, values) with None for gaps."""
    left, right, top, bottom = 70, 16, 34, 44
    pw, ph = width - left - right, height - top - bottom
    values = [v for _, _, vs in series for v in vs if v is not None and math.isfinite(v)]
    ymax = _nice_max(max(values) if values else 0.0)
    n = max(len(x_labels), 1)

    def x(i):
        return left + (pw * (i + 0.5) / n)

    def y(v):
        return top + ph - (v / ymax) * ph

    parts = _svg_open(title, width, height, left)
    for k in range(5):
        v = ymax * k / 4
        parts.append(f'<line x1="{left}" x2="{left + pw}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#e5e5e5"/>')
        parts.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" font-size="10" text-anchor="end" fill="#555">'
                     f'{escape(y_format(v))}</text>')
    for i, label in enumerate(x_labels):
        parts.append(f'<text x="{x(i):.1f}" y="{top + ph + 16}" font-size="10" text-anchor="middle" '
                     f'fill="#555">{escape(label)}</text>')
    for name, colour, vs in series:
        run: list[str] = []
        for i, v in enumerate(vs):
            if v is None or not math.isfinite(v):
                if len(run) > 1:
                    parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{" ".join(run)}"/>')
                run = []
                continue
            run.append(f"{x(i):.1f},{y(v):.1f}")
            parts.append(f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="3" fill="{colour}">'
                         f'<title>{escape(name)} {escape(x_labels[i])}: {escape(y_format(v))}</title></circle>')
        if len(run) > 1:
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{" ".join(run)}"/>')
    parts += _legend(series, left, height)
    parts.append("</svg>")
    return "".join(parts)


def bar_chart(title: str, labels: Sequence[str], series: Sequence[tuple[str, str, Sequence[float | None]]],
              value_format: Callable[[float], str], width: int = 640, bar_height: int = 14) -> str:
    """Horizontal grouped bars: one group per label, one bar per series (e.g. this vs last week)."""
    left, right, top = 150, 90, 34
    ns = max(len(series), 1)
    group_h = ns * bar_height + 10
    height = top + group_h * max(len(labels), 1) + 26
    pw = width - left - right
    values = [v for _, _, vs in series for v in vs if v is not None and math.isfinite(v)]
    vmax = max([abs(v) for v in values] + [0.0]) or 1.0
    parts = _svg_open(title, width, height, 8)
    for gi, label in enumerate(labels):
        gy = top + gi * group_h
        short = label if len(label) <= 22 else label[:21] + "…"
        parts.append(f'<text x="{left - 8}" y="{gy + ns * bar_height / 2 + 4:.1f}" font-size="11" '
                     f'text-anchor="end" fill="#333"><title>{escape(label)}</title>{escape(short)}</text>')
        for si, (name, colour, vs) in enumerate(series):
            v = vs[gi] if gi < len(vs) else None
            if v is None or not math.isfinite(v):
                continue
            w = max(abs(v) / vmax * pw, 1.0 if v else 0.0)
            by = gy + si * bar_height
            parts.append(f'<rect x="{left}" y="{by}" width="{w:.1f}" height="{bar_height - 2}" fill="{colour}">'
                         f'<title>{escape(name)}: {escape(value_format(v))}</title></rect>')
            parts.append(f'<text x="{left + w + 4:.1f}" y="{by + bar_height - 4}" font-size="10" fill="#333">'
                         f'{escape(value_format(v))}</text>')
    if len(series) > 1:
        parts += _legend(series, left, height)
    parts.append("</svg>")
    return "".join(parts)


def stacked_bar(title: str, parts_: Sequence[tuple[str, float]], value_format: Callable[[float], str],
                width: int = 640) -> str:
    """One horizontal 100 % bar split into named parts (e.g. spend = useful + each waste)."""
    height = 90
    left, right = 8, 8
    pw = width - left - right
    total = sum(max(v, 0.0) for _, v in parts_) or 1.0
    out = _svg_open(title, width, height, left)
    x = float(left)
    lx = left
    for i, (name, v) in enumerate(parts_):
        colour = PALETTE[i % len(PALETTE)]
        w = max(v, 0.0) / total * pw
        if w > 0:
            out.append(f'<rect x="{x:.1f}" y="28" width="{w:.1f}" height="24" fill="{colour}">'
                       f'<title>{escape(name)}: {escape(value_format(v))}</title></rect>')
        x += w
        out.append(f'<rect x="{lx}" y="{height - 24}" width="10" height="10" fill="{colour}"/>')
        label = f"{name} {v / total * 100:.0f}%"
        out.append(f'<text x="{lx + 14}" y="{height - 15}" font-size="11" fill="#333">{escape(label)}</text>')
        lx += 26 + int(6.2 * len(label))
    out.append("</svg>")
    return "".join(out)
