"""The weekly cost review: "what did we pay per successful task last week, and why did it change?".

Position: schema (named queries) -> **app.review**. Parts:

* :mod:`app.review.weeks` — ISO weeks (``2026-W48`` -> Monday 00:00 UTC .. next Monday).
* :mod:`app.review.build` — :func:`build_review`: a :class:`~app.review.model.WeeklyReview` from
  the cost job's named queries (``schema.queries.cost``), the alerts' and the review's own.
* :mod:`app.review.drivers` — exact LMDI decomposition of a cost change into its drivers.
* :mod:`app.review.levers` — the four moves (avoid, share, move, delay), measured and priced.
* :mod:`app.review.sections`, :mod:`app.review.render` — one set of blocks rendered as a
  self-contained HTML file (inline CSS + SVG) and as Markdown, so both carry the same figures.
* :mod:`app.review.schedule` — :func:`~app.review.schedule.next_run` and
  :func:`~app.review.schedule.deliver` (webhook, SMTP) for the weekly run inside ``infercost up``.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from app.review.build import build_review
from app.review.model import WeeklyReview
from app.review.render import render_html, render_markdown
from app.review.weeks import BadWeek, IsoWeek, last_complete_week, parse_week

__all__ = ["BadWeek", "IsoWeek", "WeeklyReview", "build_review", "last_complete_week", "parse_week",
           "render_html", "render_markdown", "write_report"]


def write_report(store, week: IsoWeek | str, out_dir: Path | str, *, now: datetime | None = None,
                 review: WeeklyReview | None = None) -> tuple[Path, Path]:
    """Build the review of ``week`` and write ``infercost-review-<week>.html`` and ``.md`` into ``out_dir``.

    Returns (html_path, md_path). Creates ``out_dir``; overwrites earlier files of the same week.
    Raises BadWeek for a malformed week, StoreError when the store fails, OSError when writing fails.
    """
    review = review or build_review(store, week, now=now)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    html_path = out / f"infercost-review-{review.week.label}.html"
    md_path = out / f"infercost-review-{review.week.label}.md"
    html_path.write_text(render_html(review), encoding="utf-8")
    md_path.write_text(render_markdown(review), encoding="utf-8")
    return html_path, md_path
