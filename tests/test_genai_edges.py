"""Bad input to task derivation from standard spans, each with a defined answer.

Client spans are made by the OpenTelemetry SDK in the shape the official GenAI instrumentation gives
them (``invoke_agent`` root, ``chat {model}`` CLIENT spans with ``gen_ai.response.id`` and usage);
engine spans are vLLM 0.32's captured ``llm_request`` re-issued (tests/producers.py).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from collectors.ingest import ingest_traces
from schema.jobs import run_jobs
from tests.producers import ingest_sdk_spans, vllm_llm_request, vllm_request
from tests.test_cost_support import fleet_yaml, sync

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
T0 = datetime(2026, 3, 2, 10, 0, tzinfo=timezone.utc)


def ns(seconds: float) -> int:
    return int((T0 + timedelta(seconds=seconds)).timestamp() * 1e9)


@pytest.fixture
def store(store):
    from tests.dashboard_seed import stop_periodic_jobs

    stop_periodic_jobs(store)
    sync(store, fleet_yaml(w_prefill=0.0, w_decode=1.0, replicas=("r1",)))  # abandon_timeout_s: 600
    return store


class Client:
    """Client spans at explicit times (seconds after T0)."""

    def __init__(self):
        self.exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = provider.get_tracer("agent-app")

    def root(self, start: float, name: str = "research_assistant"):
        return self.tracer.start_span(f"invoke_agent {name}", start_time=ns(start),
                                      attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name})

    def chat(self, parent, start: float, end: float, response_id: str | None, prompt: int, output: int | None,
             error: bool = False):
        ctx = trace.set_span_in_context(parent) if parent is not None else None
        span = self.tracer.start_span(f"chat {MODEL}", context=ctx, kind=trace.SpanKind.CLIENT, start_time=ns(start),
                                      attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": MODEL})
        if response_id:
            span.set_attribute("gen_ai.response.id", response_id)
        if output is not None:
            span.set_attributes({"gen_ai.usage.input_tokens": prompt, "gen_ai.usage.output_tokens": output})
        if error:
            span.set_attribute("error.type", "APIConnectionError")
            span.set_status(Status(StatusCode.ERROR))
        span.end(end_time=ns(end))
        return span

    def flush(self, store):
        ingest_sdk_spans(store, self.exporter.get_finished_spans())
        self.exporter.clear()


def engine(store, start: float, end: float, request_id: str, prompt: int, output: int, traceparent=None):
    span = vllm_llm_request("stream_stop", traceparent=traceparent, start_ns=ns(start), end_ns=ns(end), prompt=prompt,
                            completion=output, replica="r1", request_id=request_id)
    assert ingest_traces(store, vllm_request([span])).rejected == 0


def jobs(store, minutes: int = 20):
    run_jobs(store, start=T0 - timedelta(minutes=1), end=T0 + timedelta(minutes=minutes))


def tasks(store) -> dict:
    df = store.query_df("SELECT task_id, outcome, context_source, calls, output_tokens FROM tasks", tag="test")
    return {r.task_id: r for r in df.itertuples()}


def requests(store) -> tuple[int, int]:
    return tuple(store.query("SELECT sum(requests), sum(output_tokens) FROM call_costs WHERE category != 'unspanned'",
                             tag="test").result_rows[0])


def trace_hex(span) -> str:
    return format(span.get_span_context().trace_id, "032x")


def test_two_roots_in_one_trace_are_one_task(store):
    """A trace with two root spans (an exporter that restarted its root, a broken context) is one task:
    its id is the trace id, its root the one that ended last; each call counts once."""
    c = Client()
    root = c.root(0)
    c.chat(root, 1, 2, "chatcmpl-a", 10, 5)
    root.end(end_time=ns(3))
    second = c.tracer.start_span("invoke_agent research_assistant", start_time=ns(4),
                                 context=trace.set_span_in_context(trace.NonRecordingSpan(root.get_span_context())),
                                 attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "research_assistant"})
    second._parent = None  # a second root of the same trace, as a broken context propagation exports it
    second.set_status(Status(StatusCode.ERROR))
    second.end(end_time=ns(6))
    c.flush(store)
    engine(store, 1.1, 1.9, "chatcmpl-a", 10, 5)
    jobs(store)
    t = tasks(store)
    assert list(t) == [trace_hex(root)]
    assert (t[trace_hex(root)].outcome, t[trace_hex(root)].calls) == ("failure", 1)  # the later root says Error
    assert requests(store) == (1, 5)


def test_root_that_never_ends_is_abandoned(store):
    """The root span of a run never arrives (the process died mid-run): its calls are a task that is
    abandoned abandon_timeout_s (600 s) after its last call, their cost failed-task waste."""
    c = Client()
    root = c.root(0)  # never ended: never exported
    c.chat(root, 1, 2, "chatcmpl-b", 10, 7)
    c.flush(store)
    engine(store, 1.1, 1.9, "chatcmpl-b", 10, 7)
    jobs(store)
    t = tasks(store)
    assert list(t) == [trace_hex(root)]
    assert (t[trace_hex(root)].outcome, t[trace_hex(root)].context_source) == ("abandoned", "trace_without_root")
    cats = dict(store.query("SELECT category, sum(requests) FROM call_costs WHERE category != 'unspanned' "
                            "GROUP BY category", tag="test").result_rows)
    assert cats == {"failed_task_waste": 1}


def test_connection_refused_call_is_the_tasks_last_failure(store):
    """A client call span with no engine span (connection refused) is a call of its task with no tokens;
    it is the run's last call and failed, so the task failed though its root is Ok."""
    c = Client()
    root = c.root(0)
    c.chat(root, 1, 2, "chatcmpl-c", 10, 4)
    c.chat(root, 3, 3.01, None, 0, None, error=True)
    root.end(end_time=ns(4))
    c.flush(store)
    engine(store, 1.1, 1.9, "chatcmpl-c", 10, 4)
    jobs(store)
    t = tasks(store)[trace_hex(root)]
    assert (t.outcome, t.calls, t.output_tokens) == ("failure", 2, 4)
    assert requests(store) == (2, 4)


