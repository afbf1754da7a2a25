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


def _tasks(store):
    return store.query_df(
        "SELECT task_id, task_type, outcome, context_source, calls, attempts, prompt_tokens, output_tokens, cost_usd, "
        "useful_usd, retry_waste_usd, failed_task_waste_usd, pending_usd FROM tasks ORDER BY start_time", tag="test")


@pytest.mark.parametrize("kind, task_type, source", [("openai-v2", "research_assistant", "genai_agent"),
                                                     ("openllmetry", "research_assistant", "traceloop")])
def test_tasks_from_standard_spans(rig, kind, task_type, source):
    """No task SDK: each run's root span is a task, its outcome from the root's status and its last call."""
    runs = _drive(rig, kind, [True, False, "retry", "cut", "parallel"])
    tasks = _tasks(rig.store)
    by_id = {r.task_id: r for r in tasks.itertuples()}
    assert set(by_id) == {run.trace_id for run in runs}  # task id = trace id of the root
    assert {r.task_type for r in tasks.itertuples()} == {task_type}
    assert {r.context_source for r in tasks.itertuples()} == {source}
    # run 1: the root says Error; run 3: the root is Ok, but its last call broke with nothing after it
    assert [by_id[run.trace_id].outcome for run in runs] == ["success", "failure", "success", "failure", "success"]
    # calls: 3, 3, 2 (the 500 the client retried reached no engine: no call of its own), 2 (the cut call
    # is the client's span alone: the crash lost its engine span), 3 (two in parallel, one after)
    assert [by_id[run.trace_id].calls for run in runs] == [3, 3, 2, 2, 3]
    assert [by_id[run.trace_id].attempts for run in runs] == [3, 3, 2, 2, 3]
    for run in runs:
        row = by_id[run.trace_id]
        assert row.prompt_tokens == sum(c.prompt_tokens for c in run.calls)
        assert row.output_tokens == sum(c.output_tokens for c in run.calls)
        assert row.pending_usd == 0 and row.retry_waste_usd == 0
        if row.outcome == "success":
            assert row.failed_task_waste_usd == 0 and row.useful_usd == pytest.approx(row.cost_usd, abs=1e-12)
        else:
            assert row.useful_usd == 0 and row.failed_task_waste_usd == pytest.approx(row.cost_usd, abs=1e-12)
    # the call pieces agree with the tasks: nothing unattributed, each engine request once
    cats = dict(rig.store.query("SELECT category, sum(cost_usd) FROM call_costs GROUP BY category", tag="test").result_rows)
    assert set(cats) <= {"useful", "failed_task_waste", "unspanned"}
    assert cats["useful"] == pytest.approx(tasks["useful_usd"].sum(), rel=1e-9)
    assert cats["failed_task_waste"] == pytest.approx(tasks["failed_task_waste_usd"].sum(), rel=1e-9)
    requests = rig.store.query("SELECT sum(requests) FROM call_costs WHERE category != 'unspanned'", tag="test").result_rows[0][0]
    assert requests == 13


def test_openai_agents_sdk_with_openinference(rig):
    """The OpenAI Agents SDK's own root ("Agent workflow", OpenInference AGENT) is the task; its LLM
    spans carry no response id, so each joins its engine span by token counts, model and time."""
    runs = _drive(rig, "openai-agents", [True, True, False])
    tasks = _tasks(rig.store)
    by_id = {r.task_id: r for r in tasks.itertuples()}
    assert set(by_id) == {run.trace_id for run in runs}
    assert [by_id[run.trace_id].outcome for run in runs] == ["success", "success", "failure"]
    assert {r.context_source for r in tasks.itertuples()} == {"openinference"}
    assert {r.task_type for r in tasks.itertuples()} == {"research_assistant"}
    for run in runs[:2]:
        row = by_id[run.trace_id]
        assert row.calls == 1 and len(run.calls) == 1
        assert (row.prompt_tokens, row.output_tokens) == (run.calls[0].prompt_tokens, run.calls[0].output_tokens)
    calls = _calls(rig.store)
    # two engine requests, each joined to its LLM span (the failed run's call got a 500: no engine span)
    assert sorted(calls["call_source"]) == ["client", "engine", "engine"]
    assert set(calls["trace_id"]) == {run.trace_id for run in runs}


