"""Planner verdicts (backtest, frontier, recommendation, saving, levers, search moves), the stored
run read back through the named queries, and the Planner page over it."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app import store_provider
from planner import report, results
from planner.candidates import Candidate, Pool
from planner.evaluate import CandidateResult
from planner.run import PlanResult, diagnose
from planner.search import lever_candidates, neighbours
from schema.queries import planner as pq

MAIN = str(Path(__file__).resolve().parents[1] / "app" / "main.py")
H100, A100 = "h100-llama-3.1-8b", "a100-llama-3.1-8b"


def result(name, cpst, ttft, goodput, meets=True, pools=(("H100", 1),), successes=1000, attain=0.99, **kw):
    spec = Candidate(name, tuple(Pool(t, n, H100 if t == "H100" else A100) for t, n in pools)).spec()
    r = CandidateResult(name, spec, kw.pop("origin", "user"), spend_usd=cpst * successes, cpst_usd=cpst,
                        attributed_cpst_usd=cpst / 2, idle_ratio=0.5, goodput_per_hour=goodput, tasks=successes,
                        successful_tasks=successes, ttft_p95_s=ttft, e2e_p95_s=ttft * 10, meets_slo=meets,
                        slo_attainment_min=attain, **kw)
    r.per_type = {"chat": {"tasks": successes, "successful_tasks": successes, "slo_attainment": attain,
                           "ttft_p95_s": ttft, "e2e_p95_s": ttft * 10, "slo_ttft_ms": 2000.0, "slo_e2e_ms": None,
                           "meets_slo": meets}}
    return r


CURRENT = result("current", 0.20, 0.30, 40.0, pools=(("H100", 2), ("A100", 2)))
CHEAP_OK = result("cheap", 0.08, 0.40, 39.0, pools=(("A100", 1),), attain=0.96)
CHEAPER_BAD = result("cheaper", 0.05, 2.50, 20.0, meets=False, pools=(("A100", 1),), attain=0.60)
FAST = result("fast", 0.25, 0.20, 41.0, pools=(("H100", 3),))
DOMINATED = result("dominated", 0.22, 0.35, 39.5, pools=(("H100", 2),))
ALL = [CURRENT, CHEAP_OK, CHEAPER_BAD, FAST, DOMINATED]


def test_frontier_recommendation_and_saving():
    assert report.frontier(ALL) == {"cheap", "cheaper", "fast", "current"}
    best = report.recommend(ALL, CURRENT)
    assert best is CHEAP_OK  # the cheaper one misses an SLO
    s = report.saving(CURRENT, best)
    assert s.ratio == pytest.approx(1 - 0.08 / 0.20) and s.usd == pytest.approx((0.20 - 0.08) * 1000)
    assert report.recommend([CHEAPER_BAD], CURRENT) is None
    rk = report.risk(CURRENT, CHEAP_OK, 0.95)
    assert rk["level"] == "medium" and rk["slo_margin"] == pytest.approx(0.01)  # 96 % vs a 95 % target
    assert rk["ttft_p95_change"] == pytest.approx(0.40 / 0.30 - 1)
    assert report.risk(CURRENT, CHEAPER_BAD, 0.95)["level"] == "high"
    assert report.risk(CURRENT, FAST, 0.95)["level"] == "low"


def test_backtest_passes_within_the_tolerance_only():
    ok = report.backtest({"cpst_usd": 0.21, "ttft_p95_s": 0.31}, CURRENT, 0.10)
    assert ok["passed"] and ok["cpst_error"] == pytest.approx(0.01 / 0.21)
    bad = report.backtest({"cpst_usd": 0.20, "ttft_p95_s": 0.50}, CURRENT, 0.10)
    assert not bad["passed"] and bad["problems"] == ["p95 TTFT off by 40.0% (> 10%)"]
    none = report.backtest({"cpst_usd": None, "ttft_p95_s": 0.30}, CURRENT, 0.10)
    assert none["problems"] == ["CPST: not measurable on both sides"]
    lines = diagnose([("2026-11-02T10:00:00", 100, 0, 0.30), ("2026-11-02T11:00:00", 900, 12, 3.0)],
                     [("2026-11-02T10:00:00", 100, 0, 0.31), ("2026-11-02T11:00:00", 900, 3, 1.0)])
    assert lines[0].startswith("2026-11-02T11h: measured 900 tasks (12 unsuccessful), p95 TTFT 3.00 s; replay 900 (3)")


def test_levers_take_the_best_candidate_of_each_move():
    lev = report.levers(ALL + [result("lever-share", 0.15, 0.5, 40.0, origin="lever")], CURRENT,
                        {"share": ["lever-share"], "avoid": [], "delay": ["cheaper"]}, CHEAP_OK, 0.95)
    by = {x["move"]: x for x in lev}
    assert by["share"]["candidate"] == "lever-share" and by["share"]["saving_usd"] == pytest.approx(50.0)
    assert by["move"]["candidate"] == "cheap"
    assert by["delay"]["risk"]["level"] == "high"  # its only candidate misses an SLO: shown, flagged
    assert by["avoid"]["candidate"] is None and by["avoid"]["note"] == "not evaluated"


def test_search_moves():
    cur = Candidate("current", (Pool("H100", 2, H100, max_num_seqs=16), Pool("A100", 2, A100, max_num_seqs=16)),
                    origin="current", replica_ids=("r0", "r1", "r2", "r3"))
    levers = lever_candidates(cur, [16, 64, 256])
    assert [c.policy for c in levers["avoid"]] == ["session_affinity"]
    assert [p.max_num_seqs for p in levers["share"][0].pools] == [64, 64]
    assert levers["share"][0].replica_ids == ("r0", "r1", "r2", "r3")  # same replicas, other setting
    assert {c.name for c in levers["delay"]} == {"lever-delay-autoscale", "lever-delay-admission"}
    moves = {c.label() for c in neighbours(cur, {"H100": H100, "A100": A100}, [16, 64], ["least_loaded"], 8)}
    assert "1x H100 seqs 16 + 2x A100 seqs 16 · least_loaded" in moves  # one H100 fewer
    assert "1x H100 seqs 16 + 3x A100 seqs 16 · least_loaded" in moves  # one H100 moved to A100
    assert "2x H100 seqs 64 + 2x A100 seqs 64 · least_loaded" in moves
    assert all(c.replica_ids is None for c in neighbours(cur, {"H100": H100}, [16], [], 8))


def _run() -> PlanResult:
    run = PlanResult(run_id="run-1", start=datetime(2026, 11, 2), end=datetime(2026, 11, 9),
                     workload={"tasks": 1000, "calls": 9000, "hourly_tasks": [5, 9, 3]}, current="current",
                     backtest=report.backtest({"cpst_usd": 0.205, "ttft_p95_s": 0.29}, CURRENT, 0.10),
                     results=ALL, frontier=report.frontier(ALL), recommended="cheap", saving_ratio=0.6,
                     saving_usd=120.0, status="recommended", message="cheap (1x A100): saving 60.0%",
                     assumptions={"profile h100-llama-3.1-8b": "from profiles.py"}, wall_seconds=42.0)
    run.levers = report.levers(ALL, CURRENT, {}, CHEAP_OK, 0.95)
    return run


def planner_page(store):
    """The Planner page run once over ``store``; raises when the page did."""
    store_provider.set_store(store)
    try:
        at = AppTest.from_file(MAIN, default_timeout=60)
        at.switch_page("views/planner.py")
        at.run()
    finally:
        store_provider.clear()
    assert not at.exception, [e.value for e in at.exception]
    return at


@pytest.fixture
def saved(store):
    results.save(store, _run())
    store_provider.set_store(store)
    yield store
    store_provider.clear()


def test_a_saved_run_reads_back_through_the_named_queries(saved):
    runs = pq.runs(saved)
    assert list(runs["run_id"]) == ["run-1"] and runs["status"].iloc[0] == "recommended"
    cands = pq.run_candidates(saved, "run-1")
    assert list(cands["candidate"]) == ["cheaper", "cheap", "current", "dominated", "fast"]  # cheapest first
    row = cands.set_index("candidate").loc["cheap"]
    assert (row["recommended"], row["meets_slo"], row["on_frontier"], row["replicas"]) == (1, 1, 1, 1)
    assert row["cpst_usd"] == pytest.approx(0.08)
    types = pq.run_task_types(saved, "run-1")
    assert len(types) == 5 and set(types["task_type"]) == {"chat"}
    assert pq.run_for_period(saved, datetime(2026, 11, 2), datetime(2026, 11, 9)) == "run-1"
    assert pq.run_for_period(saved, datetime(2026, 11, 9), datetime(2026, 11, 16)) is None


def test_planner_page_shows_the_stored_run(saved):
    at = planner_page(saved)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["CPST measured"] == "$0.2050" and metrics["CPST replayed"] == "$0.2000"
    assert metrics["Recommended"] == "cheap" and metrics["Predicted saving"] == "60.0 %"
    assert at.success, "the passed backtest is shown first"
    assert [df.value.shape[0] for df in at.dataframe][:1] == [5]


def test_planner_page_without_runs_says_what_to_do(store):
    at = planner_page(store)
    assert any("infercost plan --since 7d" in i.value for i in at.info)


def test_weekly_review_takes_its_levers_from_the_planner(saved):
    from app.review.levers import planner_levers

    levers = planner_levers(pq.run(saved, "run-1"))
    by = {lv.move: lv for lv in levers}
    assert [lv.move for lv in levers] == ["avoid", "share", "move", "delay"]
    # move: the recommendation, (0.20 - 0.08) x 1000 successes over the run's 7 days
    assert by["move"].saving_usd == pytest.approx(120.0) and by["move"].measured == pytest.approx(0.6)
    assert "Risk medium" in by["move"].method and ("risk", by["move"].detail[1][1]) == by["move"].detail[1]
    assert by["avoid"].saving_usd is None and "no candidate changed this move" in by["avoid"].method
    assert planner_levers(pq.run(saved, "no-such-run")) == []


def test_a_run_screened_on_its_busiest_day_says_so_on_the_page_and_carries_its_levers_over_the_week(store):
    from app.review.levers import planner_levers

    run = _run()
    # the week's replays: current and cheap; the busiest day's: every candidate, 200 of the week's 1000 successes
    run.results = [CURRENT, CHEAP_OK]
    day = [result(r.name, r.cpst_usd, r.ttft_p95_s, r.goodput_per_hour, r.meets_slo, successes=200,
                  attain=r.slo_attainment_min) for r in ALL]
    run.screened, run.screen = day, {"start": "2026-11-05T09:00:00", "end": "2026-11-06T09:00:00", "tasks": 210}
    run.levers = report.levers(day, day[0], {}, day[1], 0.95)
    for lever in run.levers:
        lever["window"] = {"start": run.screen["start"], "end": run.screen["end"], "to_period": 1000 / 200}
    results.save(store, run)
    assert pq.run_candidates(store, "run-1")["candidate"].tolist() == ["cheap", "current"]  # the week's only
    assumptions = json.loads(pq.run(store, "run-1")["assumptions"].iloc[0])
    assert [c["candidate"] for c in assumptions["screened"]] == ["current", "cheap", "cheaper", "fast", "dominated"]
    at = planner_page(store)
    assert any("5 candidates were compared on the busiest day (2026-11-05 09:00 – 2026-11-06 09:00 UTC, 210 tasks)"
               in c.value for c in at.caption)
    move = {lv.move: lv for lv in planner_levers(pq.run(store, "run-1"))}["move"]
    # (0.20 - 0.08) x 200 successes on the day = 24.0, over the week's 1000 successes: 120.0
    assert move.saving_usd == pytest.approx(120.0) and "the busiest day's workload" in move.method
    text = report.render(run)
    assert "Compared on the busiest day (2026-11-05T09:00 .. 2026-11-06T09:00 UTC, 210 tasks)" in text
    assert "figures of the busiest day" in text and "2 candidates over the period (5 compared on the busiest day)" in text


def test_the_text_report_prints_the_backtest_first_and_every_measure():
    text = report.render(_run())
    assert text.index("Backtest") < text.index("candidate ") < text.index("Recommendation:")
    assert "  CPST      measured $0.2050  replayed $0.2000  error 2.4%" in text
    assert "=> PASSED (tolerance 10%)" in text
    row = next(line for line in text.splitlines() if line.startswith("cheap "))
    assert row.split()[-5:] == ["96.0%", "frontier,", "meets", "SLO,", "RECOMMENDED"]
    assert "waste by category (USD)" in text and "per task type vs SLO" in text
    assert any(line.startswith("cheaper") and line.endswith("NO") for line in text.splitlines())


def test_a_failed_backtest_recommends_nothing_and_says_where(store):
    run = _run()
    run.run_id, run.status, run.recommended, run.saving_ratio, run.saving_usd = "run-2", "backtest_failed", "", None, None
    run.backtest = report.backtest({"cpst_usd": 0.20, "ttft_p95_s": 1.0}, CURRENT, 0.10)
    run.message = "none: the backtest failed"
    run.diagnosis = ["2026-11-08T23h: measured 900 tasks (12 unsuccessful), p95 TTFT 3.00 s; replay 900 (3), 1.00 s"]
    run.results, run.levers = [CURRENT], []
    text = report.render(run)
    assert "=> FAILED: p95 TTFT off by 70.0% (> 10%)" in text and run.diagnosis[0] in text
    results.save(store, run)
    at = planner_page(store)
    assert at.error and "Backtest failed" in at.error[0].value and run.message in at.error[0].value
    # the recommendation section does not repeat the message the backtest's box carries
    assert [w.value for w in at.warning] == ["None: the backtest above failed, so the replay cannot be trusted to predict."]
    assert any(run.diagnosis[0] in c.value for c in at.caption)
    assert not any(m.label == "Recommended" for m in at.metric)


def test_neighbours_of_an_autoscaled_fleet_keep_a_valid_rule():
    from serving.emulator.sim_control import AutoscaleRule

    cur = Candidate("auto", (Pool("H100", 2, H100), Pool("A100", 2, A100)),
                    autoscale=AutoscaleRule(min_replicas=1, max_replicas=4))
    moves = neighbours(cur, {"H100": H100, "A100": A100}, [16], [], 8)
    smaller = [c for c in moves if c.n_replicas == 3]
    assert smaller and all(c.autoscale.max_replicas == 3 and c.autoscale.min_replicas == 1 for c in smaller)
    bigger = [c for c in moves if c.n_replicas == 5]
    assert bigger and all(c.autoscale.max_replicas == 5 for c in bigger)  # the rule spanned the whole fleet
