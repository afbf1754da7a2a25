"""What a newcomer sees first after `infercost demo`, in Debian's headless Chromium (Playwright).

Runs the real command with a 1-day backfill in a subprocess, then opens its dashboard: over the last
24 h idle GPUs are under 70 % of the spend and retries and failed tasks are visible waste (the cost
page's own waste table, downloaded as CSV, and the query API over the same store agree); at the default
range the Alerts page pins the backfilled cascade with replica-2 as its culprit. Screenshots under
tests/artifacts/.
"""

from __future__ import annotations

import csv
import io
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from test_app_browser import ARGS, CHROMIUM, ROOT, _free_port, _healthy, _settle

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _waste_csv(page) -> dict[str, dict]:
    """The cost page's "Where the money went" table, from its own Download CSV button: category -> row."""
    buttons = page.get_by_role("button", name="Download CSV")
    for i in range(buttons.count()):
        with page.expect_download() as download:
            buttons.nth(i).click()
        if download.value.suggested_filename == "waste_breakdown.csv":
            rows = csv.DictReader(io.StringIO(open(download.value.path(), encoding="utf-8").read()))
            return {row["category"]: row for row in rows}
    raise AssertionError("the cost page has no waste_breakdown.csv download")


@pytest.mark.timeout(600)
def test_the_demo_pages_tell_the_story_at_their_default_range(tmp_path, artifacts):
    from playwright.sync_api import sync_playwright

    port, receiver_port, api_port = _free_port(), _free_port(), _free_port()
    env = {**os.environ, "INFERCOST_DATA_DIR": str(tmp_path / "data"), "NO_PROXY": "127.0.0.1,localhost",
           "INFERCOST_API_PORT": str(api_port)}
    env.pop("INFERCOST_CLICKHOUSE_URL", None)
    log = (tmp_path / "demo.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "infercost.cli", "demo", "--duration", "15m", "--backfill-days", "1",
                             "--port", str(port), "--receiver-port", str(receiver_port)],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 420
        while time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / "demo.log").read_text()[-4000:]
            if _healthy(url, 2.0):
                break
            time.sleep(1)
        else:
            pytest.fail("the demo's dashboard did not answer within 420 s")

        summary = httpx.get(f"http://127.0.0.1:{api_port}/api/v1/summary", params={"since": "24h"}, timeout=60)
        summary.raise_for_status()
        row = summary.json()["rows"][0]
        assert row["spend_usd"] > 0
        assert row["idle_usd"] < 0.7 * row["spend_usd"], row
        assert row["retry_waste_usd"] > 0 and row["failed_task_waste_usd"] > 0, row

        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
            try:
                page = browser.new_context(viewport={"width": 1500, "height": 1800}, accept_downloads=True).new_page()
                page.goto(f"{url}/cost?range=24h", wait_until="domcontentloaded")
                _settle(page)
                page.screenshot(path=str(artifacts / "demo_cost_24h.png"), full_page=True)
                waste = _waste_csv(page)
                assert float(waste["idle"]["share of spend"]) < 0.7, waste
                assert float(waste["retry_waste"]["USD"]) > 0 and float(waste["failed_task_waste"]["USD"]) > 0, waste

                page.goto(f"{url}/alerts", wait_until="domcontentloaded")  # the default range: the last hour
                _settle(page)
                page.screenshot(path=str(artifacts / "demo_alerts_default_range.png"), full_page=True)
                body = page.inner_text("body")
                assert "range=1h" in page.url  # the default range, written back to the URL
                assert "Cascading degradation — culprit replica-2" in body, body[:3000]
            finally:
                browser.close()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        log.close()
