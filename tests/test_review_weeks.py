"""The weekly review over two simulated weeks (emulator in virtual time -> OTLP ingest -> cost jobs).

Week 2026-W48 has a GPU price change ($2.00 -> $2.50 per GPU-hour), a replica crash, a burst of
429s and an alert; 2026-W47 is quiet (see tests/review_scenario.py). Every figure of the report is
checked against the cost job's named queries for the same week, the week-over-week changes and the
driver decomposition against hand computation, both renderings for the same figures, and the HTML
in headless Chromium with the network cut off.
"""

from __future__ import annotations

from app.fmt import md_escape

import math
import shutil
import sys
from html import escape
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import review_scenario as sc  # noqa: E402
from app.review import build_review, fmt, render_html, render_markdown, write_report  # noqa: E402
from app.review.sections import Kpis, Table, build_sections  # noqa: E402
from app.review.weeks import parse_week  # noqa: E402
from conftest import drop_store, new_store  # noqa: E402
from schema.queries import alerts, cost  # noqa: E402

W48, W47 = parse_week("2026-W48"), parse_week("2026-W47")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
BROWSER_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run", "--disable-quic"]


@pytest.fixture(scope="module")
def scenario():
    store = new_store()
    info = sc.build(store)
    review = build_review(store, W48, now=sc.NOW)
    yield store, review, info
    drop_store(store)


def _same(a, b) -> bool:
    """Equal figures: both missing (None/NaN), or equal to float rounding of the same query."""
    missing = lambda x: x is None or (isinstance(x, float) and math.isnan(x))  # noqa: E731
    if missing(a) or missing(b):
        return missing(a) and missing(b)
    return math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=1e-12)


def test_scenario_has_what_the_review_must_explain(scenario):
    store, review, info = scenario
    assert info["week1"]["summary"].tasks["success"] > 0
    week2 = info["week2"]["summary"]
    assert week2.tasks["failure"] + week2.tasks["abandoned"] > 0  # the incident failed tasks
    assert not review.empty


def test_headline_equals_period_summary(scenario):
    store, review, _ = scenario
    h = review.headline
    for week, side in ((W48, "this"), (W47, "last")):
        row = cost.period_summary(store, week.start, week.end).iloc[0]
        pairs = {
            "cpst_usd": h.cpst_usd, "attributed_cpst_usd": h.attributed_cpst_usd, "spend_usd": h.spend_usd,
            "idle_usd": h.idle_usd, "tasks": h.tasks, "successful_tasks": h.successful_tasks,
            "requests": h.requests, "tokens": h.tokens,
            "cost_per_request_usd": h.cost_per_request_usd, "cost_per_1m_tokens_usd": h.cost_per_1m_tokens_usd,
        }
        for column, figure in pairs.items():
            assert _same(getattr(figure, side), row[column]), (week.label, column)
        # Goodput per hour WITH DATA (each week is one 20-minute slice = 1 hour), not per 168 h.
        cov = review.coverage if side == "this" else review.coverage_last
        assert cov.hours_with_data == 1 and cov.partial and not cov.in_progress
        assert _same(getattr(h.goodput_per_hour, side), row["slo_met_tasks"] / 1.0)
        assert _same(getattr(h.slo_attainment, side), row["slo_met_tasks"] / row["successful_tasks"])
    # WoW, by hand from the two summaries
    t = cost.period_summary(store, W48.start, W48.end).iloc[0]
    last = cost.period_summary(store, W47.start, W47.end).iloc[0]
    assert h.cpst_usd.wow == pytest.approx((t["cpst_usd"] - last["cpst_usd"]) / last["cpst_usd"], rel=1e-12)
    assert h.spend_usd.wow == pytest.approx(t["spend_usd"] / last["spend_usd"] - 1, rel=1e-9)
    assert h.cpst_usd.this == pytest.approx(t["spend_usd"] / t["successful_tasks"], rel=1e-12)


