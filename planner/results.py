"""Store a planner run in ``planner_runs``, ``planner_candidates`` and ``planner_candidate_types``
(``schema/migrations/1008_baseline_planner.sql``), where the dashboard's Planner page and the
weekly review read it back through named queries (``schema.queries.planner``). One insert per table; money unrounded.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

RUN_COLUMNS = ("run_id", "created_at", "period_start", "period_end", "status", "backtest_passed",
               "measured_cpst_usd", "replayed_cpst_usd", "measured_ttft_p95_s", "replayed_ttft_p95_s", "tolerance",
               "current_candidate", "recommended_candidate", "predicted_saving_ratio", "predicted_saving_usd",
               "candidates", "wall_seconds", "message", "assumptions", "workload", "levers")
CANDIDATE_COLUMNS = ("run_id", "candidate", "origin", "spec", "is_current", "meets_slo", "on_frontier", "recommended",
                     "replicas", "gpus", "spend_usd", "cpst_usd", "attributed_cpst_usd", "idle_ratio",
                     "goodput_per_hour", "tasks", "successful_tasks", "ttft_p95_s", "e2e_p95_s",
                     "slo_attainment_min", "useful_usd", "retry_waste_usd", "failed_task_waste_usd",
                     "unattributed_usd", "pending_usd", "idle_usd", "wall_seconds")
TYPE_COLUMNS = ("run_id", "candidate", "task_type", "tasks", "successful_tasks", "slo_attainment", "ttft_p95_s",
                "e2e_p95_s", "slo_ttft_ms", "slo_e2e_ms", "meets_slo")


def _json(value) -> str:
    return json.dumps(value, default=str, sort_keys=True)


def _screened(r) -> dict:
    """A candidate as compared on the screening window (``planner.screen``): what the report's table shows."""
    return {"candidate": r.name, "label": r.spec.get("label", ""), "origin": r.origin, "cpst_usd": r.cpst_usd,
            "ttft_p95_s": r.ttft_p95_s, "slo_attainment_min": r.slo_attainment_min, "meets_slo": bool(r.meets_slo),
            "error": r.error}


def save(store, run) -> None:
    """Insert ``run`` (a ``run.PlanResult``). Raises the store's typed errors."""
    bt = run.backtest
    store.insert("planner_runs", [[
        run.run_id, datetime.now(timezone.utc).replace(tzinfo=None), run.start, run.end, run.status,
        int(bool(bt.get("passed"))), bt.get("measured_cpst_usd"), bt.get("replayed_cpst_usd"),
        bt.get("measured_ttft_p95_s"), bt.get("replayed_ttft_p95_s"), float(bt.get("tolerance") or 0.0), run.current,
        run.recommended or "", run.saving_ratio, run.saving_usd, len(run.results), float(run.wall_seconds),
        run.message, _json({**run.assumptions, "diagnosis": run.diagnosis, "stopped": run.stopped,
                            "melange": run.melange, "backtest_types": bt.get("types", {}),
                            "incidents": bt.get("incidents", {}), "under_incidents": run.incidents,
                            "screen": run.screen, "screened": [_screened(r) for r in run.screened]}),
        _json(run.workload), _json(run.levers)]], RUN_COLUMNS, tag="planner.save.run")
    rows, types = [], []
    for r in run.results:
        waste = r.waste or {}
        rows.append([run.run_id, r.name, r.origin, _json(r.spec), int(r.name == run.current), int(bool(r.meets_slo)),
                     int(r.name in run.frontier), int(r.name == run.recommended), r.replicas, r.gpus,
                     float(r.spend_usd), r.cpst_usd, r.attributed_cpst_usd, r.idle_ratio, r.goodput_per_hour,
                     int(r.tasks), int(r.successful_tasks), r.ttft_p95_s, r.e2e_p95_s, r.slo_attainment_min,
                     *(float(waste.get(k, 0.0)) for k in ("useful", "retry_waste", "failed_task_waste", "unattributed",
                                                          "pending", "idle")),
                     float(r.wall_seconds)])
        for task_type, t in sorted(r.per_type.items()):
            types.append([run.run_id, r.name, task_type, int(t.get("tasks") or 0), int(t.get("successful_tasks") or 0),
                          t.get("slo_attainment"), t.get("ttft_p95_s"), t.get("e2e_p95_s"), t.get("slo_ttft_ms"),
                          t.get("slo_e2e_ms"), int(bool(t.get("meets_slo")))])
    if rows:
        store.insert("planner_candidates", rows, CANDIDATE_COLUMNS, tag="planner.save.candidates")
    if types:
        store.insert("planner_candidate_types", types, TYPE_COLUMNS, tag="planner.save.types")
