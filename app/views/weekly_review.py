"""Page 6, Weekly review: rendered by ``app.review_page`` (the weekly review issue) when it exists.

``app.review_page.render(store, filters)`` draws the page; until that module exists this page shows
an empty state saying how to produce the review.
"""

from __future__ import annotations

import importlib

import streamlit as st

from app import filters, store_provider, ui

st.title("Weekly cost review")
try:
    review_page = importlib.import_module("app.review_page")
except ImportError as exc:
    if getattr(exc, "name", "") not in ("app.review_page",):
        raise
    review_page = None

if review_page is None or not hasattr(review_page, "render"):
    ui.empty_state("The weekly review is not available in this build yet.",
                   "Generate it from the command line with `infercost review` (HTML + Markdown).")
else:
    review_page.render(store_provider.get_store(), filters.current())
