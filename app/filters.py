"""Global sidebar filters (time range, model, tenant, task type), mirrored into the URL.

The URL keeps the view so it can be shared: ``?range=1h`` (live: the last hour, ending now),
``?range=1h&end=2026-11-02T11:00:00Z`` (the hour ending then), ``?range=custom&start=…&end=…``,
plus ``model=``, ``tenant=``, ``task_type=``. Times in the URL are UTC (ISO 8601, ``Z``); the
widgets show the viewer's time zone (:func:`viewer_tz`). Parsing is in plain functions
(:func:`parse_params`), the widgets in :func:`sidebar`. The page helpers (``app.ui``) import this
module, never the other way round.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import streamlit as st

from app.fmt import md_escape

UTC = timezone.utc
PRESETS: dict[str, tuple[str, int]] = {
    "15m": ("Last 15 minutes", 15 * 60),
    "1h": ("Last hour", 3600),
    "6h": ("Last 6 hours", 6 * 3600),
    "24h": ("Last 24 hours", 24 * 3600),
    "7d": ("Last 7 days", 7 * 86400),
    "30d": ("Last 30 days", 30 * 86400),
}
CUSTOM = "custom"
DEFAULT_PRESET = "1h"
FILTER_PARAMS = ("model", "tenant", "task_type")
URL_KEYS = ("range", "start", "end") + FILTER_PARAMS
ALL = "All"


@dataclass(frozen=True)
class Filters:
    """The view's filters. ``start``/``end`` are aware UTC datetimes; '' = no filter."""

    start: datetime
    end: datetime
    preset: str = DEFAULT_PRESET
    live: bool = True  # the range ends "now" and moves with the clock
    model: str = ""
    tenant: str = ""
    task_type: str = ""
    problems: tuple[str, ...] = ()  # URL values that were ignored, shown to the viewer

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()

    def query_filters(self) -> dict[str, str]:
        """``{"model", "tenant", "task_type"}`` for the named queries."""
        return {"model": self.model, "tenant": self.tenant, "task_type": self.task_type}

    def refreshed(self, now: datetime | None = None) -> "Filters":
        """For a live range, the same length ending ``now``; otherwise unchanged."""
        if not self.live:
            return self
        now = _floor_s(now or datetime.now(UTC))
        return replace(self, start=now - (self.end - self.start), end=now)

    def to_params(self) -> dict[str, str]:
        """The query-string form of these filters (what :func:`parse_params` reads back)."""
        params = {"range": self.preset}
        if self.preset == CUSTOM:
            params["start"], params["end"] = iso(self.start), iso(self.end)
        elif not self.live:
            params["end"] = iso(self.end)
        for key in FILTER_PARAMS:
            if getattr(self, key):
                params[key] = getattr(self, key)
        return params


def _floor_s(value: datetime) -> datetime:
    return value.replace(microsecond=0)


