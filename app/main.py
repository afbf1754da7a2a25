"""The dashboard's router: page list, global sidebar filters, then the selected page.

Run by Streamlit (``app.server.serve`` or ``streamlit run app/main.py`` after
``app.store_provider.set_store``). Pages live in ``app/views/`` (not ``pages/``: Streamlit would serve
that folder as raw pages on a cold server, before this router ever ran); logic in
plain modules.
"""

from __future__ import annotations

import streamlit as st

from app import auth, filters, store_provider, ui
from schema.queries.cost import shared_spans

# An emoji page icon is drawn as an inline SVG; a ':material/…:' page icon would be fetched from Google's font
# host (the navigation's ':material/…:' icons use the font Streamlit serves itself).
st.set_page_config(page_title="infercost", page_icon="💰", layout="wide")
auth.gate()

PAGES = [
    st.Page("views/live_ops.py", title="Live operations", icon=":material/monitor_heart:", default=True),
    st.Page("views/cost.py", title="Cost per successful task", icon=":material/paid:", url_path="cost"),
    st.Page("views/triangle.py", title="Latency-cost-throughput", icon=":material/change_history:",
            url_path="triangle"),
    st.Page("views/tasks.py", title="Tasks", icon=":material/account_tree:", url_path="tasks"),
    st.Page("views/alerts.py", title="Alerts", icon=":material/notifications_active:", url_path="alerts"),
    st.Page("views/weekly_review.py", title="Weekly review", icon=":material/summarize:", url_path="weekly_review"),
    st.Page("views/planner.py", title="Planner", icon=":material/query_stats:", url_path="planner"),
]

page = st.navigation(PAGES)
try:
    store_provider.get_store()
except store_provider.NoStore as exc:
    st.error(str(exc), icon=":material/error:")
    st.stop()
filters.sidebar(option_values=lambda start, end: ui.query("schema.queries.ops:filter_values", start, end))
with ui.guarded("page"), shared_spans():  # the page's cost queries share each range's rollup span
    page.run()
