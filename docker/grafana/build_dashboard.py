"""Write docker/grafana/dashboards/infercost.json: infercost's cost and live-operations figures as a
Grafana dashboard over the same ClickHouse tables (Grafana's ClickHouse data source, SQL editor).

Run ``python docker/grafana/build_dashboard.py`` after changing a panel; tests/test_docker_config.py
checks the JSON is what this script writes and runs every panel's SQL (Grafana's time macros
expanded) against the embedded store. Each panel's SQL follows the definitions of the named
queries in schema/queries (the cost model: schema/jobs/README.md); rollup tables where the pages use them.
"""

from __future__ import annotations

import json
from pathlib import Path

DATASOURCE = {"type": "grafana-clickhouse-datasource", "uid": "infercost-clickhouse"}
OUT = Path(__file__).parent / "dashboards" / "infercost.json"

# (title, kind, unit, SQL, grid (x, y, w, h), description). Grafana's ClickHouse macros:
# $__timeFilter(col), $__fromTime / $__toTime, $__timeInterval(col) (bucket of the panel's interval),
# $__interval_s (that interval in seconds).
PANELS = [
    ("Cost per successful task", "stat", "currencyUSD", """
SELECT
    (SELECT sum(spend_usd) FROM replica_minutes WHERE $__timeFilter(minute))
    / nullIf((SELECT countIf(outcome = 'success') FROM tasks WHERE $__timeFilter(minute)), 0) AS cpst_usd
""", (0, 0, 6, 4), "All spend in the range (busy and idle GPUs) / tasks that succeeded in it."),
    ("Spend", "stat", "currencyUSD", """
SELECT sum(spend_usd) AS spend_usd FROM replica_minutes WHERE $__timeFilter(minute)
""", (6, 0, 6, 4), "GPU price x GPUs x time up."),
    ("Waste share of spend", "stat", "percentunit", """
SELECT
    (SELECT sumIf(cost_usd, category IN ('retry_waste', 'failed_task_waste')) FROM call_costs WHERE $__timeFilter(minute))
    / nullIf((SELECT sum(spend_usd) FROM replica_minutes WHERE $__timeFilter(minute)), 0) AS waste_ratio
""", (12, 0, 6, 4), "Retry waste + failed-task waste / spend."),
    ("Successful tasks", "stat", "short", """
SELECT countIf(outcome = 'success') AS successful_tasks FROM tasks WHERE $__timeFilter(minute)
""", (18, 0, 6, 4), "Tasks that ended with outcome success in the range."),
    ("Where the money went (USD per interval)", "timeseries", "currencyUSD", """
SELECT t, category, usd FROM (
    SELECT $__timeInterval(minute) AS t, category, sum(cost_usd) AS usd
    FROM call_costs WHERE $__timeFilter(minute) GROUP BY t, category
    UNION ALL
    SELECT $__timeInterval(minute) AS t, 'idle' AS category, sum(idle_usd) AS usd
    FROM replica_minutes WHERE $__timeFilter(minute) GROUP BY t
) ORDER BY t, category
""", (0, 4, 12, 8), "Allocated cost by category (useful, retry_waste, failed_task_waste, pending, unattributed) and idle."),
    ("CPST by task type", "table", "currencyUSD", """
SELECT task_type, countIf(outcome = 'success') AS successful_tasks, sum(cost_usd) AS attributed_usd,
       sum(cost_usd) / nullIf(countIf(outcome = 'success'), 0) AS attributed_cpst_usd,
       sum(retry_waste_usd) AS retry_waste_usd, sum(failed_task_waste_usd) AS failed_task_waste_usd
FROM tasks WHERE $__timeFilter(minute) GROUP BY task_type ORDER BY attributed_usd DESC
""", (12, 4, 12, 8), "Per task type: the cost of its tasks' calls (idle excluded) per successful task."),
    ("TTFT p95 by replica (s)", "timeseries", "s", """
SELECT $__timeInterval(minute) AS t, replica, quantilesTDigestMerge(0.5, 0.95, 0.99)(ttft_q)[2] AS ttft_p95_s
FROM ops_engine_minutes WHERE $__timeFilter(minute) GROUP BY t, replica ORDER BY t, replica
""", (0, 12, 12, 8), "Windowed TTFT quantile of the engine requests ending in each interval (per-minute rollup)."),
    ("Requests/s by replica", "timeseries", "reqps", """
SELECT $__timeInterval(minute) AS t, replica, sum(requests) / $__interval_s AS requests_per_s
FROM ops_engine_minutes WHERE $__timeFilter(minute) GROUP BY t, replica ORDER BY t, replica
""", (12, 12, 12, 8), "Engine requests finished per second."),
    ("Running and waiting requests by replica", "timeseries", "short", """
SELECT $__timeInterval(minute) AS t, concat(replica, ' ', replaceOne(metric, 'vllm:num_requests_', '')) AS series,
       sum(value_sum) / nullIf(sum(points), 0) AS requests
FROM ops_gauge_minutes
WHERE $__timeFilter(minute) AND metric IN ('vllm:num_requests_running', 'vllm:num_requests_waiting')
GROUP BY t, series ORDER BY t, series
""", (0, 20, 12, 8), "vllm:num_requests_running / _waiting, mean per interval."),
    ("KV-cache use by replica", "timeseries", "percentunit", """
SELECT $__timeInterval(minute) AS t, replica, sum(value_sum) / nullIf(sum(points), 0) AS kv_cache_usage
FROM ops_gauge_minutes
WHERE $__timeFilter(minute) AND metric IN ('vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc')
GROUP BY t, replica ORDER BY t, replica
""", (12, 20, 12, 8), "vllm:kv_cache_usage_perc (0-1), mean per interval."),
    ("Alerts", "table", "short", """
SELECT event_time, rule, severity, replica, state, summary, est_cost_usd
FROM alerts WHERE $__timeFilter(event_time) ORDER BY event_time DESC LIMIT 200
""", (0, 28, 24, 8), "State changes of infercost's alerts (cascading degradation, SLO burn, budgets ...)."),
]