def iso(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> datetime:
    """An ISO 8601 time from the URL; naive values are UTC. Raises ValueError with the accepted form."""
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except (ValueError, AttributeError) as exc:
        raise ValueError(f"not an ISO 8601 time: {text!r} (e.g. 2026-11-02T10:00:00Z)") from exc
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def parse_params(params: dict, now: datetime | None = None) -> Filters:
    """Filters from query parameters; bad values fall back to the default and are listed in ``problems``."""
    now = _floor_s(now or datetime.now(UTC))
    problems = []
    preset = str(params.get("range") or DEFAULT_PRESET)
    if preset not in PRESETS and preset != CUSTOM:
        problems.append(f"unknown range {preset!r}; using {PRESETS[DEFAULT_PRESET][0].lower()}")
        preset = DEFAULT_PRESET
    end, start, live = now, None, True
    try:
        if params.get("end"):
            end, live = parse_time(str(params["end"])), False
        if preset == CUSTOM:
            if not params.get("start") or not params.get("end"):
                raise ValueError("range=custom needs both start= and end=")
            start = parse_time(str(params["start"]))
            if start >= end:
                raise ValueError(f"start {iso(start)} is not before end {iso(end)}")
    except ValueError as exc:
        problems.append(f"{exc}; using {PRESETS[DEFAULT_PRESET][0].lower()}")
        preset, end, start, live = DEFAULT_PRESET, now, None, True
    if start is None:
        start = end - timedelta(seconds=PRESETS[preset][1])
    values = {key: str(params.get(key) or "") for key in FILTER_PARAMS}
    return Filters(start=start, end=end, preset=preset, live=live, problems=tuple(problems), **values)


def _params_now() -> dict:
    return {key: st.query_params.get(key) for key in st.query_params.keys()}


def viewer_tz():
    """The viewer's time zone (from the browser, ``st.context.timezone``), UTC when unknown."""
    name = None
    try:
        name = st.context.timezone
    except Exception:  # outside a browser session (tests, bare mode) there is no context
        name = None
    try:
        return ZoneInfo(name) if name else timezone.utc
    except ZoneInfoNotFoundError:
        return timezone.utc


def sidebar(option_values=None) -> Filters:
    """Render the sidebar filters, write them back to the URL and return them.

    ``option_values(start, end)`` returns ``{"models", "tenants", "task_types"}`` lists offered in
    the selectors (values from the URL are always offered too).
    """
    tz = viewer_tz()
    state = st.session_state
    if "_filters_init" not in state:
        initial = parse_params(_params_now())
        state["_filters_init"] = True
        state["f_range"] = initial.preset
        state["f_anchor"] = None if initial.live else initial.end
        state["f_start"] = initial.start.astimezone(tz).replace(tzinfo=None, second=0)
        state["f_end"] = initial.end.astimezone(tz).replace(tzinfo=None, second=0)
        for key in FILTER_PARAMS:
            state[f"f_{key}"] = getattr(initial, key) or ALL
        state["_filters_problems"] = initial.problems
    sb = st.sidebar
    sb.header("Filters")
    choices = list(PRESETS) + [CUSTOM]
    preset = sb.selectbox("Time range", choices, key="f_range",
                          format_func=lambda k: PRESETS[k][0] if k in PRESETS else "Custom range")
    now = _floor_s(datetime.now(UTC))
    if preset == CUSTOM:
        a = sb.datetime_input("From", key="f_start", step=timedelta(minutes=1))
        b = sb.datetime_input("To", key="f_end", step=timedelta(minutes=1))
        start = a.replace(tzinfo=tz).astimezone(UTC)
        end = b.replace(tzinfo=tz).astimezone(UTC)
        if start >= end:
            sb.error("'From' must be before 'To'; showing the last hour.")
            start, end, preset = now - timedelta(hours=1), now, DEFAULT_PRESET
        live = False
    else:
        anchor = state.get("f_anchor")
        if anchor is not None:
            end, live = anchor, False
            sb.caption(f"Ending {end.astimezone(tz):%Y-%m-%d %H:%M} (from the link).")
            if sb.button("Follow now", key="f_follow_now"):
                state["f_anchor"] = None
                end, live = now, True
        else:
            end, live = now, True
        start = end - timedelta(seconds=PRESETS[preset][1])
    offered = {"models": [], "tenants": [], "task_types": []}
    if option_values is not None:
        try:
            offered = option_values(start, end)
        except Exception:  # the selectors still work with the URL's values when the store is down
            pass
    values = {}
    for key, label, plural in (("model", "Model", "models"), ("tenant", "Tenant", "tenants"),
                               ("task_type", "Task type", "task_types")):
        current = state.get(f"f_{key}", ALL)
        options = [ALL] + sorted(set(offered.get(plural, [])) | ({current} - {ALL}))
        chosen = sb.selectbox(label, options, key=f"f_{key}")
        values[key] = "" if chosen == ALL else chosen
    sb.caption(f"Times in {getattr(tz, 'key', 'UTC')}; stored in UTC.")
    for problem in state.get("_filters_problems", ()):
        sb.warning(f"Link parameter ignored: {md_escape(problem)}")
    filters = Filters(start=start, end=end, preset=preset, live=live, **values)
    now_params = _params_now()
    # Keep the pages' own parameters (e.g. ?task=, ?q=); replace only the filters'.
    params = {k: v for k, v in now_params.items() if k not in URL_KEYS} | filters.to_params()
    if now_params != params:
        st.query_params.from_dict(params)
    state["_filters"] = filters
    return filters


def zoom_to(start: datetime, end: datetime) -> None:
    """Switch the view to the custom range [start, end) (UTC): rewrite the URL, re-initialise the sidebar
    from it, rerun. Used by charts' time selections (zoom)."""
    params = {k: st.query_params.get(k) for k in st.query_params.keys() if k not in ("range", "start", "end")}
    params.update({"range": CUSTOM, "start": iso(_floor_s(start)), "end": iso(_floor_s(end))})
    st.query_params.from_dict(params)
    st.session_state.pop("_filters_init", None)
    st.rerun()


def current() -> Filters:
    """The filters the router computed for this run (pages call this)."""
    filters = st.session_state.get("_filters")
    if filters is None:
        filters = parse_params(_params_now())
    return filters
