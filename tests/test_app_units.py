"""Plain modules of the dashboard: URL filters, Pareto frontier, formatting, cost-view shaping."""

from __future__ import annotations

import ast
import re
from datetime import datetime, timedelta, timezone

import pandas as pd
import pytest

from app import costviews, filters, fmt, pareto
from app.filters import CUSTOM, Filters, parse_params, parse_time

UTC = timezone.utc
NOW = datetime(2026, 11, 2, 12, 0, 0, tzinfo=UTC)


def test_presets_follow_now_and_anchor_to_end():
    f = parse_params({"range": "6h"}, now=NOW)
    assert (f.start, f.end, f.live) == (NOW - timedelta(hours=6), NOW, True)
    later = f.refreshed(NOW + timedelta(seconds=5))
    assert later.end == NOW + timedelta(seconds=5) and later.seconds == 6 * 3600
    anchored = parse_params({"range": "1h", "end": "2026-11-02T11:00:00Z"}, now=NOW)
    assert anchored.end == datetime(2026, 11, 2, 11, tzinfo=UTC) and not anchored.live
    assert anchored.refreshed(NOW) == anchored
    assert anchored.to_params() == {"range": "1h", "end": "2026-11-02T11:00:00Z"}


def test_custom_range_and_filters_round_trip():
    params = {"range": CUSTOM, "start": "2026-11-02T10:00:00+01:00", "end": "2026-11-02T10:30:00Z",
              "tenant": "acme", "task_type": "chat"}
    f = parse_params(params, now=NOW)
    assert f.start == datetime(2026, 11, 2, 9, tzinfo=UTC)  # the offset is honoured, stored as UTC
    assert f.query_filters() == {"model": "", "tenant": "acme", "task_type": "chat"}
    assert parse_params(f.to_params(), now=NOW) == f
    assert f.to_params()["start"] == "2026-11-02T09:00:00Z"


@pytest.mark.parametrize("params, problem", [
    ({"range": "2w"}, "unknown range"),
    ({"range": CUSTOM, "end": "2026-11-02T10:00:00Z"}, "needs both start"),
    ({"range": CUSTOM, "start": "2026-11-02T11:00:00Z", "end": "2026-11-02T10:00:00Z"}, "is not before"),
    ({"range": "1h", "end": "tomorrow"}, "not an ISO 8601 time"),
])
def test_bad_url_values_fall_back_with_a_reason(params, problem):
    f = parse_params(params, now=NOW)
    assert (f.preset, f.end, f.live) == ("1h", NOW, True)
    assert any(problem in p for p in f.problems)


def test_parse_time_naive_is_utc():
    assert parse_time("2026-11-02T10:00:00") == datetime(2026, 11, 2, 10, tzinfo=UTC)
    with pytest.raises(ValueError, match="ISO 8601"):
        parse_time("10 o'clock")


def test_the_filters_import_no_page_helper():
    # app.ui (the page helpers) reads the filters' presets; the filters must not import it back
    tree = ast.parse(open(filters.__file__).read())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in imported if m and m.startswith("app.") and m != "app.fmt"}, imported


def test_pareto_frontier():
    df = pd.DataFrame({"x": [10, 20, 30, 25, 5, 30, None], "y": [1.0, 2.0, 5.0, 6.0, 0.5, 5.0, 0.1]})
    front = pareto.frontier(df, "x", "y")
    # (25, 6) is dominated by (30, 5); the two (30, 5) ties both stay; the NaN row is ignored
    assert list(zip(front["x"], front["y"])) == [(5, 0.5), (10, 1.0), (20, 2.0), (30, 5.0), (30, 5.0)]
    assert len(pareto.frontier(df.iloc[0:0], "x", "y")) == 0


def test_formatting_with_units():
    assert fmt.seconds(0.4) == "400 ms" and fmt.seconds(2.345) == "2.35 s" and fmt.seconds(0.35, True) == "+350 ms"
    assert fmt.seconds(0.0042) == "4.2 ms" and fmt.seconds(None) == fmt.DASH and fmt.seconds(float("nan")) == fmt.DASH
    assert fmt.pct(0.375) == "37.5 %" and fmt.pct(-0.014, True) == "-1.4 pp"
    assert fmt.usd(1234.5) == "$1,234.50" and fmt.usd(0.0042) == "$0.00420" and fmt.usd(-2, True) == "-$2.00"
    assert fmt.usd(0.25) == "$0.2500" and fmt.usd(0) == "$0.00"
    assert fmt.rate(1356.2, "tasks/h") == "1,356 tasks/h" and fmt.rate(0.0133, "") == "0.01 "
    assert fmt.duration(12.4) == "12 s" and fmt.duration(600) == "10 min" and fmt.duration(7200) == "2.0 h"
    assert fmt.count(3) == "3" and fmt.count(3, signed=True) == "+3" and fmt.count(1.25) == "1.2"