def test_same_work_same_figures_with_the_sdk_or_standard_spans(store, tmp_path):
    """One workload twice, on two identical replicas: marked with the task SDK on r1, with only the
    official GenAI instrumentation (invoke_agent roots) on r2. Same tasks, outcomes, calls, tokens and
    cost per successful task (capacity far above the load: a call's cost is its work's share of a
    minute's spend, the same on both replicas)."""
    from serving.sdk import task
    from tests.dashboard_seed import stop_periodic_jobs

    stop_periodic_jobs(store)
    sync(store, fleet_yaml(w_prefill=W_PREFILL, w_decode=W_DECODE, replicas=("r1", "r2"), capacity=1e6))
    rig = Rig(store, tmp_path / "spool")
    outcomes = [True, False, True, True]
    start = datetime.now(timezone.utc)
    fleet = live.start_replicas(2, ids=["r1", "r2"], otlp_endpoint=rig.receiver.url)
    try:
        client, provider = rig.client(fleet[0].url)
        for i, ok in enumerate(outcomes):
            with task("research_assistant", tenant="acme", tracer_provider=provider) as t:
                for step in range(3):
                    client.chat(model="meta-llama/Llama-3.1-8B-Instruct", max_tokens=8,
                                messages=[{"role": "user", "content": f"run {i} step {step}: summarise the findings"}])
                t.succeed() if ok else t.fail("AgentError")
        run_in_subprocess("openai-v2", rig.receiver.url, fleet[1].url, outcomes, calls_per_run=3)
    finally:
        fleet.stop()
    rig.flush()
    run_jobs(store, start=start - timedelta(minutes=1), end=datetime.now(timezone.utc) + timedelta(minutes=1))
    rig.close()
    figures = store.query_df(
        "SELECT context_source, count() AS tasks, countIf(outcome = 'success') AS successes, "
        "countIf(outcome = 'failure') AS failures, sum(calls) AS calls, sum(prompt_tokens) AS prompt, "
        "sum(output_tokens) AS output, sum(cost_usd) AS cost, sum(useful_usd) AS useful, "
        "sum(failed_task_waste_usd) AS failed FROM tasks GROUP BY context_source ORDER BY context_source",
        tag="test").set_index("context_source")
    assert list(figures.index) == ["genai_agent", "sdk"]
    sdk, std = figures.loc["sdk"], figures.loc["genai_agent"]
    assert (sdk.tasks, sdk.successes, sdk.failures, sdk.calls) == (4, 3, 1, 12)
    assert (std.tasks, std.successes, std.failures, std.calls, std.prompt, std.output) == (
        sdk.tasks, sdk.successes, sdk.failures, sdk.calls, sdk.prompt, sdk.output)
    assert sdk.cost > 0
    assert std.cost / std.successes == pytest.approx(sdk.cost / sdk.successes, rel=1e-9)  # CPST
    assert (std.useful, std.failed) == (pytest.approx(sdk.useful, rel=1e-9), pytest.approx(sdk.failed, rel=1e-9))


@pytest.mark.parametrize("kind", ["openai-v2", "openllmetry"])
def test_calls_through_the_gateway_belong_to_the_trace_root(rig, kind):
    """The standard instrumentation's client calling vLLM through our gateway, no task.id anywhere: each
    call is the gateway's unit (its attempt and the engine span below it), and its task is the client's
    trace root, as for a direct call."""
    start = datetime.now(timezone.utc)
    fleet = live.start_replicas(1, ids=["r1"], otlp_endpoint=rig.receiver.url)
    try:
        gateway = rig.gateway([("r1", fleet[0].url)])
        runs = run_in_subprocess(kind, rig.receiver.url, gateway, [True, False], calls_per_run=3)
    finally:
        fleet.stop()
    rig.flush()
    run_jobs(rig.store, start=start - timedelta(minutes=1), end=datetime.now(timezone.utc) + timedelta(minutes=1))
    calls = rig.store.query_df(
        "SELECT call_id, trace_id, call_source, task_id, category, sum(requests) AS requests, "
        "any(prompt_tokens) AS prompt, any(output_tokens) AS output FROM call_costs WHERE category != 'unspanned' "
        "GROUP BY call_id, trace_id, call_source, task_id, category", tag="test")
    truth = sorted((run.trace_id, c.prompt_tokens, c.output_tokens) for run in runs for c in run.calls)

    assert len(truth) == 6 and int(calls["requests"].sum()) == 6 and len(calls) == 6
    assert set(calls["call_source"]) == {"engine"}
    # the gateway's request is the root of a trace of its own (the client sent no traceparent): each call
    # belongs to the task of the client span whose response id the gateway relayed, the client's trace root
    assert sorted(zip(calls["task_id"], calls["prompt"], calls["output"])) == truth
    ok, failed = runs[0].trace_id, runs[1].trace_id
    assert set(calls.loc[calls["task_id"] == ok, "category"]) == {"useful"}
    assert set(calls.loc[calls["task_id"] == failed, "category"]) == {"failed_task_waste"}
    tasks = _tasks(rig.store)
    assert sorted(zip(tasks["task_id"], tasks["outcome"], tasks["calls"])) == sorted([(ok, "success", 3),
                                                                                       (failed, "failure", 3)])
