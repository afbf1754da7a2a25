"""Open dashboard pages over a store in Debian's headless Chromium (Playwright, never downloaded).

The dashboard is served in this process (``app.server.serve(block=False)``) so it reads the same
in-memory store the real-vLLM run filled.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]
BUSY = ('[data-testid="stStatusWidget"], [data-testid="stSkeleton"], [data-testid="stAppSkeleton"], '
        '[data-testid="stSpinner"]')


def _settle(page, timeout_s: float = 90.0) -> None:
    page.wait_for_selector('[data-testid="stAppViewContainer"]', timeout=60_000)
    page.wait_for_selector("h1", timeout=60_000)
    quiet, deadline = 0, time.monotonic() + timeout_s
    while quiet < 4 and time.monotonic() < deadline:
        quiet = quiet + 1 if page.locator(BUSY).count() == 0 else 0
        page.wait_for_timeout(250)
    page.wait_for_timeout(1500)


def render_pages(store, artifacts: Path, pages: dict[str, str]) -> dict[str, str]:
    """Serve the dashboard over ``store``, open each ``{name: path?query}``, screenshot it to
    ``artifacts/vllm_<name>.png`` and return each page's visible text."""
    from playwright.sync_api import sync_playwright

    from app.server import serve
    from serving.vllm.launch import free_port

    port = free_port()
    handle = serve(store, "127.0.0.1", port, block=False, ready_timeout=60)
    texts = {}
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
            try:
                page = browser.new_context(viewport={"width": 1500, "height": 1800}).new_page()
                for name, path in pages.items():
                    page.goto(f"http://127.0.0.1:{port}/{path}", wait_until="domcontentloaded")
                    _settle(page)
                    page.screenshot(path=str(artifacts / f"vllm_{name}.png"), full_page=True)
                    texts[name] = page.inner_text("body")
            finally:
                browser.close()
    finally:
        if handle is not None and hasattr(handle, "stop"):
            handle.stop()
    return texts
