"""The demo's summary for a fixed backfill, as JSON: run it in two trees and diff the output to show that
a change leaves every figure as it was (or which ones it moves).

Run: ``.venv/bin/python benchmarks/demo_summary.py [--days 0.25] > summary.json`` (deterministic: a fixed
end time and the demo's seed; ~1 min for 6 hours on 2 cores). The backfill, the cost jobs and
``infercost.demo.final_summary`` as ``make demo`` runs them, without the live phase.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import uuid
from datetime import datetime
from pathlib import Path

from infercost import demo
from infercost.backfill import run_backfill
from infercost.service import sync_fleet
from schema import jobs
from schema.migrate import migrate
from schema.store import connect

END = datetime(2026, 12, 1, 15, 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=float, default=0.25, help="backfill length in days (default 0.25)")
    args = parser.parse_args()
    store = connect("chdb://memory", f"demo_summary_{uuid.uuid4().hex[:8]}")
    migrate(store)
    jobs.stop(store)  # the explicit run below only
    with tempfile.TemporaryDirectory() as tmp:
        sync_fleet(store, demo.demo_fleet_file(Path(tmp), END), echo=lambda *a, **k: None)
    plan, _ = demo.backfill_plan(demo.DemoOptions(backfill_days=args.days), END)
    run_backfill(store, plan, progress=False)
    jobs.run_jobs(store, start=plan.start, end=END)
    print(json.dumps(demo.json_safe(demo.final_summary(store, plan.start, END)), default=str, sort_keys=True, indent=1))


if __name__ == "__main__":
    main()
