"""Every dashboard page rendered with streamlit.testing's AppTest over a seeded store.

The numbers displayed must equal the named queries' own (formatted by app/fmt.py): the live page
over the hand-checkable tiny scenario, every page over the generated scenario, the cost pages against
``schema.queries.cost``.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from streamlit.testing.v1 import AppTest

from app import fmt, store_provider
from conftest import drop_store, new_store
from dashboard_seed import costed_store, seed_alerts, stop_periodic_jobs, tiny_scenario

MAIN = str(Path(__file__).resolve().parents[1] / "app" / "main.py")
TINY_RANGE = {"range": "custom", "start": "2026-11-02T10:00:00Z", "end": "2026-11-02T10:05:00Z"}
BIG_RANGE = {"range": "1h", "end": "2026-11-02T11:00:00Z"}


def _app(params: dict, page: str | None = None) -> AppTest:
    at = AppTest.from_file(MAIN, default_timeout=60)
    at.query_params.update(params)
    if page:  # url paths equal the file names, so a page can be selected before the first run
        at.switch_page(page)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _metrics(at: AppTest) -> dict[str, tuple[str, str | None]]:
    return {m.label: (m.value, m.delta) for m in at.metric}


@pytest.fixture(scope="module")
def tiny_store():
    store = new_store()  # migrating costs seconds: one tiny store for the module, read-only below
    stop_periodic_jobs(store)
    tiny_scenario(store)
    yield store
    drop_store(store)


@pytest.fixture
def tiny_app(tiny_store):
    store_provider.set_store(tiny_store)
    yield tiny_store
    store_provider.clear()


@pytest.fixture(scope="module")
def big():
    store, seeded = costed_store(tasks=600)
    assert seed_alerts(store, seeded)
    store_provider.set_store(store)
    yield store, seeded
    store_provider.clear()
    drop_store(store)


def test_an_empty_window_of_a_store_with_spans_says_where_the_data_is_not_no_spans_yet(tiny_app):
    # the tiny scenario's spans are at 10:00-10:05 on 2026-11-02; an hour the day before holds none
    at = _app({"range": "custom", "start": "2026-11-01T10:00:00Z", "end": "2026-11-01T11:00:00Z"})
    boxes = [i.value for i in at.info]
    assert any(b.startswith("No engine request finished in the last 5 min.") for b in boxes), boxes
    # the newest span is older than a day: the hint says so (IngestStatus.last_span is of the last 24 h)
    assert any("Widen the tile window or the time range: nothing arrived in the last 24 h." in b for b in boxes), boxes
    assert any(b.startswith("No replica reported in this window.") for b in boxes), boxes
    assert not any("No spans yet" in b for b in boxes), boxes


def test_live_page_shows_the_hand_computed_tiles(tiny_app):
    at = _app(TINY_RANGE)
    assert at.title[0].value == "Live operations"
    m = _metrics(at)
    assert m["TTFT p50"] == ("400 ms", "+350 ms")
    assert m["TTFT p95"][0] == "800 ms" and m["TTFT p99"][0] == "800 ms"
    assert m["ITL p95"][0] == "260 ms"
    assert m["Error rate"][0] == "40.0 %" and m["Retry ratio"][0] == "40.0 %"
    assert m["Queue (req)"] == ("4", "+3")
    assert m["Running (req)"][0] == "3" and not m["Running (req)"][1]  # no running gauge before: no delta
    assert m["KV-cache use"][0] == "37.5 %"
    assert m["Goodput/h"][0] == "12.0"
    assert m["Requests/s"][0] == "0.01"
    # the degraded replica is called out, and every table can be downloaded
    assert any("r2" in w.value and "error rate 67%" in w.value for w in at.warning)
    assert len(at.get("download_button")) >= 2
    # the filters are in the URL (shareable)
    assert at.query_params["range"] == "custom" and at.query_params["start"] == "2026-11-02T10:00:00Z"


def test_live_page_filters_from_the_url(tiny_app):
    at = _app(dict(TINY_RANGE, tenant="globex"))
    m = _metrics(at)
    assert m["TTFT p50"][0] == fmt.DASH  # no globex traffic: a dash, not zero
    assert at.query_params["tenant"] == "globex"
    assert at.sidebar.selectbox(key="f_tenant").value == "globex"


def test_empty_store_says_what_to_do(store):
    store_provider.set_store(store, otlp_endpoint="http://127.0.0.1:4318/v1/traces")
    try:
        at = _app(TINY_RANGE)
        text = " ".join(i.value for i in at.info)
        assert "--otlp-traces-endpoint" in text and "http://127.0.0.1:4318/v1/traces" in text
    finally:
        store_provider.clear()


def test_bad_url_parameters_are_reported_not_fatal(tiny_app):
    at = _app({"range": "custom", "start": "yesterday", "end": "2026-11-02T10:05:00Z"})
    assert any("not an ISO 8601 time" in w.value for w in at.sidebar.warning)
    assert at.query_params["range"] == "1h"


def test_every_page_renders_over_the_generated_store(big):
    at = _app(BIG_RANGE)
    for page in ("views/cost.py", "views/triangle.py", "views/tasks.py", "views/alerts.py", "views/weekly_review.py",
                 "views/live_ops.py"):
        at.switch_page(page).run()
        assert not at.exception, (page, [e.value for e in at.exception])
        assert at.title, page
        assert not at.error, (page, [e.value for e in at.error])


def test_every_vega_chart_is_drawn_on_a_canvas(big):
    """Vega's default SVG renderer made every point, bar and heat-map cell a DOM element
    (~5,500 on the live page at 7 days), which Chromium laid out and painted for seconds. Every Altair
    chart of every page asks for the canvas renderer in its top-level ``usermeta.embedOptions`` (what
    Streamlit's frontend passes to vega-embed); the data and encodings are unchanged."""
    import json

    from altair.utils.schemapi import validate_jsonschema
    from altair.vegalite.v6.schema import core

    schema = core.load_schema()
    from app import engine_view

    # every tab of the live page's two views, each a new session (a hidden tab draws nothing:
    # app.ui.lazy_tabs; a session keeps the tab it opened over the link's)
    live = [{"tab": t} for t in ("Latency", "ITL and end-to-end", "Load and errors")]
    live += [{"view": "engine", "engine_tab": t} for t in engine_view.TABS]
    seen = {}
    for page, params in ([("views/live_ops.py", p) for p in live] + [
            ("views/cost.py", {}), ("views/cost.py", {"by": "Tenant"}), ("views/cost.py", {"by": "Model"}),
            ("views/triangle.py", {}), ("views/tasks.py", {}), ("views/alerts.py", {})]):
        at = _app(BIG_RANGE | params, page=page)
        for chart in at.get("vega_lite_chart"):
            spec = json.loads(chart.proto.spec)
            assert spec.get("usermeta", {}).get("embedOptions", {}).get("renderer") == "canvas", (page, params)
            # the dashboard skips Altair's schema check when it draws (app.ui.VALIDATE_CHARTS): every drawn
            # spec is checked here instead, against the same Vega-Lite schema (raises when invalid)
            validate_jsonschema(spec, schema)
            assert chart.proto.datasets, (page, params)  # the data went as Arrow datasets, not inline JSON
        seen[" ".join([page.split("/")[-1].removesuffix(".py")] + list(params.values()))] = len(at.get("vega_lite_chart"))
    # the live page's tabs draw 2, 2 and 4 charts; the engine view's first 3 (this store has gauges, no
    # engine counters or histograms); the cost page 3 (the waterfall, the open breakdown tab's, the open trend tab's);
    # the triangle its frontier; tasks and alerts none until a row is selected
    assert seen == {
        "live_ops Latency": 2, "live_ops ITL and end-to-end": 2, "live_ops Load and errors": 4,
        "live_ops engine Batch and KV-cache": 3, "live_ops engine Tokens, prefix cache and preemptions": 0,
        "live_ops engine Latency histograms": 0, "cost": 3, "cost Tenant": 3, "cost Model": 3, "triangle": 1, "tasks": 0, "alerts": 0}, seen


def test_a_hidden_tab_of_the_live_page_runs_no_query(big, monkeypatch):
    """The engine view's counters and histograms (~250 ms each at 7 days on the demo
    store) and the overview's gauge series ran on every load although their tabs were hidden. Only the open
    tab's named queries run (app.ui.lazy_tabs); a link with ``?engine_tab=`` / ``?tab=`` runs that tab's."""
    import streamlit as st

    from schema.queries import ops, ops_engine

    calls = []
    for module, name in ((ops_engine, "engine_counters"), (ops_engine, "latency_histograms"),
                         (ops_engine, "gauge_replica_series"), (ops, "gauge_series"), (ops, "latency_series")):
        def counted(*args, _f=getattr(module, name), _n=name, **kwargs):
            calls.append(_n)
            return _f(*args, **kwargs)
        monkeypatch.setattr(module, name, counted)
    ran = {}
    for params in ({}, {"tab": "Load and errors"}, {"view": "engine"},
                   {"view": "engine", "engine_tab": "Tokens, prefix cache and preemptions"},
                   {"view": "engine", "engine_tab": "Latency histograms"}):
        st.cache_data.clear()
        calls.clear()
        _app(BIG_RANGE | params, page="views/live_ops.py")
        ran[" ".join(params.values()) or "overview"] = sorted(set(calls))
    assert ran == {
        "overview": ["latency_series"], "Load and errors": ["gauge_series", "latency_series"],
        "engine": ["gauge_replica_series"], "engine Tokens, prefix cache and preemptions": ["engine_counters"],
        "engine Latency histograms": ["latency_histograms"]}, ran


def test_the_cost_page_builds_only_the_open_breakdown(big, monkeypatch):
    """The cost page built the chart and table of all three breakdowns (task type, tenant,
    model) on every load, two of them in hidden tabs. Only the open tab's are built (app.ui.lazy_tabs);
    ``?by=Tenant`` opens the tenant's, and each shows the rows of its own dimension."""
    from app import costviews

    built = []
    real = costviews.group_table

    def counted(df, by):
        table = real(df, by)
        built.append((by, len(table)))
        return table
    monkeypatch.setattr(costviews, "group_table", counted)
    shown = {}
    for params in ({}, {"by": "Tenant"}, {"by": "Model"}, {"by": "no such tab"}):
        built.clear()
        _app(BIG_RANGE | params, page="views/cost.py")
        shown[params.get("by", "default")] = [by for by, rows in built if rows]
        assert len(built) == 1, built
    assert shown == {"default": ["task_type"], "Tenant": ["tenant"], "Model": ["model"],
                     "no such tab": ["task_type"]}, shown


def test_the_cost_page_draws_only_the_open_trend(big):
    """The cost page drew its three trend charts (CPST, spend, successful tasks) side by
    side on every load, ~80-90 ms of the browser's time each. They are tabs now (app.ui.lazy_tabs): one
    chart is drawn, the open tab's, from the same one trend query; ``?trend=Spend`` opens the spend's."""
    import json

    drawn = {}
    for params in ({}, {"trend": "Spend"}, {"trend": "Successful tasks"}, {"trend": "no such tab"}):
        at = _app(BIG_RANGE | params, page="views/cost.py")
        titles = []
        for chart in at.get("vega_lite_chart"):
            spec = json.loads(chart.proto.spec)
            y = spec.get("encoding", {}).get("y", {})
            if spec.get("encoding", {}).get("x", {}).get("field") == "bucket_start":  # the trend's time axis
                titles.append(y.get("title"))
        drawn[params.get("trend", "default")] = titles
        labels = [m.body for m in at.markdown if m.body.startswith("**")]
        assert sum(label.endswith(" (USD)**") or label.startswith("**Successful tasks per") for label in labels) == 1
    assert drawn == {"default": ["USD per successful task"], "Spend": ["USD"], "Successful tasks": ["tasks"],
                     "no such tab": ["USD per successful task"]}, drawn


def test_money_and_counts_in_tables_have_thousands_separators(big):
    """A waste row of $1809.2976 read as 1.8 dollars at a glance: every table column in dollars or counts
    formats with a thousands separator (Streamlit's printf ``%,``), on every page that draws tables."""
    import json

    formats = {}
    for page, params in (("views/live_ops.py", {}), ("views/cost.py", {}), ("views/triangle.py", {}),
                         ("views/tasks.py", {}), ("views/alerts.py", {})):
        at = _app(BIG_RANGE | params, page=page)
        for frame in at.dataframe:
            for name, config in json.loads(frame.proto.columns or "{}").items():
                fmt_ = (config.get("type_config") or {}).get("format")
                if isinstance(fmt_, str) and ("$" in fmt_ or fmt_ == "%d" or fmt_.startswith("%,d")):
                    formats[(page, name)] = fmt_
    money = {k: v for k, v in formats.items() if "$" in v}
    assert len(money) >= 10, formats  # the pages above draw at least ten money columns
    assert all("%," in v for v in formats.values()), {k: v for k, v in formats.items() if "%," not in v}


def test_live_page_matches_the_query_on_the_generated_store(big):
    from datetime import timedelta

    from schema.queries import ops

    store, seeded = big
    at = _app(BIG_RANGE)
    end = seeded.end
    t = ops.fleet_tiles(store, end - timedelta(minutes=5), end)
    m = _metrics(at)
    assert m["TTFT p95"][0] == fmt.seconds(t.current.ttft_p95_s)
    assert m["Error rate"][0] == fmt.pct(t.current.error_rate)
    assert m["Goodput/h"][0] == fmt.rate(t.current.goodput_per_h, "").strip()
    health = ops.replica_health(store, end - timedelta(minutes=5), end)
    shown = at.dataframe[0].value
    assert list(shown["replica"]) == list(health["replica"])
    assert list(shown["status"]) == ["degraded" if d else "ok" for d in health["degraded"]]


def test_alerts_page_lists_active_alerts(big):
    at = _app(BIG_RANGE, "views/alerts.py")
    assert at.title[0].value == "Alerts"
    frames = [d.value for d in at.dataframe]
    assert any("replica_latency_outlier" in set(f.get("rule", [])) for f in frames)


def test_cost_pages_show_the_cost_jobs_numbers(big):
    store, seeded = big
    from schema.queries import cost

    at = _app(BIG_RANGE, "views/cost.py")
    s = cost.period_summary(store, seeded.start, seeded.end).iloc[0]
    m = _metrics(at)
    assert m["Cost per successful task"][0] == fmt.usd(s["cpst_usd"])
    assert m["Cost per request (naive)"][0] == fmt.usd(s["cost_per_request_usd"])
    assert m["Cost per 1M tokens (naive)"][0] == fmt.usd(s["cost_per_1m_tokens_usd"])
    assert m["Spend"][0] == fmt.usd(s["spend_usd"])
    assert m["Successful tasks"][0] == fmt.count(s["successful_tasks"])

    at = _app(BIG_RANGE, "views/tasks.py")
    tasks = cost.tasks_table(store, seeded.start, seeded.end, None, 1000)
    shown = at.dataframe[0].value
    assert len(shown) == len(tasks)
    assert shown["cost (USD)"].sum() == pytest.approx(tasks["cost_usd"].sum())

    at = _app(BIG_RANGE, "views/triangle.py")
    windows = cost.replica_windows(store, seeded.start, seeded.end, 300)  # auto window for 1 h = 5 min
    assert len(at.dataframe[0].value) == len(windows)


@pytest.fixture
def worked():
    """The cost model's worked example (schema/jobs/README.md, tests/test_cost_engine.py): spend $0.18, 2 successful tasks."""
    from tests import test_cost_engine as example

    store = new_store()
    stop_periodic_jobs(store)
    example._worked_example(store)
    store_provider.set_store(store)
    yield store
    store_provider.clear()
    drop_store(store)


def test_cost_page_shows_the_worked_example(worked):
    # T0 = 2026-01-05 10:00 UTC, replica up in minutes 0-2 (tests/test_cost_engine.py computes by hand).
    at = _app({"range": "custom", "start": "2026-01-05T10:00:00Z", "end": "2026-01-05T10:03:00Z"}, "views/cost.py")
    m = _metrics(at)
    assert m["Cost per successful task"][0] == "$0.0900"
    assert m["Cost per request (naive)"][0] == "$0.0600"
    assert m["Cost per 1M tokens (naive)"][0] == "$75.00"
    assert m["Attributed CPST (excl. idle)"][0] == "$0.0442"  # allocated $0.0885 / 2 = $0.04425
    assert m["Spend"][0] == "$0.1800"
    assert m["Successful tasks"][0] == "2"
    assert m["Attempts per successful task"][0] == "1.5"
    assert m["Goodput (tasks/h)"][0] == "40.0"
    assert any("1.5x" in i.value for i in at.info)  # CPST / cost per request = 0.09 / 0.06
    waste = at.dataframe[0].value.set_index("category")
    assert waste.loc["idle", "USD"] == pytest.approx(0.0915) and waste.loc["retry_waste", "USD"] == pytest.approx(0.015)

    at = _app({"range": "custom", "start": "2026-01-05T10:00:00Z", "end": "2026-01-05T10:03:00Z", "task": "T2"},
              "views/tasks.py")
    shown = at.dataframe[0].value.set_index("task_id")
    assert shown.loc["T2", "cost (USD)"] == pytest.approx(0.0435) and shown.loc["T2", "waste (USD)"] == pytest.approx(0.015)
    calls = at.dataframe[1].value
    assert sorted(calls["cost_usd"].round(6)) == [0.015, 0.0285]
    assert m and _metrics(at)["Cost"][0] == "$0.0435"


def _later_page(text: str, requests: int, tokens_each: int) -> str:
    """The captured vLLM /metrics page as the same replica would serve it after ``requests`` more requests
    of ``tokens_each`` output tokens, every observation 1 ms (inside each family's lowest bucket): every
    bucket and _count of the TTFT and e2e histograms grows by ``requests``, the ITL histogram's by the
    requests' token gaps, and each _sum by those observations x 0.001 s."""
    import re

    grow = {"time_to_first_token_seconds": requests, "e2e_request_latency_seconds": requests,
            "inter_token_latency_seconds": requests * (tokens_each - 1)}
    out = []
    for line in text.splitlines():
        m = re.match(r"vllm:(\w+?)_(bucket|count|sum)(\{.*\})? (\S+)$", line)
        if m and m.group(1) in grow:
            added = grow[m.group(1)] * (0.001 if m.group(2) == "sum" else 1)
            line = f"vllm:{m.group(1)}_{m.group(2)}{m.group(3) or ''} {float(m.group(4)) + added}"
        out.append(line)
    return "\n".join(out) + "\n"


def test_the_itl_heatmap_counts_token_gaps_not_requests(store):
    """vLLM observes vllm:inter_token_latency_seconds once per gap between two output tokens (vLLM's
    metrics documentation), so the ITL heatmap's cells count token gaps, TTFT's and e2e's requests:
    two scrapes of the captured vLLM 0.32 /metrics page, 3 requests of 5 output tokens (4 gaps each) apart."""
    import json
    import time

    import streamlit as st

    from collectors.ingest import insert_metric_rows
    from collectors.scraper import ScrapeTarget, parse_metrics_text
    from vllm_captured import captured_metrics_text

    # two scrapes 15 s apart inside one minute (the heatmap counts each minute's increase per series)
    minute_ns = (time.time_ns() // 60_000_000_000 - 3) * 60_000_000_000
    target = ScrapeTarget(url="http://replica-1:8000/metrics", replica="replica-1")
    page = captured_metrics_text()
    insert_metric_rows(store, parse_metrics_text(page, target, minute_ns + 10 * 10**9))
    insert_metric_rows(store, parse_metrics_text(_later_page(page, 3, 5), target, minute_ns + 25 * 10**9))
    st.cache_data.clear()
    store_provider.set_store(store)
    try:
        at = _app({"range": "1h", "view": "engine", "engine_tab": "Latency histograms"}, page="views/live_ops.py")
        cells = {}
        for chart in at.get("vega_lite_chart"):
            spec = json.loads(chart.proto.spec)
            if spec.get("mark", {}).get("type") == "rect":
                (rows,) = [pa.ipc.open_stream(d.data.data).read_all().to_pylist() for d in chart.proto.datasets]
                cells[spec["encoding"]["y"]["title"]] = (spec["encoding"]["color"]["title"],
                                                         sum(r["requests"] for r in rows))
    finally:
        store_provider.clear()
        st.cache_data.clear()
    assert cells == {"TTFT bucket": ("requests", 3), "ITL bucket": ("token gaps", 12),
                     "e2e bucket": ("requests", 3)}, cells
