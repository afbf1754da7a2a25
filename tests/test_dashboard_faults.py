"""Issue 17's dashboard faults, each with the value it must show (AppTest over a seeded store), and
issue 14 item 7 (what a viewer may see: text not Markdown, errors with ids, the login gate)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app import auth, fmt, store_provider
from conftest import drop_store, new_store
from dashboard_seed import generate, run_cost_jobs, stop_periodic_jobs

MAIN = str(Path(__file__).resolve().parents[1] / "app" / "main.py")
RANGE = {"range": "1h", "end": "2026-11-02T11:00:00Z"}


@pytest.fixture(scope="module")
def seeded():
    store = new_store()
    stop_periodic_jobs(store)
    out = generate(store, tasks=300, hours=1)
    has_cost = run_cost_jobs(store, out.start, out.end)
    store_provider.set_store(store)
    yield store, out, has_cost
    store_provider.clear()
    auth.configure(None)
    drop_store(store)


def _app(params: dict, page: str | None = None, check: bool = True) -> AppTest:
    at = AppTest.from_file(MAIN, default_timeout=90)
    at.query_params.update(params)
    if page:
        at.switch_page(page)
    at.run()
    if check:
        assert not at.exception, [e.value for e in at.exception]
    return at


def _waterfall(at: AppTest):
    """The cost page's waterfall bars (``app.costviews.waterfall_bars`` rows, as the chart's dataset)."""
    import pyarrow as pa

    for chart in at.get("vega_lite_chart"):
        for ds in chart.proto.datasets:
            df = pa.ipc.open_stream(ds.data.data).read_pandas()
            if {"label", "lo", "hi", "kind", "level"} <= set(df.columns):
                return df.reset_index(drop=True)
    raise AssertionError("no waterfall on the page")


def test_fault1_filtered_waterfall_stays_under_the_filter(seeded):
    store, out, has_cost = seeded
    if not has_cost:
        pytest.skip("no cost jobs in this build")
    from schema.queries import cost

    filters = {"task_type": "copilot", "tenant": "acme"}
    at = _app(RANGE | filters, "views/cost.py")
    s = cost.period_summary(store, out.start, out.end, None, filters).iloc[0]
    fleet = cost.period_summary(store, out.start, out.end).iloc[0]
    bars = _waterfall(at)
    labels = list(bars["label"])
    assert labels[0] == "Spend (this view)" and bars["hi"].iloc[0] == pytest.approx(s["spend_usd"])
    assert bars["lo"].iloc[0] == 0 and bars["kind"].iloc[0] == "total"
    assert labels[-1] == "Useful work" and bars["hi"].iloc[-1] == pytest.approx(s["useful_usd"])
    running = s["spend_usd"]
    for _, bar in bars.iloc[1:-1].iterrows():
        assert bar["kind"] == "decrease" and bar["hi"] == pytest.approx(running)  # each step hangs from the last
        running = bar["lo"]
        assert running >= -1e-9  # never below zero
    assert running == pytest.approx(s["useful_usd"])  # the steps add up under the filter
    assert "Idle share" in labels
    # the fleet-level idle is shown apart, labelled as not filtered
    caption = " ".join(c.value for c in at.caption)
    assert f"idle {fmt.usd(fleet['idle_usd'])} of {fmt.usd(fleet['spend_usd'])} spend" in caption
    assert fleet["spend_usd"] > s["spend_usd"]
    assert not at.get("plotly_chart")  # no Plotly bundle for the cost page (issue 18 item 3)


def test_fault8_tasks_drilldown_follows_the_task_id_not_the_row(seeded):
    store, out, has_cost = seeded
    if not has_cost:
        pytest.skip("no cost jobs in this build")
    from schema.queries import cost

    tasks = cost.tasks_table(store, out.start, out.end, None, 1000)
    target = tasks.iloc[len(tasks) // 2]["task_id"]
    at = _app(RANGE | {"task": target}, "views/tasks.py")
    assert at.subheader[0].value.endswith(fmt.md_escape(target))
    # typing a search that hides the task's row must not switch the drill-down to another task
    other_type = "chat" if tasks.iloc[len(tasks) // 2]["task_type"] != "chat" else "copilot"
    at.text_input(key="tasks_search").set_value(other_type).run()
    assert not at.exception
    assert at.subheader[0].value.endswith(fmt.md_escape(target))
    assert at.query_params["task"] in (target, [target])


def test_fault9_live_panels_state_their_window(seeded):
    at = _app({"range": "7d", "end": "2026-11-02T11:00:00Z"})
    subheaders = [s.value for s in at.subheader]
    assert any(s.startswith("Replica health") and "last 5 min" in s for s in subheaders), subheaders
    assert any(s.startswith("Finish reasons") and "last 5 min" in s for s in subheaders), subheaders
    assert any(s.startswith("Latency and load over time") and "whole range" in s for s in subheaders), subheaders


def test_issue14_user_strings_are_text_not_markdown(seeded):
    evil = "[log in again](javascript:alert(1)) ![x](http://198.51.100.1/x.png) <script>alert(1)</script>"
    at = _app(RANGE | {"task": evil}, "views/tasks.py")
    assert at.subheader[0].value == f"Task {fmt.md_escape(evil)}"
    assert "\\[log in again\\]" in at.subheader[0].value and "\\<script\\>" in at.subheader[0].value
    at = _app({"range": "nope[x](http://198.51.100.1)"})
    warnings = " ".join(w.value for w in at.sidebar.warning)
    # escaped, and the URL no longer an autolink (a word joiner after its scheme)
    assert "nope\\[x\\](http:\u2060//198.51.100.1)" in warnings


def test_issue14_a_failing_page_shows_an_error_id_not_a_traceback(seeded, monkeypatch, caplog):
    from schema.queries import cost

    def broken(*args, **kwargs):
        raise RuntimeError("secret http://user:hunter2@db:8123 internals")

    monkeypatch.setattr(cost, "tasks_table", broken)
    at = _app({"range": "1h", "end": "2026-11-02T10:59:00Z"}, "views/tasks.py", check=False)  # not cached
    assert not at.exception
    text = " ".join(e.value for e in at.error)
    assert "Error id" in text and "hunter2" not in text and "internals" not in text
    error_id = text.split("Error id ")[1].split(":")[0]
    assert any(error_id in r.getMessage() and r.exc_info for r in caplog.records)


def test_issue14_token_gate_shows_nothing_before_login(seeded):
    auth.configure(auth.AuthConfig(token="s3cret"))
    try:
        at = _app(RANGE)
        assert [t.value for t in at.title] == ["infercost"] and not at.metric
        at.text_input(key="auth_secret").set_value("wrong")
        at.button[0].click().run()
        assert "Wrong credentials." in [e.value for e in at.error] and not at.metric
        at.text_input(key="auth_secret").set_value("s3cret")
        at.button[0].click().run()
        assert at.title[0].value == "Live operations"
    finally:
        auth.configure(None)


def test_auth_config_checks_headers_in_constant_time_forms():
    import base64

    config = auth.AuthConfig(token="t0k", basic="ann:pw")
    assert config.check_header("Bearer t0k") and not config.check_header("Bearer t0")
    assert config.check_header("bearer t0k") and config.check_header("BEARER  t0k ")  # schemes: any case
    assert not config.check_header("Bearer") and not config.check_header("Bearert0k") and not config.check_header("")
    assert config.check_header("basic " + base64.b64encode(b"ann:pw").decode())
    assert config.check_header("Basic " + base64.b64encode(b"ann:pw").decode())
    assert not config.check_header("Basic " + base64.b64encode(b"ann:px").decode())
    assert config.check_form("", "t0k") and config.check_form("ann", "pw") and not config.check_form("bob", "pw")