def test_segments_waste_tasks_daily_and_incidents_equal_the_named_queries(scenario):
    store, review, _ = scenario
    for dim, rows in review.segments.items():
        this = {r["grp"]: r for r in cost.period_summary(store, W48.start, W48.end, by=dim).to_dict("records")}
        last = {r["grp"]: r for r in cost.period_summary(store, W47.start, W47.end, by=dim).to_dict("records")}
        assert rows, dim
        for row in rows:
            for side, source in (("this", this), ("last", last)):
                src = source.get(row.key)
                if src is None:
                    assert getattr(row.cost_usd, side) is None
                    continue
                assert _same(getattr(row.cpst_usd, side), src["cpst_usd"]), (dim, row.key)
                assert _same(getattr(row.cost_usd, side), src["spend_usd"]), (dim, row.key)
                assert _same(getattr(row.successful_tasks, side), src["successful_tasks"]), (dim, row.key)
    waste = {r["category"]: r for r in cost.waste_breakdown(store, W48.start, W48.end).to_dict("records")}
    for w in review.waste:
        src = waste["partial" if w.category == "partial_streams" else w.category]
        assert _same(w.usd, src["usd"]) and _same(w.share_of_spend, src["share_of_spend"]), w.category
    assert {w.category for w in review.waste} >= {"retry_waste", "failed_task_waste", "partial_streams",
                                                  "unattributed", "idle"}
    # the 10 most expensive tasks: the cost job's tasks table, sorted by cost
    all_tasks = cost.tasks_table(store, W48.start, W48.end, limit=100_000)
    expected = all_tasks.sort_values(["cost_usd", "task_id"], ascending=[False, True]).head(10)
    assert [t.task_id for t in review.top_tasks] == list(expected["task_id"])
    assert [t.cost_usd for t in review.top_tasks] == pytest.approx(list(expected["cost_usd"]), rel=1e-12)
    failed = all_tasks[all_tasks["outcome"].isin(["failure", "abandoned"])]
    assert len(failed) > 0
    assert [t.task_id for t in review.top_failed_tasks] == list(
        failed.sort_values(["cost_usd", "task_id"], ascending=[False, True]).head(10)["task_id"])
    # the daily trend
    trend = cost.cpst_trend(store, W48.start, W48.end, 86400)
    by_day = {r["bucket_start"].date(): r for r in trend.to_dict("records")}
    for point in review.daily_this:
        src = by_day.get(point.day)
        assert _same(point.spend_usd, src["spend_usd"] if src else 0.0)
        assert _same(point.cpst_usd, src["cpst_usd"] if src else None)
    # the incident: the alerts' own query, and what the scenario recorded
    incidents = alerts.alerts_in_period(store, W48.start, W48.end, now=W48.end)
    assert len(review.incidents) == len(incidents) == 1
    incident = review.incidents[0]
    assert incident.rule == sc.INCIDENT["rule"] and incident.replica == "r1"
    assert incident.duration_s == pytest.approx(420.0) and incident.cost_usd == pytest.approx(0.42)
    assert incident.started_at == sc.INCIDENT["started"] and incident.resolved_at == sc.INCIDENT["resolved"]