def panel(index: int, title: str, kind: str, unit: str, sql: str, grid, description: str) -> dict:
    x, y, w, h = grid
    timeseries = kind == "timeseries"
    target = {"refId": "A", "datasource": DATASOURCE, "editorType": "sql",
              "queryType": "timeSeries" if timeseries else "table", "format": 0 if timeseries else 1,
              "rawSql": sql.strip()}
    out = {"id": index, "type": kind, "title": title, "description": description, "datasource": DATASOURCE,
           "gridPos": {"x": x, "y": y, "w": w, "h": h}, "targets": [target],
           "fieldConfig": {"defaults": {"unit": unit}, "overrides": []}, "options": {}}
    if timeseries:
        out["options"] = {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}}
        out["fieldConfig"]["defaults"]["custom"] = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10}
    return out


def dashboard() -> dict:
    return {
        "uid": "infercost-overview", "title": "infercost: cost per successful task and live operations",
        "tags": ["infercost", "vllm", "cost"], "timezone": "browser", "schemaVersion": 39, "version": 1,
        "editable": True, "refresh": "30s", "time": {"from": "now-24h", "to": "now"},
        "annotations": {"list": [{
            "name": "infercost alerts", "enable": True, "iconColor": "red", "datasource": DATASOURCE,
            "target": {"refId": "Anno", "editorType": "sql", "queryType": "table", "format": 1, "rawSql": (
                "SELECT fired_at AS time, resolved_at AS timeEnd, concat(rule, ' ', replica) AS title, summary AS text "
                "FROM alerts WHERE state = 'firing' AND fired_at IS NOT NULL AND $__timeFilter(fired_at)")}}]},
        "panels": [panel(i + 1, *p) for i, p in enumerate(PANELS)],
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


if __name__ == "__main__":
    OUT.write_text(render())
    print(f"wrote {OUT}")
