"""Render a :class:`WeeklyReview` as one self-contained HTML file or as Markdown.

The HTML has its CSS inline and its charts as inline SVG: no script, no font, no image file and
no network request is needed to open it (a test opens it in headless Chromium with the network
blocked). Markdown carries the same tables (charts become their tables' figures) so the two
outputs print identical numbers (both come from :mod:`app.review.sections`).
"""

from __future__ import annotations

from html import escape

from app.fmt import md_code_spans, md_escape
from app.review import fmt
from app.review.model import WeeklyReview
from app.review.sections import Chart, Kpis, Para, Section, Table, build_sections

_CSS = """
:root{--ink:#1d2330;--muted:#5b6473;--line:#e3e6eb;--good:#0a7f45;--bad:#b3261e;--accent:#0072B2}
*{box-sizing:border-box}
body{margin:0;background:#f6f7f9;color:var(--ink);font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Arial,sans-serif}
main{max-width:1080px;margin:0 auto;padding:28px 32px 48px;background:#fff;min-height:100vh}
header{border-bottom:3px solid var(--accent);padding-bottom:10px;margin-bottom:18px}
h1{font-size:24px;margin:0 0 4px}
h2{font-size:18px;margin:30px 0 10px;padding-bottom:4px;border-bottom:1px solid var(--line)}
h3{font-size:14px;margin:18px 0 6px;text-transform:uppercase;letter-spacing:.04em;color:var(--muted)}
p{margin:6px 0 10px}
p.muted{color:var(--muted);font-size:13px}
p.warn{background:#fff6e5;border-left:3px solid #E69F00;padding:6px 10px}
.kpis{display:grid;grid-template-columns:repeat(4,1fr);gap:10px;margin:12px 0 14px}
.kpi{border:1px solid var(--line);border-radius:6px;padding:10px 12px}
.kpi .label{font-size:12px;color:var(--muted)}
.kpi .value{font-size:22px;font-weight:650;margin:2px 0}
.kpi .change{font-size:12px}
.kpi .change.good{color:var(--good)} .kpi .change.bad{color:var(--bad)}
table{border-collapse:collapse;width:100%;margin:6px 0 14px;font-size:12.5px}
th,td{border-bottom:1px solid var(--line);padding:5px 8px;text-align:left;vertical-align:top}
th{background:#f1f3f6;font-weight:600}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr:nth-child(even) td{background:#fafbfc}
.chart{margin:8px 0 12px;overflow-x:auto}
footer{margin-top:30px;color:var(--muted);font-size:12px;border-top:1px solid var(--line);padding-top:8px}
code{font-size:12px}
@media print{body{background:#fff}main{padding:0}}
"""


def _change_class(kpi) -> str:
    if kpi.wow is None or kpi.wow == 0:
        return ""
    worse = kpi.wow > 0 if kpi.good_when_down else kpi.wow < 0
    return "bad" if worse else "good"


def _inline_code(text: str) -> str:
    """Escape, then turn `x` into <code>x</code> (the only markup the sections use)."""
    parts = escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def _html_block(block) -> str:
    if isinstance(block, Para):
        if block.tone == "subhead":
            return f"<h3>{escape(block.text)}</h3>"
        cls = f' class="{block.tone}"' if block.tone else ""
        return f"<p{cls}>{_inline_code(block.text)}</p>"
    if isinstance(block, Kpis):
        cards = "".join(
            f'<div class="kpi"><div class="label">{escape(k.label)}</div><div class="value">{escape(k.value)}</div>'
            f'<div class="change {_change_class(k)}">{escape(k.change)} WoW · last week {escape(k.previous)}</div></div>'
            for k in block.items)
        return f'<div class="kpis">{cards}</div>'
    if isinstance(block, Table):
        numeric = block.numeric or (False,) * len(block.headers)
        head = "".join(f'<th{" class=num" if n else ""}>{escape(h)}</th>' for h, n in zip(block.headers, numeric))
        body = "".join("<tr>" + "".join(f'<td{" class=num" if n else ""}>{escape(c).replace(chr(10), "<br>")}</td>'
                                        for c, n in zip(row, numeric)) + "</tr>" for row in block.rows)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    if isinstance(block, Chart):
        return f'<div class="chart">{block.svg}</div>'
    raise TypeError(f"unknown block {type(block).__name__}")


def render_html(review: WeeklyReview, sections: list[Section] | None = None) -> str:
    """The review as one self-contained HTML document (UTF-8 text)."""
    sections = sections if sections is not None else build_sections(review)
    body = []
    for s in sections:
        body.append(f'<section id="{escape(s.key)}"><h2>{escape(s.title)}</h2>')
        body.extend(_html_block(b) for b in s.blocks)
        body.append("</section>")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
        f"<title>{escape(review.title)}</title><style>{_CSS}</style></head><body><main>"
        f"<header><h1>{escape(review.title)}</h1>"
        f"<div class=\"muted\">infercost · cost per successful task · generated {escape(fmt.when(review.generated_at))}"
        "</div></header>" + "".join(body) +
        "<footer>All amounts in USD. Spend = GPU price × GPU count × time up, busy or idle; "
        "CPST = all spend / tasks that succeeded in the week (tasks belong to the week they ended in). "
        "Every figure comes from infercost's named queries over the store.</footer>"
        "</main></body></html>\n")


def _md_cell(text: str) -> str:
    # Every quoted value is escaped (a task id or alert text must never become a link, an image or
    # HTML); GitHub-flavoured tables hold one line per cell, so line breaks become <br> after escaping.
    return "<br>".join(md_escape(line) for line in str(text).split("\n"))


def _md_block(block) -> str:
    if isinstance(block, Para):
        text = md_code_spans(block.text)
        if block.tone == "subhead":
            return f"### {md_escape(block.text)}\n"
        if block.tone == "muted":
            return f"_{text}_\n"
        if block.tone == "warn":
            return f"> ⚠ {text}\n"
        return f"{text}\n"
    if isinstance(block, Kpis):
        lines = ["| Headline | This week | WoW | Last week |", "|---|---:|---:|---:|"]
        lines += [f"| {_md_cell(k.label)} | **{_md_cell(k.value)}** | {_md_cell(k.change)} | {_md_cell(k.previous)} |"
                  for k in block.items]
        return "\n".join(lines) + "\n"
    if isinstance(block, Table):
        numeric = block.numeric or (False,) * len(block.headers)
        lines = ["| " + " | ".join(_md_cell(h) for h in block.headers) + " |",
                 "|" + "|".join("---:" if n else "---" for n in numeric) + "|"]
        lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in block.rows]
        return "\n".join(lines) + "\n"
    if isinstance(block, Chart):
        return ""  # the figures are in the section's tables
    raise TypeError(f"unknown block {type(block).__name__}")


def render_markdown(review: WeeklyReview, sections: list[Section] | None = None) -> str:
    """The review as GitHub-flavoured Markdown (tables; charts omitted, their numbers are in tables)."""
    sections = sections if sections is not None else build_sections(review)
    out = [f"# {md_escape(review.title)}\n", f"_infercost · generated {fmt.when(review.generated_at)}_\n"]
    for s in sections:
        out.append(f"## {md_escape(s.title)}\n")
        out.extend(md for md in (_md_block(b) for b in s.blocks) if md)
    out.append("---\n_All amounts in USD. CPST = all spend / tasks that succeeded in the week._\n")
    return "\n".join(out)
