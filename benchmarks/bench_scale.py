"""How ingest, the cost jobs and the dashboard's queries grow with the store: 1M, 3M, 10M and 30M calls.

Run: ``.venv/bin/python benchmarks/bench_scale.py`` (``--sizes 1000000,3000000`` for a short run;
the default, up to 30M calls, takes about 9 minutes on 2 quiet cores;
each size's store lives in a temp directory until that size is done).

For each size, a fresh chDB store on local disk (all migrations) gets that many calls over 7 days
(``benchmarks/sql/bench_dashboard_*.sql``: gateway-attempt and engine rows in ``llm_calls``, task
roots, vLLM gauges every 15 s on 16 replicas), then, on that store:

* **baseline**: one aggregate scan over every call (``bench_dashboard_baseline.sql``), so each figure is
  also a ratio against a plain scan of the same store;
* **ingest**: 20,480 vLLM ``llm_request`` spans (OTLP protobuf, 512 per request, as the SDK batches)
  validated by :func:`collectors.otlp_traces.prepare_traces` and inserted by
  :func:`collectors.ingest.insert_trace_payloads` into the store already holding N calls: seconds
  and CPU-seconds of this process (chDB runs in it) per 100k spans;
* **cost jobs**: the trailing 2 h window run (median of 3) and the 7-day recompute (``schema.jobs.run_jobs``,
  two workers, a line per day chunk as it finishes), wall seconds; the recompute's process CPU-seconds
  and the process's peak resident memory during it (MiB, sampled; chDB runs in this process);
* **pages**: the sum of the panel p50s of each dashboard page (``bench_dashboard.panels``) at 1 h and
  7 days, after the cost jobs filled the cost tables.

Then, per figure, a least-squares fit ``t = fixed + slope x calls`` over the sizes measured: the
growth the README's ``docs/scaling.md`` arithmetic uses. Figures depend on the machine (printed with
its load average).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import bench_cost  # noqa: E402
from benchmarks import bench_dashboard as dash  # noqa: E402
from benchmarks import bench_ingest as ingest  # noqa: E402
from schema import jobs  # noqa: E402
from schema.fleet import parse_fleet, sync_fleet  # noqa: E402
from schema.migrate import migrate  # noqa: E402
from schema.store import connect  # noqa: E402

DAYS = 7
INGEST_REQUESTS = 40  # x 512 spans


def fit(points: list[tuple[float, float]]) -> tuple[float, float] | None:
    """Least squares ``y = a + b x`` over ``(x, y)`` points; None with fewer than two distinct x."""
    xs = [x for x, _ in points]
    if len(set(xs)) < 2:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(y for _, y in points)
    b = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


def _ingest(store, bodies: list[bytes]) -> tuple[float, float]:
    from collectors.ingest import insert_trace_payloads
    from collectors.otlp_traces import prepare_traces

    cpu0, t0 = time.process_time(), time.perf_counter()
    insert_trace_payloads(store, [prepare_traces(b).payload for b in bodies])
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    spans = len(bodies) * ingest.SPANS_PER_REQUEST
    return 1e5 * wall / spans, 1e5 * cpu / spans


def run_size(n: int, reps: int, bodies: list[bytes]) -> dict:
    tasks = max(1, n // 10)
    with tempfile.TemporaryDirectory(prefix="bench_scale_") as tmp:
        store = connect(f"chdb://{tmp}/store", f"scale_{n}")
        migrate(store, retention_days=3650)
        jobs.stop(store)  # only the runs we time
        t = time.perf_counter()
        dash.build(store, n, tasks, DAYS)
        build_s = time.perf_counter() - t
        end = dash.T0 + timedelta(days=DAYS)
        base = statistics.median(dash.timed(lambda: store.query_df(dash._sql("bench_dashboard_baseline"),
                                                                   tag="bench.baseline"), reps))
        replicas = "\n".join(f"  r{i}: {{gpu_type: {'H100' if i < 8 else 'A100'}, gpu_count: 1}}" for i in range(16))
        sync_fleet(store, parse_fleet(
            "gpu_types:\n  H100:\n    prices:\n      - {usd_per_gpu_hour: 3.60, valid_from: 2025-01-01}\n"
            "  A100:\n    prices:\n      - {usd_per_gpu_hour: 1.80, valid_from: 2025-01-01}\n"
            f"replicas:\n{replicas}\n"))
        # wall seconds (elapsed_s): total_seconds sums the workers' statements and overstated both
        # figures before the jobs were re-planned
        cpu0 = time.process_time()
        with bench_cost.PeakRSS() as rss:  # chDB runs in this process: its memory is ours
            recompute_s = jobs.run_jobs(store, start=end - timedelta(days=DAYS), end=end,
                                        progress=lambda text: print(f"  recomputed {text}", flush=True)).elapsed_s
        recompute_cpu_s = time.process_time() - cpu0
        trailing_s = statistics.median(jobs.run_jobs(store, start=end - timedelta(hours=2), end=end).elapsed_s
                                       for _ in range(3))
        pages: dict[str, float] = {}
        for label, range_s in (("1h", 3600), ("7d", DAYS * 86400)):
            for page, _name, fn in dash.panels(store, end, range_s):
                pages[f"{page} {label}"] = pages.get(f"{page} {label}", 0.0) + statistics.median(dash.timed(fn, reps))
        ingest_wall, ingest_cpu = _ingest(store, bodies)
        store.close()
    return {"calls": n, "build_s": build_s, "baseline_ms": base, "ingest_s_per_100k_spans": ingest_wall,
            "ingest_cpu_s_per_100k_spans": ingest_cpu, "trailing_2h_s": trailing_s, "recompute_7d_s": recompute_s,
            "recompute_7d_cpu_s": recompute_cpu_s, "recompute_peak_rss_mib": rss.peak / 2**20,
            **{f"page_ms {k}": v for k, v in pages.items()}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000000,3000000,10000000,30000000", help="comma-separated call counts")
    ap.add_argument("--reps", type=int, default=5, help="runs per page query (median)")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    bodies = ingest.make_requests(INGEST_REQUESTS, seed=7)
    print(f"scale benchmark: sizes {sizes}; {os.cpu_count()} CPUs, load average {os.getloadavg()}", flush=True)
    results = []
    for n in sizes:
        r = run_size(n, args.reps, bodies)
        results.append(r)
        print(f"\n{n:,} calls (built in {r['build_s']:.0f} s); baseline full scan {r['baseline_ms']:.0f} ms", flush=True)
        for k, v in r.items():
            if k in ("calls", "build_s", "baseline_ms"):
                continue
            ratio = f"  ({v / r['baseline_ms']:.2f}x baseline)" if k.startswith("page_ms") else ""
            print(f"  {k:28} {v:12,.3f}{ratio}", flush=True)
    print("\ngrowth, least squares over the sizes measured (fixed + per 1M calls):")
    for k in results[0]:
        if k in ("calls", "build_s"):
            continue
        f = fit([(r["calls"] / 1e6, r[k]) for r in results])
        if f:
            a, b = f
            print(f"  {k:28} {a:12,.3f} + {b:10,.4f} per 1M calls  -> at 10M {a + 10 * b:12,.3f}, "
                  f"at 30M {a + 30 * b:12,.3f}")
    print(f"\nload average at the end {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
