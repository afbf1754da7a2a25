"""The spans teams already emit, against real vLLM 0.32 (CPU): no task SDK, no gateway.

* The official OpenTelemetry GenAI instrumentation (``opentelemetry-instrumentation-openai-v2``) around
  today's ``openai`` client, under the application's ``invoke_agent`` spans. The client sends no
  ``traceparent``, so vLLM's spans are roots of their own traces, joined to the client's call spans by
  ``gen_ai.response.id`` = vLLM's ``gen_ai.request.id``.
* A client that propagates ``traceparent`` from its own GenAI call span: vLLM's span is that span's
  child, joined by the parent link.
Expected figures are what the clients saw (each response's usage).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import openai
import pytest
from opentelemetry import propagate, trace
from opentelemetry.trace import Status, StatusCode

from schema.jobs import run_jobs
from tests.genai_producers import run_in_subprocess


@pytest.fixture(scope="module")
def runs(stack):
    t0 = datetime.now(timezone.utc)
    standard = run_in_subprocess("openai-v2", stack.receiver.url, stack.vllm.url, [True, False], calls_per_run=2,
                                 model=stack.model)
    propagated = _propagating_client(stack)
    stack.flush()
    run_jobs(stack.store, start=t0 - timedelta(minutes=2), end=datetime.now(timezone.utc) + timedelta(minutes=1))
    return standard, propagated


def _propagating_client(stack) -> dict:
    """One agent run whose two chat calls send the call span's traceparent to vLLM."""
    tracer = stack.client_provider("propagating-app").get_tracer("agent-app")
    client = openai.OpenAI(base_url=f"{stack.vllm.url}/v1", api_key="none", max_retries=0)
    usage = []
    with tracer.start_as_current_span("invoke_agent planner", attributes={"gen_ai.operation.name": "invoke_agent",
                                                                        "gen_ai.agent.name": "planner"}) as root:
        for i in range(2):
            with tracer.start_as_current_span(f"chat {stack.model}", kind=trace.SpanKind.CLIENT,
                                              attributes={"gen_ai.operation.name": "chat",
                                                          "gen_ai.request.model": stack.model}) as span:
                headers = {}
                propagate.inject(headers)
                r = client.chat.completions.create(model=stack.model, max_tokens=6, extra_headers=headers,
                                                   messages=[{"role": "user", "content": f"plan step {i}"}])
                span.set_attributes({"gen_ai.usage.input_tokens": r.usage.prompt_tokens,
                                     "gen_ai.usage.output_tokens": r.usage.completion_tokens})
                span.set_status(Status(StatusCode.OK))
                usage.append((r.usage.prompt_tokens, r.usage.completion_tokens))
        trace_id = format(root.get_span_context().trace_id, "032x")
    return {"trace_id": trace_id, "usage": usage}


def _tasks(store, ids):
    r = store.query("SELECT task_id, outcome, context_source, calls, prompt_tokens, output_tokens FROM tasks "
                    "WHERE task_id IN {t:Array(String)}", {"t": list(ids)}, tag="test.vllm")
    return {row[0]: row[1:] for row in r.result_rows}


def test_official_instrumentation_joined_by_response_id(runs, stack):
    standard, _ = runs
    tasks = _tasks(stack.store, [run.trace_id for run in standard])
    assert [tasks[run.trace_id][:3] for run in standard] == [("success", "genai_agent", 2), ("failure", "genai_agent", 2)]
    for run in standard:
        assert tasks[run.trace_id][3:] == (sum(c.prompt_tokens for c in run.calls), sum(c.output_tokens for c in run.calls))
    # each call once, with vLLM's span as its evidence, in the client's trace
    rows = stack.store.query(
        "SELECT trace_id, call_source, sum(requests) FROM call_costs WHERE trace_id IN {t:Array(String)} "
        "GROUP BY trace_id, call_source", {"t": [run.trace_id for run in standard]}, tag="test.vllm").result_rows
    assert sorted(rows) == sorted((run.trace_id, "engine", 2) for run in standard)


def test_propagating_client_joined_by_parent_link(runs, stack):
    _, propagated = runs
    tid = propagated["trace_id"]
    # vLLM's two spans are in the client's trace, children of its call spans
    assert stack.store.scalar(
        "SELECT count() FROM otel_traces WHERE TraceId = {t:String} AND SpanName = 'llm_request' AND ParentSpanId != ''",
        {"t": tid}, tag="test.vllm") == 2
    tasks = _tasks(stack.store, [tid])
    prompt = sum(p for p, _ in propagated["usage"])
    output = sum(o for _, o in propagated["usage"])
    assert tasks[tid] == ("success", "genai_agent", 2, prompt, output)
    rows = stack.store.query("SELECT call_source, sum(requests) FROM call_costs WHERE trace_id = {t:String} "
                             "GROUP BY call_source", {"t": tid}, tag="test.vllm").result_rows
    assert rows == [("engine", 2)]