def test_waterfall_goes_from_spend_to_useful():
    waste = pd.DataFrame({"category": ["useful", "retry_waste", "failed_task_waste", "pending", "unattributed",
                                       "idle", "partial"],
                          "usd": [6.0, 1.0, 0.5, 0.0, 0.25, 2.25, 0.3]})
    steps = costviews.waterfall_steps(waste, 10.0)
    assert [s["label"] for s in steps] == ["Total spend", "Idle GPUs", "Unattributed", "Failed-task waste",
                                           "Retry waste", "Useful work"]
    assert sum(s["value"] for s in steps if s["measure"] != "total") == pytest.approx(steps[-1]["value"])
    assert costviews.ratio(2.0, 0.5) == 4.0 and costviews.ratio(1, 0) is None and costviews.ratio(None, 1) is None


def test_waterfall_bars_hang_each_step_from_the_last():
    """Hand-computed: spend $10 -> idle 2.25, unattributed 0.25, failed 0.5, retry 1 -> useful $6."""
    waste = pd.DataFrame({"category": ["useful", "retry_waste", "failed_task_waste", "pending", "unattributed",
                                       "idle", "partial"],
                          "usd": [6.0, 1.0, 0.5, 0.0, 0.25, 2.25, 0.3]})
    bars = costviews.waterfall_bars(costviews.waterfall_steps(waste, 10.0))
    assert list(bars["label"]) == ["Total spend", "Idle GPUs", "Unattributed", "Failed-task waste", "Retry waste",
                                   "Useful work"]
    assert list(bars["lo"]) == pytest.approx([0.0, 7.75, 7.5, 7.0, 6.0, 0.0])
    assert list(bars["hi"]) == pytest.approx([10.0, 10.0, 7.75, 7.5, 7.0, 6.0])
    assert list(bars["level"]) == pytest.approx([10.0, 7.75, 7.5, 7.0, 6.0, 6.0])
    assert list(bars["kind"]) == ["total", "decrease", "decrease", "decrease", "decrease", "total"]
    assert list(bars["text"]) == ["$10.00", "$2.25", "$0.2500", "$0.5000", "$1.00", "$6.00"]
    assert list(bars["next_label"]) == ["Idle GPUs", "Unattributed", "Failed-task waste", "Retry waste",
                                        "Useful work", "Useful work"]
    # a rise (relative > 0) spans the level before and after it; a total is drawn from 0 at its own value
    up = costviews.waterfall_bars([{"label": "a", "value": 5.0, "measure": "absolute"},
                                   {"label": "b", "value": 2.0, "measure": "relative"},
                                   {"label": "c", "value": -3.0, "measure": "relative"},
                                   {"label": "d", "value": 4.5, "measure": "total"}])
    assert list(zip(up["lo"], up["hi"], up["kind"], up["level"])) == [
        (0.0, 5.0, "total", 5.0), (5.0, 7.0, "increase", 7.0), (4.0, 7.0, "decrease", 4.0), (0.0, 4.5, "total", 4.5)]
    spec = costviews.waterfall_chart(up).to_dict()
    assert [layer["mark"]["type"] for layer in spec["layer"]] == ["rule", "bar", "text", "text"]
    assert spec["layer"][1]["encoding"]["color"]["scale"] == {"domain": ["total", "decrease", "increase"],
                                                               "range": ["#1f77b4", "#d62728", "#2ca02c"]}
    assert spec["layer"][1]["encoding"]["x"]["sort"] == ["a", "b", "c", "d"]  # the steps' order, not alphabetical


def test_series_bucket_is_whole_hours_for_wide_ranges():
    from app.charts import series_bucket

    assert series_bucket(3600) == 60 and series_bucket(6 * 3600) == 300
    assert series_bucket(86400) == 3600 and series_bucket(7 * 86400) == 7200


