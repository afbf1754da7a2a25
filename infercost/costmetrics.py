"""The cost figures as Prometheus metrics (``/metrics`` of the query API), for Prometheus, Grafana and
Alertmanager users.

Every value is a named query's (``cost.period_summaries``, ``cost.waste_breakdown``) over a trailing
window (default the last hour, ending at the newest whole minute; the window is in each help text and
the ``infercost_cost_window_seconds`` gauge). Gauges, not counters: a cost figure of a window is
recomputed when late data arrives, so it can go down. Results are cached ``cache_s`` seconds so
frequent scrapes do not load the store. Labels are low-cardinality (task type, tenant, model,
category; never a task id).

Metric names (``infercost_`` prefix, the unit in the name, as Prometheus' naming guide asks, so a
reader of a bare series knows what it counts):

* ``infercost_spend_usd_per_hour`` — fleet spend rate (busy and idle GPUs).
* ``infercost_cpst_usd`` / ``infercost_attributed_cpst_usd`` — cost per successful task (all spend /
  allocated only). Labels ``task_type``, ``tenant``, ``model``: the fleet series has all three empty,
  a per-dimension series sets one (``infercost_cpst_usd{task_type="chat",tenant="",model=""}``).
* ``infercost_waste_usd_per_hour{category}`` and ``infercost_waste_ratio{category}`` — retry_waste,
  failed_task_waste, unattributed, pending, idle (ratio = share of spend).
* ``infercost_goodput_tasks_per_hour`` — successful tasks within SLO per hour; fleet and by dimension.
* ``infercost_successful_tasks`` — successful tasks ended in the window; fleet and by dimension.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from schema.queries import num as _num

DIMENSIONS = ("task_type", "tenant", "model")
WASTE = ("retry_waste", "failed_task_waste", "unattributed", "pending", "idle")


class CostCollector:
    """A prometheus_client collector reading the cost figures of the trailing ``window_s`` seconds."""

    def __init__(self, store, window_s: int = 3600, cache_s: float = 30.0, clock=None):
        self.store, self.window_s, self.cache_s = store, int(window_s), cache_s
        self.clock = clock or (lambda: datetime.now(timezone.utc))
        self._lock = threading.Lock()
        self._cached: tuple[float, list] | None = None

    def _families(self) -> list:
        from schema.queries import cost

        end = self.clock().replace(second=0, microsecond=0)
        start = end - timedelta(seconds=self.window_s)
        hours = self.window_s / 3600.0
        w = f"over the last {self.window_s // 60} min"
        window = GaugeMetricFamily("infercost_cost_window_seconds", "Length of the trailing window of the cost "
                                   "figures (seconds).", value=self.window_s)
        spend = GaugeMetricFamily("infercost_spend_usd_per_hour", f"GPU spend rate, busy and idle, USD per hour, {w}.")
        cpst = GaugeMetricFamily("infercost_cpst_usd", f"Cost per successful task (all spend / successes), USD, {w}.",
                                 labels=list(DIMENSIONS))
        acpst = GaugeMetricFamily("infercost_attributed_cpst_usd", f"Attributed CPST (allocated spend, idle "
                                  f"excluded, / successes), USD, {w}.", labels=list(DIMENSIONS))
        goodput = GaugeMetricFamily("infercost_goodput_tasks_per_hour", f"Successful tasks within their SLO per "
                                    f"hour, {w}.", labels=list(DIMENSIONS))
        succ = GaugeMetricFamily("infercost_successful_tasks", f"Tasks that succeeded, {w}.",
                                 labels=list(DIMENSIONS))
        waste = GaugeMetricFamily("infercost_waste_usd_per_hour", f"Spend by waste category, USD per hour, {w}.",
                                  labels=["category"])
        ratio = GaugeMetricFamily("infercost_waste_ratio", f"Share of spend by waste category (0..1), {w}.",
                                  labels=["category"])

        def add(row, dim: str, value: str):
            labels = [value if d == dim else "" for d in DIMENSIONS]
            for fam, key in ((cpst, "cpst_usd"), (acpst, "attributed_cpst_usd"), (goodput, "goodput_per_hour"),
                             (succ, "successful_tasks")):
                v = _num(row.get(key))
                if v is not None:
                    fam.add_metric(labels, v)

        # the fleet row and the three breakdowns in one query (each source read once for all four)
        summaries = cost.period_summaries(self.store, start, end, ("",) + DIMENSIONS)
        fleet = summaries[""]
        if len(fleet):
            row = fleet.iloc[0].to_dict()
            v = _num(row.get("spend_usd"))
            if v is not None:
                spend.add_metric([], v / hours)
            add(row, "fleet", "")
        for dim in DIMENSIONS:
            for row in summaries[dim].to_dict("records"):
                add(row, dim, str(row.get("grp") or "(none)"))
        breakdown = cost.waste_breakdown(self.store, start, end)
        for row in breakdown.to_dict("records"):
            if row["category"] in WASTE:
                usd = _num(row.get("usd")) or 0.0
                waste.add_metric([row["category"]], usd / hours)
                share = _num(row.get("share_of_spend"))
                if share is not None:
                    ratio.add_metric([row["category"]], share)
        return [window, spend, cpst, acpst, goodput, succ, waste, ratio]

    def collect(self):
        with self._lock:
            now = time.monotonic()
            if self._cached is None or now - self._cached[0] > self.cache_s:
                self._cached = (now, self._families())
            families = self._cached[1]
        yield from families


def exposition(collector: CostCollector) -> str:
    """The Prometheus text exposition of ``collector``'s metrics."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry).decode()
