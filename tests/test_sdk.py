"""Task SDK: task/step/outcome spans, baggage, the instrumented client's retries and token accounting.

Against a scripted in-process upstream (tests/stub_upstream.py), spans into an in-memory exporter.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from schema import semconv as sc
from serving.gateway.server import ServerThread
from tests.stub_upstream import Behaviour, StubUpstream, memory_tracing
from serving.plans import RetryPolicy
from serving.sdk import AsyncInstrumentedOpenAI, CallFailed, InstrumentedOpenAI, StreamUsage, current_task, task
from serving.sdk.retry import backoff_s, parse_retry_after

MSG = [{"role": "user", "content": "secret prompt"}]


@pytest.fixture
def spans():
    return memory_tracing()


@pytest.fixture(scope="module")
def upstream():
    stub = StubUpstream("r0")
    with ServerThread(stub) as server:
        yield stub, server.url


@pytest.fixture
def stub(upstream):
    stub, url = upstream
    stub.requests.clear()
    stub.script = lambda req, headers: Behaviour()
    return stub, url


def by_name(exporter, name):
    return [s for s in exporter.get_finished_spans() if s.name == name]


def no_sleep():
    slept = []
    return slept, slept.append


# --- StreamUsage (pure) -------------------------------------------------------------------------

def _chunk(content=None, finish=None, usage=None, choices=True):
    doc = {"id": "c1", "model": "m", "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish}]
           if choices else []}
    if usage:
        doc["usage"] = usage
    return doc


def test_usage_read_from_chunk_that_still_has_choices():
    u = StreamUsage()
    for c in [_chunk("a"), _chunk("b"), _chunk("c", "stop", {"prompt_tokens": 11, "completion_tokens": 3})]:
        u.feed(c)
    assert (u.tokens_received, u.usage_prompt_tokens, u.content_chunks, u.finish_reasons) == (3, 11, 3, ["stop"])


def test_cumulative_usage_is_replaced_never_summed():
    u = StreamUsage()
    for i in range(1, 6):  # continuous_usage_stats: 1, 2, 3, 4, 5 -> 5 (a sum would be 15)
        u.feed(_chunk("t", "stop" if i == 5 else None, {"prompt_tokens": 4, "completion_tokens": i}))
    u.feed(_chunk(choices=False, usage={"prompt_tokens": 4, "completion_tokens": 5}))
    assert u.tokens_received == 5
    assert u.usage_prompt_tokens == 4


def test_broken_stream_counts_content_chunks_and_keeps_error():
    u = StreamUsage()
    u.feed({"id": "c", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})  # role only
    u.feed(_chunk("a"))
    u.feed(_chunk("b"))
    u.feed({"error": {"message": "boom", "code": 500}})
    assert (u.tokens_received, u.finished, u.error["code"]) == (2, False, 500)


# --- retry arithmetic ---------------------------------------------------------------------------

def test_backoff_full_jitter_bounds_and_retry_after_floor():
    policy = RetryPolicy(backoff_base_s=0.5, backoff_max_s=3.0)
    rng = random.Random(7)
    caps = [0.5, 1.0, 2.0, 3.0, 3.0]  # min(3.0, 0.5 * 2**(n-1))
    for n, cap in enumerate(caps, start=1):
        values = [backoff_s(policy, n, rng) for _ in range(200)]
        assert 0 <= min(values) and max(values) <= cap
        assert max(values) > cap * 0.8  # full jitter spans the range
    assert backoff_s(policy, 1, rng, retry_after_s=4.0) == 4.0
    with pytest.raises(ValueError, match="retry_number"):
        backoff_s(policy, 0)


def test_parse_retry_after_seconds_and_http_date():
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after(" 0.5 ") == 0.5
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412480.0) == 10.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None


# --- task / step / outcome ------------------------------------------------------------------------

def test_task_success_step_spans_and_context(spans):
    provider, exporter = spans
    with task("copilot", tenant="acme", priority="batch", slo_e2e_ms=5000, task_id="t-1", tracer_provider=provider) as t:
        assert current_task() is t
        with t.step("plan"):
            pass
        t.succeed()
    assert current_task() is None
    root = by_name(exporter, "task copilot")[0]
    step = by_name(exporter, "step plan")[0]
    assert root.attributes[sc.TASK_OUTCOME] == "success"
    assert root.attributes[sc.SLO_E2E_MS] == 5000.0
    assert root.parent is None
    assert step.parent.span_id == root.context.span_id
    assert dict(step.attributes) == {sc.TASK_ID: "t-1", sc.TASK_TYPE: "copilot", sc.TENANT_ID: "acme",
                                     sc.TENANT_PRIORITY: "batch", sc.TASK_STEP: "plan"}


def test_exception_is_failure_and_unfinished_is_abandoned(spans):
    provider, exporter = spans
    with pytest.raises(KeyError):
        with task("chat", tenant="acme", tracer_provider=provider):
            raise KeyError("x")
    with task("chat", tenant="acme", tracer_provider=provider):
        pass
    with task("chat", tenant="acme", tracer_provider=provider) as t:
        t.fail("bad_answer")
    outcomes = [(s.attributes[sc.TASK_OUTCOME], s.attributes.get(sc.ERROR_TYPE), s.status.status_code.name)
                for s in by_name(exporter, "task chat")]
    assert outcomes == [("failure", "KeyError", "ERROR"), ("abandoned", "unfinished", "UNSET"),
                        ("failure", "bad_answer", "ERROR")]


def test_async_form_and_decorators(spans):
    provider, exporter = spans

    @task("chat", tenant="t1", tracer_provider=provider)
    def sync_fn(x):
        return x * 2

    @task("research_agent", tenant="t2", tracer_provider=provider)
    async def async_fn():
        current_task().fail("gave_up")

    async def with_async():
        async with task("copilot", tenant="t3", tracer_provider=provider) as t:
            async with t.step("s"):
                pass
            t.succeed()

    assert sync_fn(4) == 8 and sync_fn(5) == 10
    asyncio.run(async_fn())
    asyncio.run(with_async())
    roots = {s.name: [] for s in exporter.get_finished_spans()}
    for s in exporter.get_finished_spans():
        if s.name.startswith("task "):
            roots[s.name].append((s.attributes[sc.TASK_OUTCOME], s.attributes[sc.TENANT_ID]))
    assert roots["task chat"] == [("success", "t1"), ("success", "t1")]
    assert roots["task research_agent"] == [("failure", "t2")]
    assert roots["task copilot"] == [("success", "t3")]
    ids = {s.attributes[sc.TASK_ID] for s in by_name(exporter, "task chat")}
    assert len(ids) == 2  # the decorator opens a new task per call


def test_task_rejects_empty_names():
    with pytest.raises(ValueError, match="task_type"):
        task("", tenant="a")
    with pytest.raises(ValueError, match="tenant"):
        task("chat", tenant="")


# --- the client against the stub ------------------------------------------------------------------

def test_retry_honours_retry_after_then_succeeds_with_propagation(spans, stub):
    provider, exporter = spans
    upstream, url = stub
    answers = iter([Behaviour(status=503, retry_after="2"), Behaviour(status=429, retry_after="1"), Behaviour(tokens=4)])
    upstream.script = lambda req, headers: next(answers)
    slept, sleep = no_sleep()
    client = InstrumentedOpenAI(url + "/v1", tracer_provider=provider, sleep=sleep, rng=random.Random(1),
                                retry_policy=RetryPolicy(max_attempts=3, backoff_base_s=0.1, backoff_max_s=0.2))
    with task("chat", tenant="acme", task_id="T9", tracer_provider=provider) as t:
        with t.step("answer"):
            result = client.chat(model="m", messages=MSG, max_tokens=16)
        t.succeed()
    assert (result.attempts, result.output_tokens, result.input_tokens, result.text) == (3, 4, 7, "tok " * 4)
    assert slept[0] >= 2.0 and slept[1] >= 1.0  # Retry-After is a floor on the jittered backoff
    attempts = sorted(by_name(exporter, "chat m"), key=lambda s: s.attributes[sc.TASK_ATTEMPT])
    assert [(s.attributes[sc.TASK_ATTEMPT], s.attributes.get(sc.ERROR_TYPE)) for s in attempts] == \
        [(1, "http.503"), (2, "http.429"), (3, None)]
    ok = attempts[2]
    assert ok.attributes[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 4 and ok.attributes[sc.CLIENT_PARTIAL] is False
    assert ok.attributes[sc.GEN_AI_REQUEST_MAX_TOKENS] == 16
    assert sc.GEN_AI_INPUT_MESSAGES not in ok.attributes  # no content unless opted in
    step = by_name(exporter, "step answer")[0]
    assert all(s.parent.span_id == step.context.span_id for s in attempts)
    # The upstream saw each attempt's own span as traceparent, and the task context as baggage.
    for (path, req, headers), span in zip(upstream.requests, attempts):
        assert headers["traceparent"][:52] == f"00-{span.context.trace_id:032x}-{span.context.span_id:016x}"
        members = dict(kv.split("=", 1) for kv in headers["baggage"].split(","))
        assert members["task.id"] == "T9" and members["task.step"] == "answer" and members["tenant.id"] == "acme"
        assert members["task.attempt"] == str(span.attributes[sc.TASK_ATTEMPT])
        assert req["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("mode", ["in_last_choice", "cumulative"])
def test_client_usage_modes(spans, stub, mode):
    provider, exporter = spans
    upstream, url = stub
    upstream.script = lambda req, headers: Behaviour(tokens=6, usage=mode, prompt_tokens=21)
    client = InstrumentedOpenAI(url + "/v1", tracer_provider=provider)
    result = client.chat(model="m", messages=MSG)
    assert (result.output_tokens, result.input_tokens) == (6, 21)
    span = by_name(exporter, "chat m")[0]
    assert span.attributes[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 6


def test_broken_stream_records_partial_tokens_and_gives_up(spans, stub):
    provider, exporter = spans
    upstream, url = stub
    upstream.script = lambda req, headers: Behaviour(tokens=10, error_after=3)
    slept, sleep = no_sleep()
    client = InstrumentedOpenAI(url + "/v1", tracer_provider=provider, sleep=sleep,
                                retry_policy=RetryPolicy(max_attempts=2))
    with pytest.raises(CallFailed) as info:
        client.chat(model="m", messages=MSG)
    assert (info.value.error_type, info.value.attempts, info.value.partial_tokens) == ("stream_broken", 2, 6)
    for span in by_name(exporter, "chat m"):
        assert span.attributes[sc.CLIENT_TOKENS_RECEIVED] == 3
        assert span.attributes[sc.CLIENT_PARTIAL] is True
        assert span.status.status_code.name == "ERROR"
    assert len(slept) == 1


def test_client_error_not_retried_and_content_opt_in(spans, stub):
    provider, exporter = spans
    upstream, url = stub
    upstream.script = lambda req, headers: Behaviour(status=400)
    client = InstrumentedOpenAI(url + "/v1", tracer_provider=provider, record_content=True, sleep=lambda s: None)
    with pytest.raises(CallFailed) as info:
        client.chat(model="m", messages=MSG)
    assert (info.value.error_type, info.value.attempts) == ("http.400", 1)
    span = by_name(exporter, "chat m")[0]
    assert "secret prompt" in span.attributes[sc.GEN_AI_INPUT_MESSAGES]


def test_async_client_retries_a_crashed_stream(spans, stub):
    provider, exporter = spans
    upstream, url = stub
    answers = iter([Behaviour(tokens=8, crash_after=2), Behaviour(tokens=3)])
    upstream.script = lambda req, headers: next(answers)

    async def run():
        client = AsyncInstrumentedOpenAI(url + "/v1", tracer_provider=provider, sleep=lambda s: asyncio.sleep(0))
        async with task("chat", tenant="acme", tracer_provider=provider) as t:
            result = await client.chat(model="m", messages=MSG, step="s1")
            t.succeed()
        await client.close()
        return result

    result = asyncio.run(run())
    assert (result.attempts, result.output_tokens) == (2, 3)
    first, second = sorted(by_name(exporter, "chat m"), key=lambda s: s.attributes[sc.TASK_ATTEMPT])
    assert (first.attributes[sc.ERROR_TYPE], first.attributes[sc.CLIENT_TOKENS_RECEIVED]) == ("stream_broken", 2)
    assert first.attributes[sc.CLIENT_PARTIAL] is True and first.attributes[sc.TASK_STEP] == "s1"
    assert second.attributes[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 3