def test_triangle_auto_window():
    assert costviews.auto_window(3600) == 300 and costviews.auto_window(86400) == 3600
    assert costviews.auto_window(7 * 86400) == 21600 and costviews.auto_window(365 * 86400) == 86400


def test_quality_problems_are_sentences():
    dq = pd.DataFrame({"replica": ["r1", "r2"], "token_gap_ratio": [0.2, 0.01], "default_priced_minutes": [0, 3],
                       "unpriced_minutes": [0, 0], "gateway_evidence_calls": [2, 0], "client_evidence_calls": [0, 0]})
    problems = costviews.quality_problems(dq)
    assert any("r1" in p and "20%" in p for p in problems)
    assert any("r2" in p and "default GPU price for 3 minutes" in p for p in problems)
    assert any("r1: 2 calls have no engine span" in p for p in problems)
    assert len(problems) == 3


def test_calls_on_no_replica_are_named_so():
    """Client-only calls (a refused connection, a 500 before the engine) have no replica: the sentence
    says so instead of starting with an empty name."""
    dq = pd.DataFrame({"replica": [""], "token_gap_ratio": [None], "default_priced_minutes": [0],
                       "unpriced_minutes": [0], "gateway_evidence_calls": [0], "client_evidence_calls": [3]})
    assert costviews.quality_problems(dq) == [
        "3 calls have only a client span (no engine or gateway span names a replica): refused, answered with an "
        "error before the engine, or cut with their engine span lost."]


def test_chart_selection_times_are_utc_instants():
    """The zoom selection: Vega gives epoch ms of the true instant."""
    from datetime import datetime, timezone

    from app.ui import from_viewer

    ms = datetime(2026, 12, 1, 0, 35, tzinfo=timezone.utc).timestamp() * 1000
    assert from_viewer(ms) == datetime(2026, 12, 1, 0, 35, tzinfo=timezone.utc)
    assert from_viewer("2026-12-01T00:35:00Z") == datetime(2026, 12, 1, 0, 35, tzinfo=timezone.utc)


def test_time_axes_use_a_24_hour_clock():
    """Axis labels were a 12-hour clock without AM/PM."""
    import pandas as pd

    from app.charts import time_format

    day = pd.date_range("2026-12-01 00:00", periods=24, freq="h")
    assert time_format(day) == "%H:%M"
    assert time_format(pd.date_range("2026-12-01", periods=8, freq="D")) == "%m-%d %H:%M"
    assert "%I" not in time_format(day) and "%p" not in time_format(day)
    # the alert page's cascade timeline too (it had Vega's default: 19:22 read "07:22" beside the text's 19:22)
    from app.alert_views import timeline_chart

    minutes = pd.date_range("2026-12-04 19:10", periods=40, freq="min")
    latency = pd.DataFrame({"bucket": list(minutes) * 2, "replica": ["replica-1"] * 40 + ["replica-2"] * 40,
                            "ttft_p50_s": [0.1] * 80})
    links = [{"started_at": minutes[12], "step": "trigger", "replica": "replica-2", "rule": "replica_degradation"}]
    spec = timeline_chart(latency, links, "replica-2").to_dict()
    assert spec["layer"][0]["encoding"]["x"]["axis"]["format"] == "%H:%M"