def test_drivers_explain_the_change_and_see_the_price_change(scenario):
    store, review, _ = scenario
    fleet = next(m for m in review.movers if m.dimension == "fleet")
    total = sum(d.contribution_usd for d in fleet.drivers) + fleet.residual_usd
    assert total == pytest.approx(review.headline.cpst_usd.delta, rel=1e-9)
    price = next(d for d in fleet.drivers if d.name == "price")
    # fleet.yaml: H100 $2.00/GPU-hour in W47, $2.50 from Monday 2026-11-23 (every replica is one H100)
    assert price.last == pytest.approx(sc.PRICE_W47, rel=1e-9) and price.this == pytest.approx(sc.PRICE_W48, rel=1e-9)
    v1, v0 = review.headline.cpst_usd.this, review.headline.cpst_usd.last
    assert price.contribution_usd == pytest.approx((v1 - v0) / math.log(v1 / v0) * math.log(2.5 / 2.0), rel=1e-9)
    movers = [m for m in review.movers if m.dimension != "fleet"]
    assert movers
    for m in movers:
        assert sum(d.contribution_usd for d in m.drivers) + m.residual_usd == pytest.approx(m.cost_usd.delta, abs=1e-9)
    # sorted by the size of the cost change
    changes = [abs(m.cost_usd.delta) for m in movers]
    assert changes == sorted(changes, reverse=True)
    levers = {lv.move: lv for lv in review.levers}
    assert set(levers) == {"avoid", "share", "move", "delay"}
    assert levers["avoid"].measured is not None and 0 <= levers["avoid"].measured <= 1


def test_markdown_and_html_carry_the_same_figures(scenario, tmp_path):
    store, review, _ = scenario
    html_path, md_path = write_report(store, W48, tmp_path, review=review)
    html, md = html_path.read_text(), md_path.read_text()
    assert html == render_html(review) and md == render_markdown(review)
    cells = 0
    for section in build_sections(review):
        for block in section.blocks:
            if isinstance(block, Table):
                for row in block.rows:
                    for cell in row:
                        for line in cell.split("\n"):
                            assert escape(line) in html, line
                            assert md_escape(line) in md, line
                            cells += 1
            elif isinstance(block, Kpis):
                for k in block.items:
                    assert escape(k.value) in html and f"**{md_escape(k.value)}**" in md
    assert cells > 100
    # the Markdown renders (GitHub-flavoured tables) to the same cells, row for row
    from markdown_it import MarkdownIt

    rendered = MarkdownIt("commonmark").enable("table").render(md)
    tables = [b for s in build_sections(review) for b in s.blocks if isinstance(b, Table)]
    kpi_tables = sum(1 for s in build_sections(review) for b in s.blocks if isinstance(b, Kpis))
    assert rendered.count("<table>") == len(tables) + kpi_tables
    import re
    from html import unescape

    rendered_cells = [unescape(c.replace("<br>", "\n")) for c in re.findall(r"<td[^>]*>(.*?)</td>", rendered, re.S)]
    expected_cells = [c for t in tables for row in t.rows for c in row]
    kpi_cells = len(rendered_cells) - len(expected_cells)
    assert rendered_cells[kpi_cells:] == expected_cells  # every table cell, in order (KPI tiles come first)
    h = review.headline
    for text in (fmt.usd(h.cpst_usd.this), fmt.wow(h.cpst_usd.wow), fmt.usd(h.spend_usd.this),
                 fmt.count(h.successful_tasks.this), fmt.pct(h.slo_attainment.this)):
        assert md_escape(text) in md and escape(text) in html
    # self-contained: no script, no external resource
    assert "<script" not in html and "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in html and html.count("<svg") >= 3


