"""Page load times of the dashboard in headless Chromium: every page at 1 h and 7 days, p50 / p95.

"Loaded" = the page's title is drawn, Streamlit shows no running script, skeleton or spinner for one
second, and every chart on the page has drawn its canvas/SVG. The goal: every page <= 1.5 s
p95 on the 7-day demo store on 2 cores. Baseline, measured in the same run: the live page over a
range with no data (Streamlit, the router and the sidebar; no figures).

    # against a running demo (infercost demo --backfill-days 7 --port 18501):
    .venv/bin/python benchmarks/bench_pages.py --url http://127.0.0.1:18501 --reps 5
    # or serve a (stopped) demo's data dir with `infercost dashboard` on a free port:
    .venv/bin/python benchmarks/bench_pages.py --data-dir .infercost --reps 5
    # or bench_dashboard.py's store (data ends 2026-11-09), served on a free port by hand:
    INFERCOST_CLICKHOUSE_URL=chdb://$PWD/benchmarks/results/dashboard_store_1000000 INFERCOST_DATABASE=bench \
        .venv/bin/python -m infercost.cli dashboard --port 18502 &
    .venv/bin/python benchmarks/bench_pages.py --url http://127.0.0.1:18502 --end 2026-11-09T00:00:00Z

Two trees side by side (an A/B of a change): serve a second dashboard from another checkout on its own
copy of the data, and every page's loads alternate between the two (A, B, B, A, ...), so both see the
same machine load; the table then has both columns and B's p50 / p95 over A's:

    git worktree add /tmp/base HEAD~1 && cp -r .infercost /tmp/data_b
    .venv/bin/python benchmarks/bench_pages.py --data-dir .infercost --compare-tree /tmp/base \
        --compare-data-dir /tmp/data_b --reps 10   # or --compare-url for a running one

(``--compare-tree`` is served with this tree's Python, from that tree's own code: ``python -m`` takes the
package from its working directory first.)

Each page is opened ``--reps`` times after one warm-up load (Streamlit's query caches then hold the
results: the p95 is the viewer who opens a page someone opened within the cache TTL; with ``--cold``
every load ends its range one minute earlier than the load before, so no cached result fits and
each load runs every query).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
PAGES = {"live": "", "cost": "cost", "triangle": "triangle", "tasks": "tasks", "alerts": "alerts",
         "review": "weekly_review", "live_engine": "?view=engine"}
BUSY = ('[data-testid="stStatusWidget"], [data-testid="stSkeleton"], [data-testid="stAppSkeleton"], '
        '[data-testid="stSpinner"]')
GOAL_S = 1.5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load(page, url: str, timeout_s: float = 120.0) -> float:
    """Seconds from navigation to "all panels drawn" (see module doc)."""
    started = time.monotonic()
    page.goto(url, wait_until="domcontentloaded")
    page.wait_for_selector("h1", timeout=timeout_s * 1000)
    quiet_since, deadline = None, started + timeout_s
    while time.monotonic() < deadline:
        busy = page.locator(BUSY).count() > 0
        charts_pending = page.evaluate(
            "() => [...document.querySelectorAll('[data-testid=\"stVegaLiteChart\"], [data-testid=\"stPlotlyChart\"]')]"
            ".some(el => el.offsetParent !== null && !el.querySelector('canvas, svg'))")
        if busy or charts_pending:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= 1.0:
            return quiet_since - started
        page.wait_for_timeout(50)
    raise TimeoutError(f"{url} did not settle within {timeout_s} s")


def timed(page, url: str, timeout_s: float) -> float:
    """:func:`load`, or ``timeout_s`` when the page did not settle (reported as such, the run goes on)."""
    try:
        return load(page, url, timeout_s)
    except TimeoutError:
        print(f"  timeout: {url}", flush=True)
        return timeout_s


def serve(data_dir: str, tree: Path = ROOT) -> tuple[subprocess.Popen, str]:
    """`infercost dashboard` of the checkout ``tree`` on ``data_dir``, on a free port: (process, url)."""
    port = _free_port()
    env = dict(os.environ, INFERCOST_DATA_DIR=data_dir, NO_PROXY="127.0.0.1,localhost")
    proc = subprocess.Popen([sys.executable, "-m", "infercost.cli", "dashboard", "--port", str(port)], env=env,
                            cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import httpx

    url = f"http://127.0.0.1:{port}"
    for _ in range(240):
        try:
            if httpx.get(f"{url}/_stcore/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError("the dashboard did not start")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", help="a running dashboard")
    ap.add_argument("--data-dir", help="a data dir to serve with `infercost dashboard` (its store must be free)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--ranges", default="1h,7d")
    ap.add_argument("--pages", default=",".join(PAGES))
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds before a load counts as the timeout")
    ap.add_argument("--end", help="end of every range, ISO UTC (default: the minute the run started)")
    ap.add_argument("--cold", action="store_true", help="no load reuses a cached query result (see module doc)")
    ap.add_argument("--screenshots", metavar="DIR", help="save each page's last load as DIR/<page>_<range>.png "
                    "(full page: check that every panel drew)")
    ap.add_argument("--compare-url", help="B: a second running dashboard; loads alternate between the two")
    ap.add_argument("--compare-data-dir", help="B: a data dir (a copy: a chDB store has one process) to serve "
                    "from --compare-tree")
    ap.add_argument("--compare-tree", type=Path, default=ROOT, help="B's checkout (default: this one)")
    args = ap.parse_args()
    if not args.url and not args.data_dir:
        ap.error("give --url or --data-dir")
    if args.compare_data_dir and not (Path(args.compare_tree) / "infercost" / "cli.py").exists():
        ap.error(f"--compare-tree {args.compare_tree}: no infercost checkout there")
    procs = []
    url = args.url
    if not url:
        proc, url = serve(args.data_dir)
        procs.append(proc)
    urls = [url]
    if args.compare_url or args.compare_data_dir:
        if not args.compare_url:
            proc, compare = serve(args.compare_data_dir, args.compare_tree)
            procs.append(proc)
        urls.append(args.compare_url or compare)
    from playwright.sync_api import sync_playwright

    results: dict[str, list[list[float]]] = {}
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS, headless=True)
            page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()

            def measure(path: str) -> list[list[float]]:
                """``--reps`` loads of ``path`` per dashboard after a warm-up each, alternated A, B, B, A, ..."""
                times = [[] for _ in urls]
                for u in urls:
                    timed(page, u + path(), args.timeout)
                for rep in range(args.reps):
                    order = range(len(urls)) if rep % 2 == 0 else reversed(range(len(urls)))
                    for i in order:
                        times[i].append(timed(page, urls[i] + path(), args.timeout))
                return times

            results["baseline (no data)"] = measure(lambda: "/?range=1h&end=2001-01-01T01:00:00Z")
            # Ranges pinned to the minute the run started: a range following the clock refreshes the live
            # page every 5 s, which would be measured instead of the page (and never settles on a busy machine).
            end = datetime.fromisoformat((args.end or time.strftime("%Y-%m-%dT%H:%M:00Z", time.gmtime()))
                                         .replace("Z", "+00:00"))
            shifts = iter(range(10_000))  # --cold: a new minute for every load

            def target(path: str, rng: str) -> str:
                at = end - timedelta(minutes=next(shifts)) if args.cold else end
                sep = "&" if "?" in path else "?"
                return f"/{path}{sep}range={rng}&end={at.strftime('%Y-%m-%dT%H:%M:00Z')}"

            for rng in args.ranges.split(","):
                for name in args.pages.split(","):
                    key = f"{name} {rng}"
                    results[key] = measure(lambda: target(PAGES[name], rng))
                    if args.screenshots:
                        Path(args.screenshots).mkdir(parents=True, exist_ok=True)
                        page.screenshot(path=str(Path(args.screenshots) / f"{name}_{rng}.png"), full_page=True)
                    print(f"  {key}: " + " | ".join(", ".join(f"{v:.2f}" for v in t) for t in results[key]) + " s",
                          flush=True)
            browser.close()
    finally:
        for proc in procs:
            proc.terminate()
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    report(results, ["A", "B"] if len(urls) > 1 else [""])


def _p50_p95(values: list[float]) -> tuple[float, float]:
    values = sorted(values)
    return statistics.median(values), values[min(len(values) - 1, int(round(0.95 * (len(values) - 1))))]


def report(results: dict[str, list[list[float]]], names: list[str]) -> None:
    """Print p50 / p95 per page and dashboard, each p50 over that dashboard's no-data baseline, and with
    two dashboards B's p50 and p95 over A's."""
    head = "".join(f"{n + ' p50 s':>10}{n + ' p95 s':>10}{'x base':>8}" for n in names)
    ratio = f"{'B/A p50':>9}{'B/A p95':>9}" if len(names) > 1 else ""
    print(f"\n{'page':<22}{head}{ratio}  goal {GOAL_S} s p95")
    bases = [statistics.median(t) for t in results["baseline (no data)"]]
    for key, times in results.items():
        stats = [_p50_p95(t) for t in times]
        line = "".join(f"{p50:>10.2f}{p95:>10.2f}{p50 / base:>8.1f}" for (p50, p95), base in zip(stats, bases))
        if len(stats) > 1:
            line += f"{stats[1][0] / stats[0][0]:>9.2f}{stats[1][1] / stats[0][1]:>9.2f}"
        verdict = "" if key.startswith("baseline") else " ".join(
            "ok" if p95 <= GOAL_S else "OVER" for _, p95 in stats)
        print(f"{key:<22}{line}  {verdict}")


if __name__ == "__main__":
    main()