def test_charts_build_without_shorthand_parsing_and_invalid_specs_still_raise(monkeypatch):
    """Every shorthand string in an encoding went through Altair's ``from_dict``, which
    rebuilt a hash table of all its schema classes each time (~6 ms; 36 a live-page load). The shared
    builders pass channel objects; the spec is the same. Altair's per-object checks are off in the
    dashboard (app.ui), but a drawn spec is still validated whole."""
    import altair as alt
    from altair.utils import schemapi

    from app import charts, engine_view, ui  # noqa: F401 - ui turns Altair's per-object checks off

    built = []
    original = schemapi._FromDict.__init__
    monkeypatch.setattr(schemapi._FromDict, "__init__", lambda self, *a, **k: (built.append(1), original(self, *a, **k))[1])
    t = pd.date_range("2026-12-01 00:00", periods=3, freq="h")
    df = pd.DataFrame({"bucket": list(t) * 2, "replica": ["r1"] * 3 + ["r2"] * 3, "p95": [1.0, 2, 3, 4, 5, 6]})
    notes = pd.DataFrame({"start": [t[0]], "end": [t[1]], "label": ["ttft_slo"]})
    hist = pd.DataFrame({"bucket": t, "le": [0.1, 0.5, float("inf")], "requests": [3, 2, 1], "phase": ["queue"] * 3})
    specs = [c.to_dict() for c in (
        charts.with_annotations(charts.lines(df, "bucket", {"p95": "p95"}, "s"), notes),
        charts.with_annotations(charts.by_group(df, "bucket", "p95", "replica", "s"), notes),
        costviews.stacked_categories(pd.DataFrame({"grp": ["a"], "category": ["useful"], "usd": [1.0]}), "tenant"),
        engine_view.heatmap(hist, "TTFT"), engine_view.distribution(hist))]
    assert built == []
    band, rule, line = specs[0]["layer"]
    assert band["encoding"]["x"] == {"field": "start", "type": "temporal"}
    assert band["encoding"]["x2"] == {"field": "end"}
    assert rule["encoding"]["x"] == {"field": "start", "type": "temporal"}
    assert line["encoding"]["tooltip"][1] == {"field": "series", "type": "nominal"}
    assert specs[1]["layer"][2]["encoding"]["tooltip"][1] == {"field": "replica", "type": "nominal"}
    assert specs[4]["encoding"]["xOffset"] == {"field": "phase", "type": "nominal"}
    # by_group sends only the three columns it draws
    group_data = specs[1]["datasets"][specs[1]["layer"][2]["data"]["name"]]
    assert [sorted(r) for r in group_data] == [["bucket", "p95", "replica"]] * 6
    assert schemapi.DEBUG_MODE is False
    bad = alt.Chart(df).mark_line().encode(x=alt.X("bucket:T", axis=alt.Axis(format=5)))
    with pytest.raises(schemapi.SchemaValidationError):
        bad.to_dict()
    with pytest.raises(schemapi.SchemaValidationError):  # what INFERCOST_VALIDATE_CHARTS=1 draws with
        ui.vega_lite_spec(bad, validate=True)
    # unvalidated (the default when drawing), the same dict as Streamlit's own conversion, data as Arrow bytes
    good = charts.by_group(df, "bucket", "p95", "replica", "s")
    fast, checked = ui.vega_lite_spec(good), ui.vega_lite_spec(good, validate=True)
    assert fast == checked and ui.VALIDATE_CHARTS is False
    assert fast["usermeta"] == {"embedOptions": {"renderer": "canvas"}}
    assert [type(v) for v in fast["datasets"].values()] == [bytes]
    from streamlit.elements.vega_charts import _convert_altair_to_vega_lite_spec

    theirs = _convert_altair_to_vega_lite_spec(good.properties(usermeta={"embedOptions": {"renderer": "canvas"}},
                                                               autosize={"type": "fit-x", "contains": "padding"}))
    assert fast == theirs
    # the height asked for is the plot's (Streamlit's default "fit" made it the whole chart's, legend included)
    assert fast["autosize"] == {"type": "fit-x", "contains": "padding"} and fast["height"] == 220


