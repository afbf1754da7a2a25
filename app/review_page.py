"""The dashboard's Weekly review page body: the same content as ``infercost review`` for a chosen week.

Called by ``app/views/weekly_review.py`` as ``render(store, filters)``. The week is chosen from the
last 12 ISO weeks (default: :func:`default_week`) and mirrored in the URL as ``?week=2026-W48``.
The page walks the same blocks as the HTML/Markdown report (:mod:`app.review.sections`), so every
figure is the one the report prints, and offers both files for download.
"""

from __future__ import annotations

from datetime import datetime, timezone
from html import escape

import pandas as pd
import streamlit as st

from app.fmt import md_code_spans, md_escape
from app.review import build_review, render_html, render_markdown
from app.review.sections import Chart, Kpis, Para, Table, build_sections
from app.review.weeks import BadWeek, last_complete_week, parse_week, week_of

WEEKS_SHOWN = 12
CACHE_TTL_S = 300  # a past week changes only with late data; the cost job absorbs that within minutes


@st.cache_data(ttl=CACHE_TTL_S, show_spinner="Building the weekly review…", max_entries=32)
def _review(_store, store_key: str, week_label: str, hour: str):
    # `hour` keys the cache so a still-running week is rebuilt at least hourly.
    return build_review(_store, week_label)


def _week_options(now: datetime) -> list[str]:
    current = week_of(now)
    out, week = [], current
    for _ in range(WEEKS_SHOWN):
        out.append(week.label)
        week = week.previous()
    return out


def _show_block(block, key: str) -> None:
    if isinstance(block, Para):
        if block.tone == "subhead":
            st.subheader(md_escape(block.text))
        elif block.tone == "muted":
            st.caption(md_code_spans(block.text))
        elif block.tone == "warn":
            st.warning(md_code_spans(block.text))
        else:
            st.markdown(md_code_spans(block.text))
    elif isinstance(block, Kpis):
        for start in range(0, len(block.items), 4):
            for col, k in zip(st.columns(4), block.items[start:start + 4]):
                col.metric(md_escape(k.label), k.value, delta=None if k.change == "n/a" else f"{k.change} WoW",
                           delta_color="inverse" if k.good_when_down else "normal",
                           help=f"Last week: {k.previous}")
    elif isinstance(block, Table):
        st.dataframe(pd.DataFrame(list(block.rows), columns=list(block.headers)), hide_index=True,
                     width="stretch", key=key)
    elif isinstance(block, Chart):
        st.html(f'<div role="img" aria-label="{escape(block.alt)}">{block.svg}</div>')


def default_week(now: datetime, filters=None, has_data=None) -> str:
    """The week shown when the URL names none: the week the dashboard's time range ends in when the
    range is pinned to a past time (a shared link), else the last complete week before ``now`` — or
    the week in progress when ``has_data(week)`` (optional: callable(IsoWeek) -> hours with data, or a
    bool) says it holds more data than the last complete week (a fleet, or a demo, younger than about
    a week and a half: a week's history backfilled on a Sunday is mostly in the week in progress)."""
    end = getattr(filters, "end", None)
    if filters is not None and not getattr(filters, "live", True) and end is not None:
        return week_of(end).label
    last, current = last_complete_week(now), week_of(now)
    if has_data is not None and has_data(current) > has_data(last):
        return current.label
    return last.label


def _has_data(store):
    """``has_data`` of :func:`default_week` over the store: the week's hours holding a replica-minute
    (``review.coverage``); 0 when the store cannot say (the page reports its errors itself)."""
    from schema.queries.review import coverage

    def check(week) -> int:
        try:
            return int(coverage(store, week.start, week.end)["hours_with_data"])
        except Exception:  # noqa: BLE001 - the default stays the last complete week
            return 0
    return check


def render(store, filters=None) -> None:
    """Draw the Weekly review page for the week in ``?week=`` (default: :func:`default_week`).

    ``filters`` (the dashboard's sidebar filters) choose the default week only: the review covers
    the whole fleet, like the report finance receives. Store errors are shown on the page, not raised.
    """
    now = datetime.now(timezone.utc)
    options = _week_options(now)
    requested = st.query_params.get("week")
    default = default_week(now, filters, None if requested else _has_data(store))
    requested = requested or default
    try:
        requested = parse_week(requested).label
    except BadWeek as exc:
        st.warning(f"{md_escape(str(exc))}; showing {default}.")
        requested = default
    if requested not in options:
        options.append(requested)
        options.sort(reverse=True)
    label = st.selectbox("Week (ISO, UTC)", options, index=options.index(requested), key="review_week",
                         help="Monday 00:00 UTC to the next Monday; compared with the week before.")
    st.query_params["week"] = label
    try:
        review = _review(store, f"{getattr(store, 'database', '')}:{id(store)}", label, now.strftime("%Y%m%d%H"))
    except Exception as exc:  # the page shows a short error with an id instead of a stack trace
        from app.ui import error_with_id

        error_with_id(f"Building the review of {label}", exc)
        return
    html, markdown = render_html(review), render_markdown(review)
    c1, c2 = st.columns(2)
    c1.download_button("Download HTML report", html.encode("utf-8"), file_name=f"infercost-review-{label}.html",
                       mime="text/html", icon=":material/download:", key="review_html")
    c2.download_button("Download Markdown", markdown.encode("utf-8"), file_name=f"infercost-review-{label}.md",
                       mime="text/markdown", icon=":material/download:", key="review_md")
    for section in build_sections(review):
        st.header(section.title, divider="gray")
        for i, block in enumerate(section.blocks):
            _show_block(block, key=f"review_{section.key}_{i}")
