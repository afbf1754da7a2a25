"""The dashboard in a real browser: served on 127.0.0.1 from its own process, opened page by page in
Debian's headless Chromium (driven by Playwright, never downloaded), one screenshot per page under
tests/artifacts/.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from dashboard_seed import FOREIGN, MARKUP_NAMES, MODEL, markup

from tests.producers import free_port

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic", "--disable-dev-shm-usage"]
PAGES = {"live": "", "cost": "cost", "triangle": "triangle", "tasks": "tasks", "alerts": "alerts",
         "review": "weekly_review"}
QUERY = "?range=1h&end=2026-11-02T11:00:00Z"
ERROR_TEXT = ("Traceback (most recent call last)", "StreamlitAPIException", "Error running app")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    yield from _serve(tmp_path_factory)


def _serve(tmp_path_factory, names: dict | None = None):
    """Serve tests/dashboard_serve.py's seeded store (``names``: its renames) from its own process;
    yields ``(url, task id with retries)`` and stops the process after."""
    assert os.path.exists(CHROMIUM), "Debian's chromium is not installed (make system-deps)"
    port = free_port()
    directory = tmp_path_factory.mktemp("dashboard_store")
    env = dict(os.environ, NO_PROXY="127.0.0.1,localhost")
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "dashboard_serve.py"), str(directory / "store"),
                             str(port), "800"] + ([json.dumps(names)] if names else []),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=str(ROOT))
    url = f"http://127.0.0.1:{port}"
    task = ""
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"dashboard process exited with {proc.returncode} before answering")
            if not task:
                task = _ready_task(proc)
                # Keep draining the server's output so a full pipe never blocks it.
                threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
            if _healthy(url):
                break
            time.sleep(0.25)
        else:
            pytest.fail("dashboard did not answer /_stcore/health within 120 s")
        yield url, task
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _healthy(url: str, timeout_s: float = 1.0) -> bool:
    """Whether the Streamlit server at ``url`` answers its health check."""
    try:
        return httpx.get(f"{url}/_stcore/health", timeout=timeout_s).status_code == 200
    except httpx.HTTPError:
        return False


def _ready_task(proc) -> str:
    # The server prints "READY <url> <start> <end> [task]" before serving; other lines are logs.
    while True:
        line = proc.stdout.readline()
        if not line:
            return "-"
        if line.startswith("READY"):
            parts = line.split()
            return parts[4] if len(parts) > 4 else "-"


def _settle(page, timeout_s: float = 90.0) -> None:
    page.wait_for_selector('[data-testid="stAppViewContainer"]', timeout=30_000)
    page.wait_for_selector("h1", timeout=30_000)
    # While a script runs Streamlit shows its status widget (a "Stop" button) and skeletons for
    # elements not drawn yet; wait until neither has been seen for a second.
    busy = ('[data-testid="stStatusWidget"], [data-testid="stSkeleton"], [data-testid="stAppSkeleton"], '
            '[data-testid="stSpinner"]')
    quiet, deadline = 0, time.monotonic() + timeout_s
    while quiet < 4 and time.monotonic() < deadline:
        quiet = quiet + 1 if page.locator(busy).count() == 0 else 0
        page.wait_for_timeout(250)
    page.wait_for_timeout(1000)  # let charts draw (vega / plotly render after the script ends)


_CHARTS = "[...document.querySelectorAll('[data-testid=\"stVegaLiteChart\"]')]"
_ALL_SHOWN_DRAWN = f"() => {_CHARTS}.filter(e => e.offsetParent !== null).every(e => e.querySelector('canvas'))"


def _charts(page) -> dict:
    """How many Vega charts the page shows, how many of those are drawn, how many hidden ones are drawn."""
    return page.evaluate(f"""() => {{
        const all = {_CHARTS}, shown = all.filter(e => e.offsetParent !== null);
        return {{shown: shown.length, shown_drawn: shown.filter(e => e.querySelector('canvas')).length,
                 hidden_drawn: all.filter(e => e.offsetParent === null && e.querySelector('canvas')).length}};
    }}""")


def test_deep_link_loads_fully_on_a_cold_server(served, artifacts):
    """The FIRST request to a fresh server is a page URL with parameters (an alert
    link): the page must load with the router's sidebar filters and wide layout, not Streamlit's raw
    page list. (Runs first in this module, so the server has not served `/` yet.) Also:
    a crafted task id in the URL stays text (no image fetched, no link)."""
    from playwright.sync_api import sync_playwright

    url, _ = served
    evil = "![x](http://127.0.0.1:9/pixel.png) [log in again](javascript:alert(1)) <img src=x>"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page = browser.new_context(viewport={"width": 1500, "height": 1200}).new_page()
            page.goto(f"{url}/cost?range=24h&end=2026-11-02T11:00:00Z&tenant=acme", wait_until="domcontentloaded")
            _settle(page)
            page.screenshot(path=str(artifacts / "dashboard_cold_deep_link.png"), full_page=True)
            body = page.inner_text("body")
            assert "Cost per successful task" in page.inner_text("h1")
            sidebar = page.inner_text('[data-testid="stSidebar"]')
            assert "Time range" in sidebar and "Tenant" in sidebar, sidebar
            assert "Live operations" in sidebar  # the router's navigation, not the file names
            assert "live ops" not in sidebar.lower() and "triangle" not in sidebar.split("Filters")[0].lower()
            width = page.evaluate("document.querySelector('[data-testid=\"stMainBlockContainer\"]').offsetWidth")
            assert width > 1000, f"narrow layout: {width}px"
            assert "tenant=acme" in page.url and "Page not found" not in body

            page.goto(f"{url}/tasks?range=1h&end=2026-11-02T11:00:00Z&task=" + quote(evil), wait_until="domcontentloaded")
            _settle(page)
            assert page.locator('img[src*="pixel.png"], img[src="x"]').count() == 0
            assert page.locator('a[href^="javascript"]').count() == 0
            assert "[log in again](javascript:alert(1))" in page.inner_text("body")
        finally:
            browser.close()


def test_every_page_renders_in_chromium(served, artifacts):
    from playwright.sync_api import sync_playwright

    url, task = served
    pages = dict(PAGES)
    pages["review"] = f"weekly_review{QUERY}&week=2026-W45"  # the week of the seeded hour
    if task not in ("", "-"):
        pages["task_drilldown"] = f"tasks{QUERY}&task={task}"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            context = browser.new_context(viewport={"width": 1500, "height": 1800}, timezone_id="Europe/Paris")
            page = context.new_page()
            for name, path in pages.items():
                page.goto(f"{url}/{path}" + ("" if "?" in path else QUERY), wait_until="domcontentloaded")
                _settle(page)
                page.screenshot(path=str(artifacts / f"dashboard_{name}.png"), full_page=True)
                body = page.inner_text("body")
                assert page.locator('[data-testid="stException"]').count() == 0, (name, body[:2000])
                assert not any(t in body for t in ERROR_TEXT), (name, body[:2000])
                assert "Page not found" not in body, name
                if name == "task_drilldown":
                    assert f"Task {task}" in body
                if name == "live":
                    # the viewer's time zone (from the browser) is used for times on the page
                    assert "Europe/Paris" in body and "Replica health" in body
                    assert "range=1h" in page.url  # the filters stay in the URL
                    # a time chart's 220 px are its plot's: axes and legend come on top (Streamlit's default
                    # "fit" made 220 px the whole chart's, leaving a 40-80 px plot: app.ui.CHART_AUTOSIZE)
                    heights = page.evaluate(f"() => {_CHARTS}.filter(e => e.offsetParent !== null)"
                                            ".map(e => Math.round(e.getBoundingClientRect().height))")
                    assert heights and all(h > 260 for h in heights), heights
            # A live range refreshes the panel in place every 5 s: the page is not reloaded (a JS marker
            # survives) while the "last update" time moves on.
            page.goto(f"{url}/?range=15m", wait_until="domcontentloaded")
            _settle(page)
            page.evaluate("window.__infercost_marker = 42")
            caption = page.get_by_text("Refreshes every 5 s").first
            first = caption.inner_text()
            deadline = time.monotonic() + 45
            while time.monotonic() < deadline and caption.inner_text() == first:
                page.wait_for_timeout(500)
            assert caption.inner_text() != first, "the live panel did not refresh within 45 s"
            assert page.evaluate("window.__infercost_marker") == 42
        finally:
            browser.close()


def test_live_page_zooms_into_a_chart_selection_and_draws_the_engine_view(served, artifacts):
    """Grafana parity: dragging across the TTFT chart switches the page to that time range
    (in UTC in the URL, whatever the viewer's zone); the vLLM engine view draws its panels."""
    from datetime import datetime, timezone
    from urllib.parse import parse_qs, urlsplit

    from playwright.sync_api import sync_playwright

    url, _ = served
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page = browser.new_context(viewport={"width": 1400, "height": 2400},
                                       timezone_id="Europe/Paris").new_page()
            page.goto(f"{url}/{QUERY}", wait_until="domcontentloaded")
            _settle(page)
            for _ in range(3):  # a drag made before Vega attached its listeners (busy machine) is lost: again
                chart = page.locator('[data-testid="stVegaLiteChart"]').first
                chart.scroll_into_view_if_needed()
                page.wait_for_timeout(1500)
                box = chart.bounding_box()
                y = box["y"] + box["height"] * 0.4
                page.mouse.move(box["x"] + box["width"] * 0.4, y)
                page.mouse.down()
                page.mouse.move(box["x"] + box["width"] * 0.7, y, steps=10)
                page.mouse.up()
                deadline = time.monotonic() + 45  # the rerun the selection triggers
                while "range=custom" not in page.url and time.monotonic() < deadline:
                    page.wait_for_timeout(250)
                if "range=custom" in page.url:
                    break
            params = parse_qs(urlsplit(page.url).query)
            page.screenshot(path=str(artifacts / "dashboard_zoom.png"), full_page=True)
            assert params["range"] == ["custom"], page.url
            start, end = (datetime.fromisoformat(params[k][0].replace("Z", "+00:00")) for k in ("start", "end"))
            lo, hi = datetime(2026, 11, 2, 10, tzinfo=timezone.utc), datetime(2026, 11, 2, 11, tzinfo=timezone.utc)
            assert lo <= start < end <= hi and (end - start).total_seconds() < 3600, (start, end)
            _settle(page)
            assert page.locator('[data-testid="stException"]').count() == 0

            page.goto(f"{url}/{QUERY}&view=engine", wait_until="domcontentloaded")
            _settle(page)
            page.screenshot(path=str(artifacts / "dashboard_live_engine.png"), full_page=True)
            body = page.inner_text("body")
            assert page.locator('[data-testid="stException"]').count() == 0, body[:2000]
            assert "vLLM engine" in body and "Running requests by replica" in body
            assert "Scrape health per target" in body
            # the first tab's three gauge charts (this store has no engine counters or histograms)
            assert _charts(page) == {"shown": 3, "shown_drawn": 3, "hidden_drawn": 0}, _charts(page)

            # a tab not shown builds nothing; opening it reruns the panel, draws its charts and puts it in
            # the URL (app.ui.lazy_tabs, app/views/live_ops.py)
            page.goto(f"{url}/{QUERY}", wait_until="domcontentloaded")
            _settle(page)
            assert _charts(page) == {"shown": 2, "shown_drawn": 2, "hidden_drawn": 0}, _charts(page)
            assert "Queue and batch" not in page.inner_text("body")
            page.get_by_role("tab", name="Load and errors").click()
            page.get_by_text("Queue and batch").wait_for(timeout=30_000)
            page.wait_for_function(_ALL_SHOWN_DRAWN, timeout=30_000)
            assert _charts(page) == {"shown": 4, "shown_drawn": 4, "hidden_drawn": 0}, _charts(page)
            assert parse_qs(urlsplit(page.url).query)["tab"] == ["Load and errors"], page.url
            # the link opens that tab
            page.goto(page.url, wait_until="domcontentloaded")
            _settle(page)
            assert "Queue and batch" in page.inner_text("body") and _charts(page)["shown"] == 4
        finally:
            browser.close()


WORDS = ["replica", "task_type", "tenant", "model", "error"] + [f"param-{k}" for k in (
    "range", "start", "end", "model", "tenant", "task_type", "tab", "trend", "task", "q", "alert_id", "rule", "week")]
# Loads whose names are only in charts and tables (drawn on a canvas): no text to find.
TEXTLESS = {"/triangle", "/tasks drill-down", "/tasks search"}


@pytest.fixture(scope="module")
def served_markup(tmp_path_factory):
    yield from _serve(tmp_path_factory, MARKUP_NAMES)  # every name as tests/dashboard_seed.py's markup()


def _markup_urls(task: str) -> dict[str, str]:
    """Every page with the telemetry's own names as filters, every parameter it reads set to markup,
    and once with every parameter (the range's too) set to markup."""
    from urllib.parse import urlencode

    view = {"range": "1h", "end": "2026-11-02T11:00:00Z"}
    filtered = dict(view, model=MARKUP_NAMES[MODEL], tenant=MARKUP_NAMES["acme"],
                    task_type=MARKUP_NAMES["chat"])
    garbage = {k: markup(f"param-{k}") for k in ("range", "start", "end", "model", "tenant", "task_type")}
    page_params = {"": {"replica": MARKUP_NAMES["r3"], "tab": markup("param-tab")},
                   "cost": {"by": "Tenant", "trend": markup("param-trend")},
                   "triangle": {},
                   "tasks": {"task": markup("param-task"), "q": markup("param-q")},
                   "alerts": {"alert_id": markup("param-alert_id"), "replica": MARKUP_NAMES["r3"],
                              "rule": markup("param-rule")},
                   "weekly_review": {"week": markup("param-week")}}
    urls = {}
    for path, own in page_params.items():
        urls[f"/{path}"] = f"/{path}?" + urlencode(dict(view, **own))
        urls[f"/{path} filtered"] = f"/{path}?" + urlencode(dict(filtered, **own))
        urls[f"/{path} all markup"] = f"/{path}?" + urlencode(dict(garbage, **own))
    urls["/ engine"] = "/?" + urlencode(dict(view, view="engine", replica=MARKUP_NAMES["r3"]))
    urls["/tasks drill-down"] = "/tasks?" + urlencode(dict(view, task=task))
    urls["/tasks search"] = "/tasks?" + urlencode(dict(view, q="task_type"))
    urls["/alerts cascade"] = "/alerts?" + urlencode(dict(view, alert_id=_cascade_id()))
    urls["/weekly_review week"] = "/weekly_review?" + urlencode(dict(view, week="2026-W45"))
    return urls


def _cascade_id() -> str:
    from alerts.model import alert_id

    return alert_id("cascading_degradation", "")


def _open_menus(page) -> None:
    """Open each selectbox's and multiselect's option list in turn, then close it."""
    menus = page.locator('[data-testid="stSelectbox"], [data-testid="stMultiSelect"]')
    for i in range(menus.count()):
        menus.nth(i).click()
        page.wait_for_timeout(500)
        page.keyboard.press("Escape")


def test_markup_in_telemetry_and_links_stays_text(served_markup, artifacts):
    """A store whose replica ids, task types, tenants, model and error types carry Markdown and HTML
    images and links, browsed with the same markup in every URL parameter: every page draws (the
    values quoted as text) and the browser makes no request to, and the page holds no link or image
    of, any host but the dashboard's (the page icon included: a ':material/…:' one is fetched from
    Google's font host)."""
    from urllib.parse import urlsplit

    from playwright.sync_api import sync_playwright

    url, task = served_markup
    assert task not in ("", "-"), "the seeded store has no task with retries"
    own = urlsplit(url).netloc
    foreign: list[tuple[str, str]] = []  # (page, URL) of each request to another host
    planted: list[tuple[str, str]] = []  # (page, element) of each link or image to another host
    current, loads = {"name": ""}, 0
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page = browser.new_context(viewport={"width": 1500, "height": 1800}).new_page()
            page.on("request", lambda r: foreign.append((current["name"], r.url))
                    if urlsplit(r.url).scheme in ("http", "https", "ws", "wss") and urlsplit(r.url).netloc != own
                    else None)
            for name, path in _markup_urls(task).items():
                current["name"], seen = name, (len(planted), len(foreign))
                page.goto(url + path, wait_until="domcontentloaded")
                _settle(page)
                if name in ("/", "/alerts"):  # the selectors' option lists draw only when opened
                    _open_menus(page)
                body = page.inner_text("body")
                assert page.locator('[data-testid="stException"]').count() == 0, (name, body[:2000])
                assert not any(t in body for t in ERROR_TEXT), (name, body[:2000])
                found = page.locator(f'a[href*="{FOREIGN}"], img[src*="{FOREIGN}"], [srcset*="{FOREIGN}"]')
                planted += [(name, html) for html in found.evaluate_all("els => els.map(e => e.outerHTML)")]
                # '**replica**' and the like: shown with their asterisks, never bold
                planted += [(name, html) for html in page.locator("strong, em, b, i").evaluate_all(
                    "(els, words) => els.filter(e => words.includes(e.textContent.trim())).map(e => e.outerHTML)",
                    WORDS)]
                if (len(planted), len(foreign)) != seen:
                    page.screenshot(path=str(artifacts / f"dashboard_markup_{name.strip('/ ').replace(' ', '_') or 'live'}.png"),
                                    full_page=True)
                if name not in TEXTLESS:  # the markup is on the page as the text it is (a word joiner aside)
                    shown = body + " ".join(page.locator("input").evaluate_all("els => els.map(e => e.value)"))
                    assert f"![t](http://{FOREIGN}/" in shown.replace("\u2060", ""), (name, body[:2000])
                loads += 1
        finally:
            browser.close()
    assert (loads, foreign, planted) == (len(_markup_urls(task)), [], [])