def test_a_chart_is_built_once_per_data_and_rebuilt_when_the_data_changes(monkeypatch):
    """The live page reruns every 5 s, and its queries' results change once a minute; the
    Altair objects of its charts were rebuilt and converted on every rerun (~60 % of the script's CPU with
    the queries cached). ``ui.cached_chart`` keeps each chart's Vega-Lite dict per builder and data: an
    equal frame (a new object, as a cached query returns) builds nothing, a changed value builds again, and
    the dict is the one :func:`app.ui.vega_lite_spec` makes of the builder's chart."""
    import pyarrow as pa

    from app import charts, ui

    ui._cached_spec.clear()
    real, built = charts.lines_annotated, []
    monkeypatch.setattr(charts, "lines_annotated", lambda *a: (built.append(a), real(*a))[1])
    t = pd.date_range("2026-12-03 06:00", periods=3, freq="min")
    fleet = pd.DataFrame({"bucket": t, "ttft_p50_ms": [80.0, 95.0, None], "ttft_p95_ms": [120.0, 180.0, 240.0]})
    notes = pd.DataFrame({"start": [t[1]], "end": [t[2]], "label": ["ttft_slo"]})
    series = {"ttft_p50_ms": "p50", "ttft_p95_ms": "p95"}
    ui.cached_chart("app.charts:lines_annotated", (fleet, "bucket", series, "ms", notes))
    ui.cached_chart("app.charts:lines_annotated", (fleet.copy(), "bucket", dict(series), "ms", notes.copy()))
    assert len(built) == 1
    spec = ui._cached_spec("app.charts:lines_annotated", (fleet, "bucket", series, "ms", notes), False)
    assert spec == ui.vega_lite_spec(real(fleet, "bucket", series, "ms", notes))
    line = spec["layer"][2]
    rows = pa.ipc.open_stream(spec["datasets"][line["data"]["name"]]).read_all().to_pylist()
    # melted, the missing p50 dropped: 5 points
    assert [(r["series"], r["value"]) for r in rows] == [("p50", 80.0), ("p50", 95.0), ("p95", 120.0),
                                                         ("p95", 180.0), ("p95", 240.0)]
    ui.cached_chart("app.charts:lines_annotated",
                    (fleet.assign(ttft_p95_ms=[120.0, 180.0, 250.0]), "bucket", series, "ms", notes))
    ui.cached_chart("app.charts:lines_annotated", (fleet, "bucket", series, "ms", None))  # alert resolved: no band
    assert len(built) == 3


def test_the_triangle_keeps_its_edge_points_and_labels_inside_the_chart():
    """A demo store's 7-day triangle: replica-2's current point can sit at the top of the y domain
    (TTFT p99 6.40 s, domain 0-6.5) and replicas 0 and 1 at the right end of x (217.8 tok/s, domain 0-220):
    without room, circles are cut in half and labels cut off. So both scales keep 24 px free at their top ends and start at 0,
    and a current point's label in the right quarter of the x range goes left of it."""
    from app import costviews

    pts = pd.DataFrame({"replica": ["r0", "r1", "r2"], "window_start": pd.to_datetime(["2026-12-03 00:00"] * 3),
                        "output_tokens_per_s": [10.0, 50.0, 90.0], "ttft_p99_s": [0.2, 6.4, 4.0],
                        "cpst_usd": [0.1, 0.2, 0.3], "running": [0.5, 1.0, 1.5], "point": ["current (latest window)"] * 3})
    spec = costviews.triangle_chart(pts, pts.iloc[[0, 2]], "output_tokens_per_s", "ttft_p99_s", "output tokens/s",
                                    "TTFT p99 (s)").to_dict()
    for layer in spec["layer"]:
        for channel in ("x", "y"):
            assert layer["encoding"][channel]["scale"] == {"padding": 24, "domainMin": 0}
    texts = [layer for layer in spec["layer"] if layer["mark"]["type"] == "text"]
    assert [(t["mark"]["align"], t["mark"]["dx"]) for t in texts] == [("left", 12), ("right", -12)]
    # the flip at 10 + 0.75 x (90 - 10) = 70 tok/s: r2 (90) labelled on its left, r0 and r1 on their right
    assert [t["transform"][0]["filter"] for t in texts] == ["(!(datum['output_tokens_per_s'] > 70.0))",
                                                            "(datum['output_tokens_per_s'] > 70.0)"]
    assert all(t["encoding"]["text"] == {"field": "label", "type": "nominal"} for t in texts)


def test_current_points_close_together_share_one_label():
    """A fresh demo's triangle at 24 h: its four replicas' current windows (the light live
    hour) sat within a few tok/s of 0 and drew four names on top of each other. Points within 10 % of the x
    span and 4 % of the y span of a labelled one join its label (two names, then +N)."""
    from app import costviews

    cur = pd.DataFrame({"replica": ["r0", "r1", "r2", "r3", "r4"], "x": [10.0, 12.0, 11.0, 13.0, 90.0],
                        "y": [0.20, 0.21, 0.20, 0.30, 4.0]})
    # spans 80 tok/s and 6.2 s: near = 8 tok/s and 0.248 s; in the order of x: r0 anchors r2, r1, r3; r4 alone
    assert costviews.triangle_labels(cur, "x", "y", 80.0, 6.2) == ["r0, r2 +2", "", "", "", "r4"]
    # a tighter y: r3 (0.10 s above r0) is no longer near r0 and gets its own label
    assert costviews.triangle_labels(cur, "x", "y", 80.0, 2.0) == ["r0, r2 +1", "", "", "r3", "r4"]


