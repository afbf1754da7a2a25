"""One call, never two: a client's GenAI call span and the vLLM request it caused are one call.

The producers are real (tests/genai_producers.py): the official OpenTelemetry GenAI instrumentation
and OpenLLMetry around the ``openai`` client, calling emulated vLLM replicas that export their
``llm_request`` spans. The client does not propagate ``traceparent``, so each engine span is the root
of a trace of its own; the cost jobs join it to the client span whose ``gen_ai.response.id`` is its
``gen_ai.request.id``. Expected figures are what the client itself saw (usage of every response).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from schema.jobs import run_jobs
from serving.emulator import live
from tests.genai_producers import run_in_subprocess
from tests.producers import Rig
from tests.test_cost_support import fleet_yaml, sync

W_PREFILL, W_DECODE = 0.25, 1.0


@pytest.fixture
def rig(store, tmp_path):
    from tests.dashboard_seed import stop_periodic_jobs

    stop_periodic_jobs(store)
    sync(store, fleet_yaml(w_prefill=W_PREFILL, w_decode=W_DECODE, replicas=("r1",)))
    r = Rig(store, tmp_path / "spool")
    yield r
    r.close()


def _drive(rig, kind: str, outcomes: list[bool], **kwargs):
    start = datetime.now(timezone.utc)
    fleet = live.start_replicas(1, ids=["r1"], otlp_endpoint=rig.receiver.url)
    try:
        runs = run_in_subprocess(kind, rig.receiver.url, fleet[0].url, outcomes, **kwargs)
    finally:
        fleet.stop()  # exports the engine spans
    rig.flush()
    end = datetime.now(timezone.utc) + timedelta(minutes=1)
    run_jobs(rig.store, start=start - timedelta(minutes=1), end=end)
    return runs


def _calls(store):
    return store.query_df(
        "SELECT call_id, trace_id, call_source, sum(requests) AS requests, any(prompt_tokens) AS prompt, "
        "any(cached_tokens) AS cached, any(output_tokens) AS output, sum(work) AS work "
        "FROM call_costs WHERE category != 'unspanned' GROUP BY call_id, trace_id, call_source", tag="test")


@pytest.mark.parametrize("kind", ["openai-v2", "openllmetry"])
def test_client_span_and_engine_span_are_one_call(rig, kind):
    runs = _drive(rig, kind, [True, False], calls_per_run=3)
    calls = _calls(rig.store)
    truth = sorted((run.trace_id, c.prompt_tokens, c.cached_tokens, c.output_tokens) for run in runs for c in run.calls)
    assert len(truth) == 6
    # six calls, not twelve: each engine request once, in the trace of the client call that caused it
    assert int(calls["requests"].sum()) == 6 and len(calls) == 6
    assert set(calls["call_source"]) == {"engine"}  # fields from the engine span, the best evidence
    assert sorted(zip(calls["trace_id"], calls["prompt"], calls["cached"], calls["output"])) == truth
    for row in calls.itertuples():
        assert row.work == pytest.approx(W_PREFILL * (row.prompt - row.cached) + W_DECODE * row.output, abs=1e-9)
    # nothing else carries tokens: the client spans did not become calls of their own
    totals = rig.store.query("SELECT sum(prompt_tokens * first_piece), sum(output_tokens * first_piece) FROM call_costs",
                             tag="test").result_rows[0]
    assert totals == (sum(t[1] for t in truth), sum(t[3] for t in truth))