def test_cli_writes_the_report_of_the_store(scenario, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from infercost.cli import main

    store, review, _ = scenario
    # chdb://memory in this process is the same engine the fixture's store lives in
    monkeypatch.setenv("INFERCOST_CLICKHOUSE_URL", "chdb://memory")
    monkeypatch.setenv("INFERCOST_DATABASE", store.database)
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    received = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self):
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("INFERCOST_REVIEW_WEBHOOK_URL", f"http://127.0.0.1:{server.server_address[1]}/hook")
    try:
        result = CliRunner().invoke(main, ["review", "--week", "2026-W48", "--out", str(tmp_path)])
    finally:
        server.shutdown()
    assert result.exit_code == 0, result.output
    assert "delivered to webhook: ok" in result.output
    assert received[0]["week"] == "2026-W48" and fmt.usd(review.headline.cpst_usd.this) in received[0]["text"]
    md = (tmp_path / "infercost-review-2026-W48.md").read_text()
    assert fmt.usd(review.headline.cpst_usd.this) in md and "2026-W47" in md
    assert (tmp_path / "infercost-review-2026-W48.html").is_file()
    # --recompute re-runs the cost jobs over the weeks' telemetry: idempotent, same figures
    monkeypatch.delenv("INFERCOST_REVIEW_WEBHOOK_URL")
    again = CliRunner().invoke(main, ["review", "--week", "2026-W48", "--out", str(tmp_path / "again"), "--recompute"])
    assert again.exit_code == 0, again.output
    md_again = (tmp_path / "again" / "infercost-review-2026-W48.md").read_text()
    assert md_again.split("\n", 3)[3] == md.split("\n", 3)[3]  # all but the title and generation time
    bad = CliRunner().invoke(main, ["review", "--week", "2026-48", "--out", str(tmp_path)])
    assert bad.exit_code == 2 and "expected YYYY-Www" in bad.output
    bad = CliRunner().invoke(main, ["review", "--week", "2026-W48", "--smtp-host", "mail", "--out", str(tmp_path)])
    assert bad.exit_code == 2 and "no SMTP recipient" in bad.output


def test_an_empty_week_is_a_short_report(scenario):
    store, _, _ = scenario
    review = build_review(store, "2026-W50", now=sc.NOW)
    assert review.empty
    md, html = render_markdown(review), render_html(review)
    assert "nothing to review" in md and "nothing to review" in html
    assert [s.key for s in build_sections(review)] == ["headline"]
    assert len(md.splitlines()) < 20


@pytest.mark.browser
def test_report_opens_offline_in_headless_chromium(scenario, tmp_path, artifacts):
    from playwright import sync_api as playwright

    assert Path(CHROMIUM).exists(), "Debian's chromium is not installed (make system-deps)"
    store, review, _ = scenario
    html_path, _ = write_report(store, W48, tmp_path, review=review)
    requested: list[str] = []
    with playwright.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS, headless=True)
        try:
            context = browser.new_context(viewport={"width": 1200, "height": 900}, offline=True)
            page = context.new_page()
            page.on("request", lambda r: requested.append(r.url))
            page.goto(html_path.as_uri())
            assert page.title() == "Weekly cost review 2026-W48"
            headline = page.locator("#headline .kpi").first.inner_text()
            assert "Cost per successful task" in headline and fmt.usd(review.headline.cpst_usd.this) in headline
            assert page.locator("svg").count() >= 3
            # the charts drew something (their boxes have a size)
            box = page.locator("#changes svg").first.bounding_box()
            assert box and box["width"] > 300 and box["height"] > 50
            page.screenshot(path=str(artifacts / "review_2026-W48.png"), full_page=True)
        finally:
            browser.close()
    assert requested == [html_path.as_uri()]  # nothing but the file itself
    assert (artifacts / "review_2026-W48.png").stat().st_size > 10_000


def test_dashboard_page_shows_the_same_review(scenario):
    from streamlit.testing.v1 import AppTest

    from app import store_provider

    store, review, _ = scenario
    # the page script alone (the router's other pages are the dashboard's tests), as a shared link opens it
    page = str(Path(__file__).resolve().parents[1] / "app" / "views" / "weekly_review.py")
    store_provider.set_store(store)
    try:
        at = AppTest.from_file(page, default_timeout=120)
        at.query_params["week"] = "2026-W48"
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        assert at.query_params["week"] == "2026-W48"
        metrics = {m.label: m.value for m in at.metric}
        assert metrics["Cost per successful task"] == fmt.usd(review.headline.cpst_usd.this)
        assert metrics["Total spend"] == fmt.usd(review.headline.spend_usd.this)
        assert at.selectbox(key="review_week").value == "2026-W48"
        assert {h.value for h in at.header} >= {"Headline", "What changed", "Waste", "Incidents", "Levers"}
    finally:
        store_provider.clear()