def test_every_group_bar_gets_a_band_and_a_label():
    """The cost page's "By task type" bars (demo store: 4 groups, two labels shown): a fixed height was
    squeezed with the axes and legend into the container and Vega hid the labels of the thin bands.
    Each group now gets a 36 px band and every label is drawn."""
    long = pd.DataFrame({"grp": ["copilot", "research_agent", "chat", "(none)"], "category": ["useful"] * 4,
                         "usd": [940.0, 855.0, 127.0, 1.0]})
    spec = costviews.stacked_categories(long, "task_type").to_dict()
    assert spec["height"] == {"step": 36}
    assert spec["encoding"]["y"]["axis"]["labelOverlap"] is False
    assert spec["encoding"]["y"]["axis"]["labelLimit"] >= 200


def test_a_delta_that_shows_as_no_change_is_grey_and_without_arrow():
    from app import ui

    # a KV-cache use of 37.51 % after 37.50 %: +0.01 pp shows as "+0.0 pp", which is not a rise
    assert ui.metric_delta(0.3751 - 0.3750, fmt.pct) == {"delta": "+0.0 pp", "delta_color": "off", "delta_arrow": "off"}
    assert ui.metric_delta(-0.0001, fmt.pct) == {"delta": "-0.0 pp", "delta_color": "off", "delta_arrow": "off"}
    assert ui.metric_delta(0.0, fmt.seconds) == {"delta": "0.0 ms", "delta_color": "off", "delta_arrow": "off"}
    # a real change keeps its colour: up is bad for a latency, good for goodput
    assert ui.metric_delta(0.061, fmt.seconds) == {"delta": "+61 ms", "delta_color": "inverse"}
    assert ui.metric_delta(0.05, fmt.pct, lower_better=False) == {"delta": "+5.0 pp", "delta_color": "normal"}
    assert ui.metric_delta(-0.02, fmt.usd) == {"delta": "-$0.0200", "delta_color": "inverse"}
    # no comparison: no delta at all
    assert ui.metric_delta(None, fmt.pct) == {} and ui.metric_delta(float("nan"), fmt.pct) == {}


@pytest.mark.parametrize("text", [
    "r3 ![t](http://127.0.0.1:9/x.png) [docs](https://example.com) <img src=x> **b** _i_ ~~s~~ `c` $x$ &amp; a|b",
    "- a list", "+ a list", "1. a list", "12) a list", "---", "# a heading", "> a quote",
    "www.example.com, ops@example.com, HTTP://EXAMPLE.COM", ":material/paid: :smile: :red[x] :blue-badge[y]",
    "two\nlines\r\n= underline",
])
def test_md_escape_renders_as_the_text_itself(text):
    """Every telemetry or URL string a page puts into Markdown (app.fmt.md_escape) renders as that very
    text: no link, image, HTML, emphasis, code, list, heading, quote or rule (CommonMark here; the
    autolinks and Streamlit's directives, found in the text after the escapes, get a word joiner, and
    tests/test_app_browser.py checks them in Chromium)."""
    from html import escape

    from markdown_it import MarkdownIt

    html = MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(fmt.md_escape(text)).strip()
    shown = text.replace("\r", " ").replace("\n", " ")
    assert html == f"<p>{escape(fmt._plain(shown), quote=False)}</p>", html
    assert html.replace(fmt.WORD_JOINER, "") == f"<p>{escape(shown, quote=False)}</p>"
    # nothing left for GFM's autolink patterns (www., http(s)://, user@host) or Streamlit's directives
    assert not re.search(r"(?i)www\.|https?://|[\w.+-]@|:[a-z][\w+-]*[:\[/]", html), html


def test_md_escape_keeps_figures_readable_and_md_code_holds_any_id():
    from markdown_it import MarkdownIt

    assert [fmt.md_escape(v) for v in ("-4.0 %", "+12.3 %", "1.5 s", "2026-W48", "12:00:00")] == [
        "-4.0 %", "+12.3 %", "1.5 s", "2026-W48", "12:00:00"]
    assert fmt.md_escape("$0.0042") == "\\$0.0042"
    md = MarkdownIt("commonmark")
    for value in ("a1b2c3", "x`y", "``a``", "`"):
        assert md.renderInline(fmt.md_code(value)) == f"<code>{value}</code>", value
