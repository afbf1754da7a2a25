"""Serve the dashboard over a freshly seeded embedded store, in its own process (browser tests, screenshots).

    .venv/bin/python tests/dashboard_serve.py <store dir> <port> [tasks] [names as JSON]

chDB allows one engine per process, so the browser test runs this in a subprocess with its own
store directory. Seeds the generated scenario of tests/dashboard_seed.py (plus the cost jobs when
``schema.jobs.run_jobs`` exists), prints ``READY <url> <start> <end>`` and serves until killed. The
optional JSON object renames replicas, task types, tenants and the model as the spans carry them
(``dashboard_seed.generate``'s ``names``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def main() -> None:
    from dashboard_seed import generate, run_cost_jobs, seed_alerts
    from schema.migrate import migrate
    from schema.store import connect

    from app.server import serve

    directory, port = sys.argv[1], int(sys.argv[2])
    tasks = int(sys.argv[3]) if len(sys.argv) > 3 else 1500
    names = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    store = connect(f"chdb://{directory}", "infercost")
    migrate(store, retention_days=3650)
    seeded = generate(store, tasks=tasks, hours=1, names=names)
    task = ""
    if run_cost_jobs(store, seeded.start, seeded.end):
        from schema.queries import cost

        tasks = cost.tasks_table(store, seeded.start, seeded.end, None, 5000)
        tasks = tasks[(tasks["outcome"] == "success") & (tasks["retry_waste_usd"] > 0)]
        if len(tasks):
            task = str(tasks.sort_values(["attempts", "task_id"], ascending=[False, True]).iloc[0]["task_id"])
    seed_alerts(store, seeded, replica=names.get("r3", "r3"), cascade=True)
    # READY <url> <start> <end> <a task with retries, for the drill-down screenshot>
    print(f"READY http://127.0.0.1:{port} {seeded.start.isoformat()} {seeded.end.isoformat()} {task}", flush=True)
    serve(store, "127.0.0.1", port, block=True, otlp_endpoint="http://127.0.0.1:4318/v1/traces")


if __name__ == "__main__":
    main()