def test_engine_span_whose_parent_never_arrives(store):
    """vLLM's span names a parent (the client propagated traceparent) whose span never arrives: the
    engine request counts once, unattributed (no task is invented for it)."""
    engine(store, 1.1, 1.9, "chatcmpl-d", 10, 9, traceparent="00-" + "ab" * 16 + "-" + "cd" * 8 + "-01")
    jobs(store)
    assert requests(store) == (1, 9)
    assert tasks(store) == {}
    assert dict(store.query("SELECT category, sum(requests) FROM call_costs GROUP BY category",
                            tag="test").result_rows) == {"unattributed": 1}


def test_propagated_traceparent_joins_by_parent_link(store):
    """A client whose traceparent reaches vLLM (its HTTP library instrumented and propagating): the
    engine span is the child of the HTTP client span under the chat span, or of the chat span itself.
    Either way the engine request is the chat call's, once; no response id is needed."""
    c = Client()
    root = c.root(0)
    direct = c.chat(root, 1, 2, None, 10, 3)
    via_http = c.tracer.start_span(f"chat {MODEL}", context=trace.set_span_in_context(root), kind=trace.SpanKind.CLIENT,
                                   start_time=ns(3), attributes={"gen_ai.operation.name": "chat",
                                                                 "gen_ai.request.model": MODEL,
                                                                 "gen_ai.usage.input_tokens": 10,
                                                                 "gen_ai.usage.output_tokens": 6})
    http = c.tracer.start_span("POST", context=trace.set_span_in_context(via_http), kind=trace.SpanKind.CLIENT,
                               start_time=ns(3.01), attributes={"http.request.method": "POST",
                                                                "url.full": "http://replica-0:8000/v1/chat/completions",
                                                                "http.response.status_code": 200})
    http.end(end_time=ns(3.9))
    via_http.end(end_time=ns(4))
    root.end(end_time=ns(5))
    c.flush(store)

    def traceparent(span) -> str:
        ctx = span.get_span_context()
        return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-01"

    engine(store, 1.1, 1.9, "cmpl-e1", 10, 3, traceparent=traceparent(direct))
    engine(store, 3.1, 3.8, "cmpl-e2", 10, 6, traceparent=traceparent(http))
    jobs(store)
    t = tasks(store)[trace_hex(root)]
    assert (t.outcome, t.calls, t.output_tokens) == ("success", 2, 9)
    assert requests(store) == (2, 9)
    sources = store.query("SELECT call_source, count() FROM call_costs GROUP BY call_source", tag="test").result_rows
    assert sources == [("engine", 2)]  # fields from vLLM's spans, the best evidence


def test_evaluation_result_decides_a_derived_outcome(store):
    """A gen_ai.evaluation.result event on a trace (an online judge, a guardrail): label fail fails a
    task whose root is Ok; label pass passes one whose root says Error; task.outcome beats both."""
    c = Client()
    judged = []
    for i, (label, root_error, explicit) in enumerate([("fail", False, None), ("pass", True, None),
                                                        ("fail", False, "success")]):
        root = c.root(10 * i)
        call = c.tracer.start_span(f"chat {MODEL}", context=trace.set_span_in_context(root),
                                   kind=trace.SpanKind.CLIENT, start_time=ns(10 * i + 1),
                                   attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": MODEL,
                                               "gen_ai.response.id": f"cmpl-v{i}", "gen_ai.usage.input_tokens": 10,
                                               "gen_ai.usage.output_tokens": 2})
        call.add_event("gen_ai.evaluation.result", {"gen_ai.evaluation.name": "relevance",
                                                    "gen_ai.evaluation.score.label": label,
                                                    "gen_ai.evaluation.score.value": 0.9 if label == "pass" else 0.1},
                       timestamp=ns(10 * i + 2))
        call.end(end_time=ns(10 * i + 2))
        if root_error:
            root.set_status(Status(StatusCode.ERROR))
        if explicit:
            root.set_attribute("task.outcome", explicit)
        root.end(end_time=ns(10 * i + 3))
        engine(store, 10 * i + 1.1, 10 * i + 1.9, f"cmpl-v{i}", 10, 2)
        judged.append(trace_hex(root))
    c.flush(store)
    jobs(store)
    t = tasks(store)
    assert [t[tid].outcome for tid in judged] == ["failure", "success", "success"]
    cats = store.query("SELECT task_id, any(category) FROM call_costs WHERE task_id != '' GROUP BY task_id",
                       tag="test").result_rows
    assert {tid: cat for tid, cat in cats} == {judged[0]: "failed_task_waste", judged[1]: "useful",
                                               judged[2]: "useful"}
