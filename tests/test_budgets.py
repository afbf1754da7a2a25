"""Budgets per tenant / task type (fleet.yaml), the budget-burn and spend-anomaly alert rules, and the
budget table of the cost page: hand-checked against the cost job's own period summary."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from alerts.config import AlertConfig
from alerts.model import Level
from alerts.rules_budget import budget_signals, spend_anomaly_signals
from conftest import drop_store, new_store
from dashboard_seed import generate, run_cost_jobs, stop_periodic_jobs
from schema.budgets import Budget, parse_budgets, sync_budgets
from schema.queries import cost
from schema.queries.budgets import budget_status

UTC = timezone.utc


def test_parse_budgets_reports_every_problem():
    assert parse_budgets({"tenant": {"acme": {"usd_per_day": 40, "usd_per_week": 200}}}) == [
        Budget("tenant", "acme", "day", 40.0), Budget("tenant", "acme", "week", 200.0)]
    with pytest.raises(ValueError) as exc:
        parse_budgets({"team": {}, "tenant": {"acme": {"usd_per_month": 1}, "b": {"usd_per_day": -1}}})
    text = str(exc.value)
    assert "budgets.team: unknown scope" in text and "usd_per_month: unknown" in text and "must be a number > 0" in text


@pytest.fixture(scope="module")
def seeded():
    store = new_store()
    stop_periodic_jobs(store)
    out = generate(store, tasks=300, hours=1)  # Monday 2026-11-02 10:00-11:00 UTC
    before = generate(store, tasks=60, hours=1, seed=11, start=out.start - timedelta(days=7))  # the baseline hour
    run_cost_jobs(store, before.start, before.end)
    run_cost_jobs(store, out.start, out.end)
    yield store, out
    drop_store(store)


def test_budget_burn_projects_the_day_and_fires_on_overspend(seeded):
    store, out = seeded
    now = out.end  # 11:00 UTC: 11 of 24 hours of the day have passed
    day = datetime(2026, 11, 2, tzinfo=UTC)
    spent = {t: float(cost.period_summary(store, day, now, None, {"tenant": t}).iloc[0]["allocated_usd"])
             for t in ("acme", "globex", "initech")}
    assert all(v > 0 for v in spent.values())
    sync_budgets(store, [Budget("tenant", "acme", "day", spent["acme"] * 2),  # on course for 24/11 = 2.18x
                         Budget("tenant", "globex", "day", spent["globex"] / 2),  # already over
                         Budget("tenant", "initech", "day", spent["initech"] * 3),  # fine: 2.18/3
                         Budget("task_type", "chat", "week", 1000.0)])
    status = budget_status(store, now).set_index(["scope", "name", "period"])
    acme = status.loc[("tenant", "acme", "day")]
    assert acme["spent_usd"] == pytest.approx(spent["acme"], rel=1e-9)
    assert acme["elapsed_s"] == 11 * 3600 and acme["period_s"] == 86400
    assert acme["projected_usd"] == pytest.approx(spent["acme"] * 24 / 11, rel=1e-9)
    week = status.loc[("task_type", "chat", "week")]  # Monday: the week started at the same midnight
    chat = float(cost.period_summary(store, day, now, None, {"task_type": "chat"}).iloc[0]["allocated_usd"])
    assert week["spent_usd"] == pytest.approx(chat, rel=1e-9) and week["period_s"] == 7 * 86400

    signals = {s.key: s for s in budget_signals(store, now, AlertConfig())}
    assert signals["tenant:acme:day"].level is Level.FIRE and signals["tenant:acme:day"].severity == "warning"
    assert signals["tenant:globex:day"].level is Level.FIRE and signals["tenant:globex:day"].severity == "critical"
    assert signals["tenant:initech:day"].level is Level.CLEAR
    assert signals["task_type:chat:week"].level is Level.CLEAR
    assert "spent $" in signals["tenant:globex:day"].summary and "200%" in signals["tenant:globex:day"].summary
    # early in a period a projection is noise: nothing fires before 10 % of it has passed
    early = datetime(2026, 11, 2, 2, tzinfo=UTC)
    assert all(s.level is Level.CLEAR or s.severity == "critical"
               for s in budget_signals(store, early, AlertConfig()))


def test_spend_anomaly_compares_the_same_hour_last_week(seeded):
    store, out = seeded
    last_start = out.start - timedelta(days=7)
    config = AlertConfig()
    config.spend_anomaly.min_usd_per_hour = 0.0
    config.spend_anomaly.ratio = 1.2  # 300 tasks this hour against 60: allocated spend rose ~1.5-2x
    signals = {s.key: s for s in spend_anomaly_signals(store, out.end, config)}
    assert signals, "no baseline found a week earlier"
    for tenant in ("acme", "globex", "initech"):
        this = float(cost.period_summary(store, out.start, out.end, None, {"tenant": tenant}).iloc[0]["allocated_usd"])
        last = float(cost.period_summary(store, last_start, out.start - timedelta(days=7) + timedelta(hours=1), None,
                                         {"tenant": tenant}).iloc[0]["allocated_usd"])
        s = signals[f"tenant:{tenant}"]
        assert s.figures["this_hour_usd"] == pytest.approx(this, abs=1e-4)
        assert s.figures["last_week_usd"] == pytest.approx(last, abs=1e-4)
        assert s.figures["ratio"] == pytest.approx(this / last, abs=1e-3) and this / last > 1.2
        assert s.level is Level.FIRE
    # the dollar floor keeps small tenants quiet, the ratio calm ones
    config.spend_anomaly.min_usd_per_hour = 1e6
    assert all(s.level is Level.CLEAR for s in spend_anomaly_signals(store, out.end, config))
    config.spend_anomaly.min_usd_per_hour, config.spend_anomaly.ratio = 0.0, 100.0
    assert all(s.level is Level.CLEAR for s in spend_anomaly_signals(store, out.end, config))


def test_cost_page_and_review_show_the_budgets(seeded):
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    from app import store_provider
    from app.review import build_review

    store, out = seeded
    day = datetime(2026, 11, 2, tzinfo=UTC)
    acme = float(cost.period_summary(store, day, out.end, None, {"tenant": "acme"}).iloc[0]["allocated_usd"])
    sync_budgets(store, [Budget("tenant", "acme", "day", acme / 4)])
    store_provider.set_store(store)
    try:
        at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app" / "main.py"), default_timeout=90)
        at.query_params.update({"range": "1h", "end": "2026-11-02T11:00:00Z"})
        at.switch_page("views/cost.py")
        at.run()
        assert not at.exception
        warnings = [w.value for w in at.warning]
        assert any("**acme**: over budget" in w and "$" in w for w in warnings), warnings
    finally:
        store_provider.clear()
    review = build_review(store, "2026-W45", now=out.end + timedelta(days=7))
    (row,) = review.budgets
    assert (row.scope, row.name, row.period, row.periods_over) == ("tenant", "acme", "day", 1)
    assert row.spent_usd == pytest.approx(acme, rel=1e-6)
