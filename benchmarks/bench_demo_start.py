"""Benchmark of `make demo` to a drawn dashboard, and the demo's spend shares.

Run: ``.venv/bin/python benchmarks/bench_demo_start.py [--tree <checkout>] [--live-s 0]``

Starts ``<tree>/.venv/bin/infercost demo`` (what ``make demo`` runs once its virtualenv is in place)
on a fresh data dir, with the default 7-day backfill, and prints the seconds from the start until its
dashboard answers its health check and until the live page is drawn in Debian's headless Chromium
(the tests' wait: no script running, no skeleton left). ``--tree`` times another checkout with the
same harness (each checkout runs its own code and virtualenv). With ``--live-s N`` the demo keeps
running N seconds of its live phase, then the query API's spend shares are printed for the live
phase after its first 2 minutes, the last 24 h and the last 7 days: idle, useful, retry waste,
failed-task waste, pending (as shares of spend; allocated = 1 - idle).

Other work sharing the CPU makes the times pessimistic: say the load average beside a figure.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

SHARES = ("idle_usd", "useful_usd", "retry_waste_usd", "failed_task_waste_usd", "pending_usd")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _shares(api: str, start: datetime, end: datetime) -> str:
    row = httpx.get(f"{api}/api/v1/summary", params={"start": f"{start:%Y-%m-%dT%H:%M:%SZ}",
                                                    "end": f"{end:%Y-%m-%dT%H:%M:%SZ}"}, timeout=180).json()["rows"][0]
    spend = row.get("spend_usd") or 0.0
    if not spend > 0:
        return "no spend"
    return f"spend ${spend:,.2f}: " + ", ".join(f"{k[:-4]} {(row.get(k) or 0) / spend:.1%}" for k in SHARES)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tree", type=Path, default=ROOT, help="checkout whose .venv runs the demo")
    parser.add_argument("--live-s", type=float, default=0.0, help="seconds of live phase before the shares")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright
    from test_app_browser import ARGS, CHROMIUM, _settle

    port, api_port = _free_port(), _free_port()
    data = Path(tempfile.mkdtemp(prefix="bench-demo-"))
    env = {**os.environ, "INFERCOST_DATA_DIR": str(data), "NO_PROXY": "127.0.0.1,localhost",
           "INFERCOST_API_PORT": str(api_port)}
    env.pop("INFERCOST_CLICKHOUSE_URL", None)
    log = (data / "demo.log").open("w")
    began = time.monotonic()
    proc = subprocess.Popen([str(args.tree / ".venv" / "bin" / "infercost"), "demo", "--port", str(port),
                             "--receiver-port", str(_free_port())], cwd=args.tree, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            if proc.poll() is not None:
                raise SystemExit((data / "demo.log").read_text()[-3000:])
            try:
                if httpx.get(f"{url}/_stcore/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        answered, live_start = time.monotonic() - began, datetime.now(timezone.utc)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
            page = browser.new_page(viewport={"width": 1500, "height": 1800})
            page.goto(url, wait_until="domcontentloaded")
            _settle(page)
            drawn = time.monotonic() - began
            browser.close()
        print(f"{args.tree}: dashboard answered after {answered:.1f} s, drawn after {drawn:.1f} s "
              f"(load average {os.getloadavg()[0]:.1f})", flush=True)
        if args.live_s > 0:
            time.sleep(max(0.0, args.live_s - (time.monotonic() - began - answered)))
            end = datetime.now(timezone.utc).replace(second=0, microsecond=0)
            api = f"http://127.0.0.1:{api_port}"
            print(f"live {live_start + timedelta(minutes=2):%H:%M}-{end:%H:%M} UTC: "
                  f"{_shares(api, live_start + timedelta(minutes=2), end)}", flush=True)
            print(f"last 24 h: {_shares(api, end - timedelta(hours=24), end)}", flush=True)
            print(f"last 7 d: {_shares(api, end - timedelta(days=7), end)}", flush=True)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(180)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
        log.close()
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
