"""Page 6, Weekly review: drawn by ``app.review_page.render(store, filters)``."""

from __future__ import annotations

import streamlit as st

from app import filters, review_page, store_provider

st.title("Weekly cost review")
review_page.render(store_provider.get_store(), filters.current())
