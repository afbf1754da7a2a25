"""Altair chart builders (pure functions of DataFrames; no queries, no Streamlit)."""

from __future__ import annotations

import altair as alt
import pandas as pd

BUCKETS_S = (5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400)


def bucket_for(range_s: float, points: int = 90) -> int:
    """The smallest standard bucket (seconds) giving at most ``points`` buckets over ``range_s``."""
    for b in BUCKETS_S:
        if range_s / b <= points:
            return b
    return BUCKETS_S[-1]


def series_bucket(range_s: float) -> int:
    """The live page's series bucket: :func:`bucket_for`, in whole hours from 12 h ranges up, so
    wide ranges read the hourly pre-aggregation (schema/queries/ops.py, migration 1006)."""
    bucket = bucket_for(range_s)
    if range_s >= 12 * 3600:
        bucket = max(3600, -(-bucket // 3600) * 3600)
    return bucket


def time_format(values) -> str:
    """A 24-hour axis label format for the span of ``values`` (times): '%H:%M' within a day, else the
    date too (Vega's default was a 12-hour clock without AM/PM)."""
    s = pd.to_datetime(pd.Series(values), errors="coerce").dropna()
    if len(s) and (s.max() - s.min()) > pd.Timedelta(days=1):
        return "%m-%d %H:%M"
    if len(s) and (s.max() - s.min()) < pd.Timedelta(minutes=10):
        return "%H:%M:%S"
    return "%H:%M"


def time_x(df: pd.DataFrame, x: str, title: str = "time") -> alt.X:
    return alt.X(f"{x}:T", title=title, axis=alt.Axis(format=time_format(df[x]) if x in df else "%H:%M",
                                                      labelOverlap=True))


LEGEND = alt.Legend(orient="bottom", labelLimit=0, columns=4)  # below the plot: long replica ids never clip
LEGEND_QUANT = alt.Legend(orient="bottom", direction="horizontal", gradientLength=160)


def bucket_text(bucket_s: int) -> str:
    """'30 s', '5 min', '2 h', '1 d' for a bucket length in seconds."""
    if bucket_s % 86400 == 0:
        return f"{bucket_s // 86400} d"
    if bucket_s % 3600 == 0:
        return f"{bucket_s // 3600} h"
    if bucket_s % 60 == 0:
        return f"{bucket_s // 60} min"
    return f"{bucket_s} s"


def with_annotations(chart: alt.Chart, annotations: pd.DataFrame | None) -> alt.Chart:
    """``chart`` with alert annotations layered on: a shaded band from firing to resolution and a red
    rule at the firing time, labelled with the rule (like Grafana's annotations). ``annotations``:
    columns start, end (viewer-zone naive times), label."""
    if annotations is None or not len(annotations):
        return chart
    band = alt.Chart(annotations).mark_rect(opacity=0.06, color="#d62728").encode(
        x=alt.X("start:T"), x2=alt.X2("end:T"), tooltip=[alt.Tooltip("label:N", title="alert"),
                                          alt.Tooltip("start:T", title="fired", format="%Y-%m-%d %H:%M"),
                                          alt.Tooltip("end:T", title="until", format="%Y-%m-%d %H:%M")])
    rule = alt.Chart(annotations).mark_rule(color="#d62728", strokeDash=[4, 2]).encode(x=alt.X("start:T"))
    return alt.layer(band, rule, chart)


def lines(df: pd.DataFrame, x: str, series: dict[str, str], y_title: str, height: int = 220,
          x_title: str = "time") -> alt.Chart:
    """A multi-line chart of ``series`` (column -> legend label) against ``x``."""
    cols = [c for c in series if c in df.columns]
    long = df[[x] + cols].melt(id_vars=[x], var_name="series", value_name="value").dropna(subset=["value"])
    long["series"] = long["series"].map(series)
    return (alt.Chart(long).mark_line(point=alt.OverlayMarkDef(size=12))
            .encode(x=time_x(df, x, x_title),
                    y=alt.Y("value:Q", title=y_title, axis=alt.Axis(format=",.3~r")),
                    color=alt.Color("series:N", title=None, sort=list(series.values()), legend=LEGEND),
                    tooltip=[alt.Tooltip(f"{x}:T", title=x_title, format="%Y-%m-%d %H:%M:%S"),
                             alt.Tooltip("series:N"), alt.Tooltip("value:Q", format=",.3f")])
            .properties(height=height))


def lines_annotated(df: pd.DataFrame, x: str, series: dict[str, str], y_title: str,
                    annotations: pd.DataFrame | None, height: int = 220) -> alt.Chart:
    """:func:`lines` with :func:`with_annotations` (one builder for ``app.ui.cached_chart``)."""
    return with_annotations(lines(df, x, series, y_title, height=height), annotations)


def zoom_lines(df: pd.DataFrame, x: str, series: dict[str, str], y_title: str,
               annotations: pd.DataFrame | None) -> alt.LayerChart:
    """:func:`lines_annotated` with an x-interval selection named ``zoom`` (the live page's drag to zoom),
    always a layer chart: the same spec shape with and without annotations."""
    brush = alt.selection_interval(encodings=["x"], name="zoom")
    layered = with_annotations(lines(df, x, series, y_title).add_params(brush), annotations)
    return layered if isinstance(layered, alt.LayerChart) else alt.layer(layered)


def by_group_annotated(df: pd.DataFrame, x: str, y: str, group: str, y_title: str,
                       annotations: pd.DataFrame | None, height: int = 220) -> alt.Chart:
    """:func:`by_group` with :func:`with_annotations` (one builder for ``app.ui.cached_chart``)."""
    return with_annotations(by_group(df, x, y, group, y_title, height=height), annotations)


def by_group(df: pd.DataFrame, x: str, y: str, group: str, y_title: str, height: int = 220) -> alt.Chart:
    """One line per value of ``group``. Only the three columns drawn go to the browser (the live page's
    per-replica frame has 16 more, serialised to Arrow for each chart and unused)."""
    return (alt.Chart(df[[x, y, group]].dropna(subset=[y])).mark_line(point=alt.OverlayMarkDef(size=12))
            .encode(x=time_x(df, x), y=alt.Y(f"{y}:Q", title=y_title, axis=alt.Axis(format=",.3~r")),
                    color=alt.Color(f"{group}:N", title=group, legend=LEGEND),
                    tooltip=[alt.Tooltip(f"{x}:T", format="%Y-%m-%d %H:%M:%S"), alt.Tooltip(f"{group}:N"),
                             alt.Tooltip(f"{y}:Q", format=",.3f")])
            .properties(height=height))
