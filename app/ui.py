"""Streamlit helpers shared by the pages: cached named-query calls, tables with CSV download,
empty states, time-zone conversion, metric tiles.

Every figure on a page comes from a function of ``schema.queries.*`` called through
:func:`query` (results cached ``ttl`` seconds per store, function and arguments).
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import logging
import os
import secrets
import threading
from datetime import datetime, timezone

import pandas as pd
import streamlit as st
from altair.utils.schemapi import disable_debug_mode

from app import store_provider
from app.filters import PRESETS, viewer_tz  # noqa: F401 - viewer_tz: the pages call ui.viewer_tz

log = logging.getLogger("app")

LIVE_TTL_S = 5  # live tiles refresh every 5 s, so results older than that are useless
SLOW_TTL_S = 60  # cost pages: the cost job itself runs about once a minute

# Altair's "debug mode" validates every schema object against the Vega-Lite JSON schema as it is
# built and again as each is copied; st.altair_chart then validates the finished spec once more
# (``to_dict(validate=True)``). The per-object checks were ~45 % of the live page's chart time
# (9 charts: ~150 ms of ~330 ms a load on the 10M store): off for the dashboard process; an invalid
# chart still raises when it is drawn, and the specs are the same.
disable_debug_mode()


# Vega draws to SVG unless told otherwise (Streamlit switches to canvas only above 2,000 rows per
# dataset): every line point, bar and heat-map cell is then a DOM element the browser lays out and
# paints, ~5,000 on the live page at 7 days (16 replicas x 84 points, twice, plus the fleet lines). A
# canvas draws the same marks, tooltips and selections with a handful of elements.
CHART_EMBED = {"renderer": "canvas"}
# A chart's height is its plot's, the width fits the column. Streamlit sizes a spec without `autosize` with
# "fit" in both directions, so the height a builder asks for held the axes and the legend too: a 220 px
# time series kept a 40-80 px plot (in Chromium, on the live and cost pages).
# Composed and faceted specs keep Streamlit's choice (fit does not apply to them).
CHART_AUTOSIZE = {"type": "fit-x", "contains": "padding"}


# ``st.altair_chart`` turns each chart into its Vega-Lite dict with ``to_dict()``, which validates the
# whole spec against the Vega-Lite JSON schema (jsonschema walks every encoding: ~30-60 ms a layered
# chart, ~0.3-0.5 s of CPU for the live page's nine charts on every run, cached queries or not). The
# dashboard converts the chart itself without that check and hands Streamlit the dict
# (``st.vega_lite_chart``: the same element, the same Arrow datasets, the same selections). The specs are
# validated by the tests instead (every chart of every page, ``tests/test_app_pages.py``) and at run time
# with INFERCOST_VALIDATE_CHARTS=1.
VALIDATE_CHARTS = os.environ.get("INFERCOST_VALIDATE_CHARTS", "") == "1"


def vega_lite_spec(spec, validate: bool = False) -> dict:
    """The Vega-Lite dict Streamlit would build from the Altair chart ``spec`` (its ``to_arrow_dataset``
    data transformer: each frame as Arrow IPC bytes in ``datasets`` under a content hash; the "none"
    theme), validated against the schema only when ``validate``, with :data:`CHART_EMBED` as its
    top-level ``usermeta.embedOptions`` and, unless composed or faceted, :data:`CHART_AUTOSIZE` as its
    ``autosize`` (the height asked for is the plot's). Raises ``altair.utils.schemapi.SchemaValidationError`` on an
    invalid spec when validating."""
    import altair as alt
    from streamlit.elements.vega_charts import _altair_globals_lock, _to_arrow_dataset  # private: see chart()

    datasets: dict = {}
    alt.data_transformers.register("to_arrow_dataset", _to_arrow_dataset)
    with _altair_globals_lock:  # Altair's theme and transformer are process-global: Streamlit's own lock
        theme = alt.theme.enable("none") if alt.theme.active == "default" else contextlib.nullcontext()
        with theme, alt.data_transformers.enable("to_arrow_dataset", datasets=datasets):
            out = spec.to_dict(validate=validate)
    existing = out.get("datasets")
    out["datasets"] = {**existing, **datasets} if isinstance(existing, dict) else datasets
    out["usermeta"] = {**(out.get("usermeta") or {}), "embedOptions": dict(CHART_EMBED)}
    if not any(key in out for key in ("vconcat", "hconcat", "concat", "facet", "repeat")):
        out.setdefault("autosize", dict(CHART_AUTOSIZE))
    return out


def chart(spec, **kwargs):
    """Draw the Altair chart ``spec`` as ``st.altair_chart(spec, **kwargs)`` would, on a canvas
    (:data:`CHART_EMBED`), from :func:`vega_lite_spec` (not validated unless :data:`VALIDATE_CHARTS`).
    Returns what st.altair_chart returns (the selection event with ``on_select``). :func:`vega_lite_spec`
    borrows two private names of ``streamlit.elements.vega_charts`` (its Arrow data transformer and the lock
    around Altair's process-global theme); a Streamlit without them falls back to ``st.altair_chart``, and
    ``tests/test_app_units.py`` fails when the conversion stops matching Streamlit's own."""
    try:
        converted = vega_lite_spec(spec, validate=VALIDATE_CHARTS)
    except ImportError:  # a Streamlit without the private names vega_lite_spec uses: its own (slower) path
        return st.altair_chart(spec.properties(usermeta={"embedOptions": dict(CHART_EMBED)}), **kwargs)
    return st.vega_lite_chart(spec=converted, **kwargs)


def _resolve(path: str):
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


@st.cache_data(ttl=SLOW_TTL_S, show_spinner=False, max_entries=200)
def _cached_spec(build: str, args: tuple, validate: bool) -> dict:
    return vega_lite_spec(_resolve(build)(*args), validate=validate)


def cached_chart(build: str, args: tuple, **kwargs):
    """Draw the Altair chart the builder ``build`` ('module:function': a pure function of its arguments,
    e.g. ``app.charts:lines_annotated``) makes of ``args``, as :func:`chart` does; its Vega-Lite dict
    (:func:`vega_lite_spec`) is cached per builder and arguments (frames hashed by content), so a rerun on
    the same data — the live page's 5 s refresh between two minutes of new data, a tab or filter click —
    builds no Altair object. Building and converting the live page's eight charts was ~60 % of its script's
    CPU with every query cached (a sampling profile of 40 runs on the 7-day demo store: Altair's layer
    copies and ``to_dict``, the frames' melt and Arrow conversion). ``kwargs`` go to ``st.vega_lite_chart``
    (``width``, ``on_select``, ``selection_mode``, ``key``). Returns what it returns (the selection event
    with ``on_select``); raises what the builder raises."""
    try:
        converted = _cached_spec(build, tuple(args), VALIDATE_CHARTS)
    except ImportError:  # a Streamlit without the private names vega_lite_spec uses: its own (slower) path
        return chart(_resolve(build)(*args), **kwargs)
    return st.vega_lite_chart(spec=converted, **kwargs)


@st.cache_data(ttl=LIVE_TTL_S, show_spinner=False, max_entries=500)
def _cached_live(_store, store_key: str, path: str, args: tuple, kwargs: dict):
    return _resolve(path)(_store, *args, **kwargs)


@st.cache_data(ttl=SLOW_TTL_S, show_spinner=False, max_entries=500)
def _cached_slow(_store, store_key: str, path: str, args: tuple, kwargs: dict):
    return _resolve(path)(_store, *args, **kwargs)


def query(path: str, *args, live: bool = False, **kwargs):
    """Call the named-query function ``path`` ('module:function') on the dashboard's store, cached."""
    store = store_provider.get_store()
    fn = _cached_live if live else _cached_slow
    return fn(store, store_provider.store_key(), path, args, kwargs)


def ask(call, *, live: bool = False):
    """:func:`query` of one ``(path, args, kwargs)`` triple, the form :func:`prefetch` takes."""
    path, args, kwargs = call
    return query(path, *args, live=live, **kwargs)


# Named queries a page runs at once (prefetch): two clients, as the machines we measure on have 2 cores.
_PREFETCH = None
_PREFETCH_LOCK = threading.Lock()


def prefetch(calls, *, live: bool = False) -> None:
    """Run the named queries ``calls`` — ``(path, args, kwargs)`` triples, as :func:`query` takes them
    — on :data:`app.store_provider.READERS` extra clients at once, and wait for them. Each result lands in
    :func:`query`'s cache, so the page's own ``query(path, *args, **kwargs)`` calls that follow read it
    instead of running one statement after another (a live page's queries are independent; ClickHouse
    plans and runs a small query on one core). Returns nothing; raises only
    :class:`app.store_provider.NoStore` (no store at all): a query that fails is not cached, so the page's
    own call runs it again and shows its error where the panel is. Each call runs in a copy of the
    caller's context (``contextvars``), so a page's context-scoped state applies to it."""
    global _PREFETCH
    from concurrent.futures import ThreadPoolExecutor, wait

    if not calls:
        return
    key = store_provider.store_key()
    fn = _cached_live if live else _cached_slow
    with _PREFETCH_LOCK:
        if _PREFETCH is None:
            _PREFETCH = ThreadPoolExecutor(max_workers=store_provider.READERS, thread_name_prefix="app-prefetch")
        pool = _PREFETCH

    def run(path, args, kwargs):
        # no script context in these threads: the cached functions draw nothing, and st.cache_data's
        # store is the process's
        try:
            with store_provider.reader() as client:
                fn(client, key, path, tuple(args), dict(kwargs))
        except Exception:  # the page's own call raises it where the panel is drawn
            log.debug("prefetch of %s failed", path, exc_info=True)

    # each call in its own copy of this thread's context: a page's context-scoped sharing (the cost
    # queries' schema.queries.cost.shared_spans) holds in the pool's threads too
    wait([pool.submit(contextvars.copy_context().run, run, path, args, kwargs) for path, args, kwargs in calls])


def optional_function(path: str):
    """The function at 'module:function' or None if that module / name does not exist (yet)."""
    try:
        return _resolve(path)
    except (ImportError, AttributeError):
        return None


def range_label(view) -> str:
    """'last 7 days', or 'custom range' for a view's filters."""
    return PRESETS[view.preset][0].lower() if view.preset in PRESETS else "custom range"


def tz_label() -> str:
    tz = viewer_tz()
    return getattr(tz, "key", None) or "UTC"


def to_viewer(df: pd.DataFrame, columns, naive: bool = False) -> pd.DataFrame:
    """Copy of ``df`` with UTC time ``columns`` converted to the viewer's zone (naive if ``naive``, for charts)."""
    df = df.copy()
    tz = viewer_tz()
    for col in columns:
        if col not in df.columns:
            continue
        s = pd.to_datetime(df[col], errors="coerce")
        if s.dt.tz is None:
            s = s.dt.tz_localize("UTC")
        s = s.dt.tz_convert(tz)
        df[col] = s.dt.tz_localize(None) if naive else s
    return df


def from_viewer(value) -> datetime:
    """A chart selection's time as an aware UTC datetime. Vega-Lite reads the charts' naive times as the
    browser's local time (the viewer's zone, which is what they are), so a selection's epoch
    milliseconds are the true instant; ISO text without a zone is taken as the viewer's wall time."""
    if isinstance(value, (int, float)):
        return pd.Timestamp(value, unit="ms", tz="UTC").to_pydatetime()
    ts = pd.to_datetime(value)
    if ts.tzinfo is None:
        ts = ts.tz_localize(viewer_tz())
    return ts.tz_convert("UTC").to_pydatetime()


def local_time(value: datetime | None, fmt: str = "%Y-%m-%d %H:%M:%S") -> str:
    if value is None:
        return "—"
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(viewer_tz()).strftime(fmt)


def metric_delta(delta: float | None, render, lower_better: bool = True) -> dict:
    """``st.metric`` keyword arguments for a change ``delta`` (the value minus the one it is compared
    with; None: no comparison) shown as ``render(delta, True)``: green when the change is good (down
    when ``lower_better``), red when bad, grey and without arrow when it shows as no change (a
    ``+0.0 pp`` that rounds from a tiny difference is not a rise). Returns {} for None."""
    if delta is None or pd.isna(delta):
        return {}
    shown = render(delta, True)
    if not delta or not any(ch in "123456789" for ch in shown):
        return {"delta": shown, "delta_color": "off", "delta_arrow": "off"}
    return {"delta": shown, "delta_color": "inverse" if lower_better else "normal"}


def open_tab(labels: list[str], key: str) -> str:
    """The label of the tab :func:`lazy_tabs` ``(labels, key)`` opens on this run: the viewer's last
    choice (session state), else the link's ``?key=`` parameter, else the first tab (Streamlit's own rule:
    an unknown label opens the first). A page reads it before it draws, to fetch only that tab's queries."""
    for value in (st.session_state.get(key), st.query_params.get(key)):
        if value in labels:
            return value
    return labels[0]


def lazy_tabs(labels: list[str], key: str):
    """``st.tabs`` whose hidden tabs cost nothing: opening one reruns the script (or the fragment it is
    in), the caller draws only the open tab's body (``tab.open``) and fetches only its queries
    (:func:`open_tab`), and the open tab is in the URL (``?key=label``), so a shared link opens it. A chart
    in a hidden tab of plain ``st.tabs`` costs its query and its data sent, though not its drawing."""
    return st.tabs(labels, key=key, on_change="rerun", bind="query-params")


def table(df: pd.DataFrame, key: str, filename: str, column_config: dict | None = None, height=None,
          hide_index: bool = True, **kwargs):
    """Show ``df`` and a 'Download CSV' button for exactly the rows shown. Returns the dataframe event."""
    event = st.dataframe(df, column_config=column_config, hide_index=hide_index, width="stretch", key=key,
                         height=height if height is not None else "auto", **kwargs)
    export = df.drop(columns=[c for c in df.columns if df[c].map(lambda v: isinstance(v, (list, tuple))).any()],
                     errors="ignore") if len(df) else df
    st.download_button("Download CSV", export.to_csv(index=False).encode(), file_name=filename, mime="text/csv",
                       key=f"{key}_csv", icon=":material/download:")
    return event


def empty_state(message: str, hint: str = "") -> None:
    """A friendly 'nothing yet' box that says what to do."""
    st.info(message + (f"\n\n{hint}" if hint else ""), icon=":material/info:")


def no_spans_hint() -> str:
    endpoint = store_provider.context("otlp_endpoint", "http://<infercost host>:4318/v1/traces")
    return (f"No spans yet: point vLLM's `--otlp-traces-endpoint` at `{endpoint}` "
            "(with `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf`), or run `infercost demo`.")


def error_with_id(what: str, exc: BaseException) -> str:
    """Log ``exc`` with its traceback under a fresh id and show the viewer a short error quoting it.
    Returns the id. The viewer never sees the traceback or the exception text (it may quote a URL with
    credentials, or SQL)."""
    error_id = secrets.token_hex(4)
    log.error("%s failed (error id %s)", what, error_id, exc_info=exc)
    st.error(f"{what} failed ({type(exc).__name__}). Error id {error_id}: the details are in the server log.",
             icon=":material/error:")
    return error_id


@contextlib.contextmanager
def guarded(what: str):
    """Run a page body (or panel): any exception becomes :func:`error_with_id`; Streamlit's own control
    flow (st.stop, reruns: BaseException subclasses) passes through."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - the viewer gets an id, the log the traceback
        error_with_id(f"This {what}", exc)


def store_error(exc: Exception) -> None:
    error_with_id("The store query", exc)
