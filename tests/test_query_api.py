"""The CLI reads through the owning service's versioned query API (the answers are the named
queries'); the Prometheus export of the cost figures; task ids unique per demo run; a task cut off by
a shutdown has no outcome (neither failure nor waste); the dashboard's grouped cost queries equal the raw rows they summarise, recomputed in pandas."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import httpx
import pandas as pd
import pytest

from conftest import drop_store
from dashboard_seed import costed_store
from infercost.api import APIServer, QueryAPI
from infercost.costmetrics import CostCollector, exposition
from schema.queries import cost

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def served():
    store, out = costed_store(tasks=200)
    collector = CostCollector(store, clock=lambda: out.end)
    server = APIServer(QueryAPI(store, metrics=lambda: exposition(collector))).start()
    yield store, out, server
    server.stop()
    drop_store(store)


def test_api_answers_are_the_named_queries(served):
    store, out, server = served
    params = {"start": out.start.isoformat(), "end": out.end.isoformat()}
    body = httpx.get(server.url + "/summary", params=params | {"by": "task_type"}, timeout=120).json()
    expected = cost.period_summary(store, out.start, out.end, by="task_type")
    got = {r["grp"]: r for r in body["rows"]}
    assert set(got) == set(expected["grp"])
    for _, row in expected.iterrows():
        assert got[row["grp"]]["spend_usd"] == pytest.approx(row["spend_usd"], rel=1e-12)
        assert got[row["grp"]]["successful_tasks"] == row["successful_tasks"]
    tasks = httpx.get(server.url + "/tasks", params=params | {"limit": 5}).json()["rows"]
    assert len(tasks) == 5
    detail = httpx.get(server.url + "/tasks/" + tasks[0]["task_id"]).json()
    assert detail["task"]["task_id"] == tasks[0]["task_id"]
    assert sum(c["cost_usd"] for c in detail["calls"]) == pytest.approx(detail["task"]["cost_usd"], rel=1e-6)
    # bad input: 400 with the reason; unknown task: 404; never NaN in the JSON
    bad = httpx.get(server.url + "/summary", params={"since": "yesterday"})
    assert bad.status_code == 400 and "since=" in bad.json()["error"]
    assert httpx.get(server.url + "/tasks/nope").status_code == 404
    assert "NaN" not in httpx.get(server.url + "/summary", params={"since": "30d", "by": "model"}).text
    assert httpx.get(server.url).json()["version"] == 1


def test_the_api_token_is_a_bearer_token_in_any_case_of_the_scheme(served):
    store = served[0]
    server = APIServer(QueryAPI(store, token="t0k")).start()
    try:
        url = server.url + "/tasks"
        assert httpx.get(url, params={"limit": 1}).status_code == 401
        assert httpx.get(url, params={"limit": 1}, headers={"Authorization": "Bearer t0"}).status_code == 401
        for header in ("Bearer t0k", "bearer t0k", "BEARER  t0k"):
            assert httpx.get(url, params={"limit": 1}, headers={"Authorization": header}).status_code == 200, header
    finally:
        server.stop()


def test_cost_metrics_for_prometheus(served):
    from prometheus_client.parser import text_string_to_metric_families

    store, out, server = served
    text = httpx.get(server.url.rsplit("/api/", 1)[0] + "/metrics", timeout=120).text
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(text) for s in fam.samples}
    hour = cost.period_summary(store, out.end - timedelta(hours=1), out.end).iloc[0]
    assert samples[("infercost_spend_usd_per_hour", ())] == pytest.approx(hour["spend_usd"], rel=1e-9)
    fleet = (("model", ""), ("task_type", ""), ("tenant", ""))
    assert samples[("infercost_cpst_usd", fleet)] == pytest.approx(hour["cpst_usd"], rel=1e-9)
    chat = cost.period_summary(store, out.end - timedelta(hours=1), out.end, by="task_type")
    chat = chat[chat["grp"] == "chat"].iloc[0]
    key = ("infercost_cpst_usd", (("model", ""), ("task_type", "chat"), ("tenant", "")))
    assert samples[key] == pytest.approx(chat["cpst_usd"], rel=1e-9)
    waste = cost.waste_breakdown(store, out.end - timedelta(hours=1), out.end).set_index("category")
    assert samples[("infercost_waste_ratio", (("category", "failed_task_waste"),))] == pytest.approx(
        waste.loc["failed_task_waste", "share_of_spend"], rel=1e-9)


def test_cli_reads_through_the_service_api_while_it_owns_the_store(served, tmp_path):
    """Fault 3: with a live owner announced in <data dir>/service.json the CLI never opens the store
    (chDB would refuse it): `cost`, `cost --task` and `review` answer through /api/v1."""
    store, out, server = served
    data = tmp_path / "data"
    data.mkdir()
    (data / "service.json").write_text(json.dumps({"pid": os.getpid(), "api_url": server.url}))
    env = dict(os.environ, INFERCOST_DATA_DIR=str(data), NO_PROXY="127.0.0.1,localhost")
    env.pop("INFERCOST_CLICKHOUSE_URL", None)

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "infercost.cli", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)

    result = cli("cost", "--since", "60d")
    assert result.returncode == 0, result.stderr
    assert "reading through its query API" in result.stderr
    total = cost.period_summary(store, out.start - timedelta(days=1), out.end + timedelta(days=1)).iloc[0]
    spend_line = next(line for line in result.stdout.splitlines() if line.startswith("spend $"))
    assert spend_line.split()[-1] == f"{total['spend_usd']:,.4f}"
    task_id = cost.tasks_table(store, out.start, out.end, None, 1).iloc[0]["task_id"]
    result = cli("cost", "--task", task_id)
    assert result.returncode == 0, result.stderr
    assert f"task {task_id}" in result.stdout and "calls by category $" in result.stdout
    result = cli("review", "--week", "2026-W45", "--out", str(tmp_path / "reviews"))
    assert result.returncode == 0, result.stderr
    md = (tmp_path / "reviews" / "infercost-review-2026-W45.md").read_text()
    assert "2026-W45" in md and not (data / "clickhouse").exists()  # no store was created by accident


def test_live_task_ids_are_unique_per_run():
    from infercost.demo import DemoOptions, live_plans, new_run_id

    options = DemoOptions()
    a, b = new_run_id(), new_run_id()
    assert a != b
    first = {p.task_id for p in live_plans(options, a, 120)}
    second = {p.task_id for p in live_plans(options, b, 120)}
    assert first and not first & second
    assert all(t.startswith(f"live-{a}-") for t in first)


def test_a_task_cut_off_by_shutdown_has_no_outcome_and_counts_as_no_failure():
    import asyncio

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from serving.plans import CallPlan, RetryPolicy, StepPlan, TaskPlan
    from serving.workloads.runner import LoadReport, run_task

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    class Hanging:  # a client whose call never returns: the run is stopped while it waits
        async def chat(self, **kwargs):
            await asyncio.sleep(3600)

    plan = TaskPlan("t-1", "chat", "acme", 0.0, (StepPlan("respond", (CallPlan(10, 10),)),))
    report = LoadReport()

    async def main():
        job = asyncio.create_task(run_task(plan, Hanging(), RetryPolicy(), report, provider))
        await asyncio.sleep(0.05)
        job.cancel()
        with pytest.raises(asyncio.CancelledError):
            await job

    asyncio.run(main())
    (root,) = [s for s in exporter.get_finished_spans() if s.name == "task chat"]
    assert "task.outcome" not in root.attributes  # the cost job reads it as unknown: pending, not waste
    assert root.attributes["error.type"] == "shutdown"


EXACT = {"rel": 1e-9, "abs": 1e-12}
DIMS = {"task_type": "task_type", "tenant": "tenant_id", "model": "model"}


def _raw(store, table: str, start, end) -> pd.DataFrame:
    return store.query_df(f"SELECT * FROM {table} WHERE minute >= {{s:DateTime}} AND minute < {{e:DateTime}}",
                          {"s": start.replace(tzinfo=None), "e": end.replace(tzinfo=None)}, tag="test.raw")


def test_one_query_holds_every_grouping_as_the_raw_rows_do(served):
    """``cost.period_summaries`` answers the cost page's headline and its three breakdowns in
    one query; every figure recomputed in pandas from the raw rows of ``call_costs``,
    ``replica_minutes`` and ``tasks`` (the cost jobs' outputs over the seeded spans)."""
    store, out, _ = served
    start, end = out.start + timedelta(minutes=5), out.end  # a window that cuts tasks and calls
    pieces, minutes, tasks = (_raw(store, t, start, end) for t in ("call_costs", "replica_minutes", "tasks"))
    assert len(pieces) > 100 and tasks["outcome"].eq("success").sum() > 50  # the seed gave real data

    got = cost.period_summaries(store, start, end, ("", *DIMS))
    assert list(got) == ["", *DIMS]
    spend, idle, alloc = minutes["spend_usd"].sum(), minutes["idle_usd"].sum(), minutes["allocated_usd"].sum()

    fleet = got[""]
    assert len(fleet) == 1 and fleet.iloc[0]["grp"] == ""
    assert fleet.iloc[0]["spend_usd"] == pytest.approx(spend, **EXACT)  # exact mode: the replica-minutes' own
    assert fleet.iloc[0]["idle_usd"] == pytest.approx(idle, **EXACT)
    assert fleet.iloc[0]["allocated_usd"] == pytest.approx(pieces["cost_usd"].sum(), **EXACT)
    assert fleet.iloc[0]["requests"] == pieces["requests"].sum()
    assert fleet.iloc[0]["successful_tasks"] == (tasks["outcome"] == "success").sum()

    for by, column in DIMS.items():
        frame = got[by].set_index("grp")
        allocated = pieces.groupby(column)["cost_usd"].sum()
        ended = tasks.groupby(column)["outcome"].agg(total="size", ok=lambda s: (s == "success").sum())
        assert set(frame.index) == set(allocated.index) | set(ended.index), by
        for grp, row in frame.iterrows():
            a = allocated.get(grp, 0.0)
            assert row["allocated_usd"] == pytest.approx(a, **EXACT), (by, grp)
            # a group's spend = its allocated cost + the fleet's idle in proportion to it
            assert row["spend_usd"] == pytest.approx(a + idle * a / alloc, **EXACT), (by, grp)
            assert row["tasks"] == (ended.loc[grp, "total"] if grp in ended.index else 0), (by, grp)
            assert row["successful_tasks"] == (ended.loc[grp, "ok"] if grp in ended.index else 0), (by, grp)
        assert frame["spend_usd"].sum() == pytest.approx(spend, **EXACT), by  # the groups add up to the fleet
        # the one-query frame is what the single-grouping call returns, row for row
        pd.testing.assert_frame_equal(got[by], cost.period_summary(store, start, end, by))


def test_replica_successes_are_the_distinct_successful_tasks_each_replica_ran(served):
    """``cost.replica_windows`` probes the call pieces against the window's successful tasks
    instead of a DISTINCT over every piece; the counts recomputed in pandas from the raw rows."""
    store, out, _ = served
    start, end, window = out.start, out.end, 600
    windows = cost.replica_windows(store, start, end, window)
    pieces = _raw(store, "call_costs", start - timedelta(days=1), end)
    tasks = _raw(store, "tasks", start, end)
    ok = tasks[tasks["outcome"] == "success"][["task_id", "minute"]]
    pairs = pieces[pieces["task_id"] != ""][["task_id", "replica"]].drop_duplicates().merge(ok, on="task_id")
    pairs["window_start"] = pd.to_datetime(pairs["minute"]).dt.floor(f"{window}s")
    expected = pairs.groupby(["replica", "window_start"])["task_id"].nunique()
    assert expected.sum() > 50
    got = windows.assign(window_start=pd.to_datetime(windows["window_start"]))
    got = got[got["successful_tasks"] > 0].set_index(["replica", "window_start"])["successful_tasks"]
    assert got.to_dict() == {k: v for k, v in expected.to_dict().items()}
    # and a success on two replicas counts on both: the seed's client retries move tasks across replicas
    assert pairs.groupby("task_id")["replica"].nunique().max() >= 2
