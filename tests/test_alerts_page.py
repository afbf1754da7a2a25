"""The Alerts page as a triage view (streamlit.testing AppTest) over alerts the evaluator wrote while
replaying the hand-made cascade (tests/alerts_helpers.py): the open cascade pinned with its chain and
culprit evidence, members grouped under it, filters and ``?alert_id=`` deep links from the URL, and
the page's logic (app/alert_views.py) on plain rows."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from alerts.config import AlertConfig
from alerts.evaluator import Evaluator
from alerts.model import alert_id
from app import alert_views as av
from app import store_provider
from tests.alerts_helpers import T0, seed_cascade_timeline

MAIN = str(Path(__file__).resolve().parents[1] / "app" / "main.py")
RANGE = {"range": "1h", "end": "2026-11-02T13:00:00Z"}
CASCADE_ID = alert_id("cascading_degradation", "")


@pytest.fixture(scope="module")
def replayed(module_store):
    seed_cascade_timeline(module_store, T0)
    evaluator = Evaluator(module_store, AlertConfig())
    for minute in range(1, 15):  # the cascade fires at 12:09 and is still open at 12:14
        evaluator.step(T0 + timedelta(minutes=minute))
    store_provider.set_store(module_store)
    yield module_store
    store_provider.clear()


def _page(params: dict) -> AppTest:
    at = AppTest.from_file(MAIN, default_timeout=90)
    at.query_params.update(params)
    at.switch_page("views/alerts.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_open_cascade_is_pinned_with_its_chain_and_members_grouped(replayed):
    at = _page(RANGE)
    text = "\n".join(m.value for m in at.markdown)
    assert "Cascading degradation — culprit `r2`" in text and f"?alert_id={CASCADE_ID}" in text
    metrics = {m.label: m.value for m in at.metric}
    # at 12:14: the cascade, r2's degradation, retry amplification, queue growth, 4 x saturation
    assert metrics["Firing"] == "8" and metrics["Pending"] == "0"
    assert metrics["Grouped under a cascade"] == "7"
    chain = next(d.value for d in at.dataframe if "step" in d.value.columns)
    assert list(chain["step"]) == ["trigger", "sustaining", "pressure"]
    candidates = next(d.value for d in at.dataframe if "evidence" in d.value.columns and "replica" in d.value.columns)
    assert list(candidates["replica"]) == ["r2"] and candidates.iloc[0]["speed_after"] == 3.0
    # its onset is a time in the viewer's zone (the trigger step's), and a step not found is a blank number
    trigger_at = chain.loc[chain["step"] == "trigger", "at"].iloc[0]
    assert candidates.iloc[0]["onset_at"].strftime("%Y-%m-%d %H:%M:%S") == trigger_at
    assert candidates["error_rate_before"].dtype == "float64" and pd.isna(candidates.iloc[0]["error_rate_before"])
    open_table = next(d.value for d in at.dataframe if "grouped" in d.value.columns)
    assert open_table.iloc[0]["rule"] == "cascading_degradation"  # triage order: the cascade first
    assert set(open_table.loc[open_table["rule"] != "cascading_degradation", "grouped"]) == {"under cascade"}
    # cost at stake: no cost-engine spend in this store, so the cascade's own estimate
    assert metrics["Cost at stake"].startswith("$") and metrics["Cost at stake"] != "$0.00"


def test_filters_and_deep_links_come_from_the_url(replayed):
    at = _page({**RANGE, "rule": ["saturation"], "replica": ["r1"]})
    open_table = next(d.value for d in at.dataframe if "grouped" in d.value.columns)
    assert list(open_table["rule"]) == ["saturation"] and list(open_table["replica"]) == ["r1"]
    linked = _page({**RANGE, "alert_id": CASCADE_ID})
    text = "\n".join(m.value for m in linked.markdown)
    assert f"**Linked alert** `{CASCADE_ID}` · cascading_degradation" in text
    bad = _page({**RANGE, "alert_id": "not-an-id"})
    assert any("Ignored the link's alert id" in w.value for w in bad.warning)


def test_triage_order_and_cost_at_stake_on_plain_rows():
    rows = pd.DataFrame([
        {"alert_id": "a", "rule": "saturation", "severity": "warning", "state": "firing", "replica": "r1",
         "started_at": pd.Timestamp("2026-11-02 12:05"), "evidence": json.dumps({"inhibited_by": "c"}),
         "est_cost_usd": None},
        {"alert_id": "b", "rule": "replica_down", "severity": "critical", "state": "pending", "replica": "r3",
         "started_at": pd.Timestamp("2026-11-02 12:06"), "evidence": "{}", "est_cost_usd": None},
        {"alert_id": "c", "rule": "cascading_degradation", "severity": "critical", "state": "firing",
         "replica": "r2", "started_at": pd.Timestamp("2026-11-02 12:01"), "evidence": "{}", "est_cost_usd": 4.5},
        {"alert_id": "d", "rule": "replica_degradation", "severity": "warning", "state": "firing", "replica": "r4",
         "started_at": pd.Timestamp("2026-11-02 12:07"),
         "evidence": json.dumps({"figures": {"data_state": "no_data"}}), "est_cost_usd": None},
    ])
    ordered = av.triage(rows)
    assert list(ordered["alert_id"]) == ["c", "b", "d", "a"]  # cascade, critical, then warnings newest first
    assert list(ordered["inhibited_by"]) == ["", "", "", "c"] and list(ordered["no_data"]) == [False, False, True, False]
    spend = {"c": {"r1": 1.0, "r2": 2.0, "r3": 3.0}, "b": {"r3": 0.5}, "d": {}, "a": {"r1": 0.25}}
    stake = av.cost_at_stake(ordered, spend, T0)
    # the cascade affects the fleet (1 + 2 + 3); the others their replica; d has no spend and no estimate
    assert list(stake.fillna(-1)) == [6.0, 0.5, -1, 0.25]
    assert av.affected_replicas({"rule": "replica_down", "replica": "r3"}, ["r1", "r3"]) == ["r3"]
    assert av.affected_replicas({"rule": "slo_burn_rate", "replica": ""}, ["r1", "r3"]) == ["r1", "r3"]


def _in_order(node) -> list[tuple[str, str]]:
    """(element type, text) of the page's elements in the order drawn."""
    out = []
    for child in getattr(node, "children", {}).values():
        value = getattr(child, "value", None)
        if isinstance(value, str):
            out.append((child.type, value))
        out.extend(_in_order(child))
    return out


def test_a_resolved_cascade_is_shown_with_the_incidents_not_under_open(store):
    # the same cascade evaluated to 12:24: r2 recovered at 12:10, the cascade resolved at 12:20
    seed_cascade_timeline(store, T0, minutes=25)
    evaluator = Evaluator(store, AlertConfig())
    for minute in range(1, 25):
        evaluator.step(T0 + timedelta(minutes=minute))
    store_provider.set_store(store)
    try:
        at = _page({"range": "1h", "end": "2026-11-02T12:25:00Z"})
    finally:
        store_provider.clear()
    drawn = _in_order(at.main)
    heads = [text for kind, text in drawn if kind == "subheader"]
    assert heads[0].startswith("Open (") and heads[1] == "Incidents in the selected range"
    card = next(i for i, (_, text) in enumerate(drawn) if "Cascading degradation — culprit `r2`** (resolved)" in text)
    incidents_at = drawn.index(("subheader", "Incidents in the selected range"))
    assert card > incidents_at, "a resolved cascade is drawn with the range's incidents"
    assert not any("Cascading degradation — culprit" in text for _, text in drawn[:incidents_at])
