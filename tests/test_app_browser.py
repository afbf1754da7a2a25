"""The dashboard in a real browser: served on 127.0.0.1 from its own process, opened page by page in
Debian's headless Chromium (driven by Playwright, never downloaded), one screenshot per page under
tests/artifacts/.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic", "--disable-dev-shm-usage"]
PAGES = {"live": "", "cost": "cost", "triangle": "triangle", "tasks": "tasks", "alerts": "alerts",
         "review": "review"}
QUERY = "?range=1h&end=2026-11-02T11:00:00Z"
ERROR_TEXT = ("Traceback (most recent call last)", "StreamlitAPIException", "Error running app")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    if not os.path.exists(CHROMIUM):
        pytest.skip("Debian's chromium is not installed (make system-deps)")
    pytest.importorskip("playwright.sync_api")
    port = _free_port()
    directory = tmp_path_factory.mktemp("dashboard_store")
    env = dict(os.environ, NO_PROXY="127.0.0.1,localhost")
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "dashboard_serve.py"), str(directory / "store"),
                             str(port), "800"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            cwd=str(ROOT))
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"dashboard process exited: {proc.stdout.read()[-3000:]}")
            try:
                if httpx.get(f"{url}/_stcore/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        else:
            pytest.fail("dashboard did not answer /_stcore/health within 120 s")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _settle(page) -> None:
    page.wait_for_selector('[data-testid="stAppViewContainer"]', timeout=30_000)
    page.wait_for_selector("h1", timeout=30_000)
    # The status widget says "Running..." while a script runs; wait until it stays quiet.
    quiet = 0
    for _ in range(120):
        running = page.locator('[data-testid="stStatusWidget"]').filter(has_text="Running").count()
        quiet = quiet + 1 if not running else 0
        if quiet >= 4:
            break
        page.wait_for_timeout(250)
    page.wait_for_timeout(800)  # let charts draw (vega / plotly render after the script ends)


def test_every_page_renders_in_chromium(served, artifacts):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            context = browser.new_context(viewport={"width": 1500, "height": 1800}, timezone_id="Europe/Paris")
            page = context.new_page()
            for name, path in PAGES.items():
                page.goto(f"{served}/{path}{QUERY}", wait_until="domcontentloaded")
                _settle(page)
                page.screenshot(path=str(artifacts / f"dashboard_{name}.png"), full_page=True)
                body = page.inner_text("body")
                assert page.locator('[data-testid="stException"]').count() == 0, (name, body[:2000])
                assert not any(t in body for t in ERROR_TEXT), (name, body[:2000])
                assert "Page not found" not in body, name
                if name == "live":
                    # the viewer's time zone (from the browser) is used for times on the page
                    assert "Europe/Paris" in body and "Replica health" in body
                    assert "range=1h" in page.url  # the filters stay in the URL
        finally:
            browser.close()
