"""Gateway: routing, retry budget, admission, streaming passthrough, spans and /metrics.

Pure parts with a fake clock; the proxy against scripted in-process upstreams (tests/stub_upstream.py),
spans into an in-memory exporter.
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from schema import semconv as sc
from serving.gateway import GatewayConfig, ServerThread, Upstream, parse_upstream
from serving.gateway.admission import Admission, Rejected
from serving.gateway.budget import RetryBudget
from serving.gateway.routing import Router
from serving.gateway.scraper import parse_load
from tests.stub_upstream import Behaviour, StubUpstream, gateway_servers, memory_tracing
from serving.sdk.context import inject_headers, with_task_baggage

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True,
        "stream_options": {"include_usage": True}}


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def ups(n):
    return [Upstream(f"r{i}", f"http://127.0.0.1:{9000 + i}") for i in range(n)]


# --- pure parts -------------------------------------------------------------------------------

def test_parse_upstream_and_validate_lists_every_problem():
    assert parse_upstream("r7=http://127.0.0.1:8001/v1/") == Upstream("r7", "http://127.0.0.1:8001")
    assert parse_upstream("http://10.0.0.2:8000") == Upstream("10.0.0.2:8000", "http://10.0.0.2:8000")
    with pytest.raises(ValueError, match="expected"):
        parse_upstream("r1=localhost:8000")
    cfg = GatewayConfig(upstreams=[], policy="random", retry_budget_ratio=2.0)
    with pytest.raises(ValueError) as info:
        cfg.validate()
    message = str(info.value)
    assert "at least one upstream" in message and "'random'" in message and "retry_budget_ratio" in message


def test_round_robin_skips_tried_and_ejected_replicas():
    clock = Clock()
    router = Router(ups(3), "round_robin", eject_after_failures=2, eject_s=5.0, clock=clock)
    assert [router.choose().replica_id for _ in range(4)] == ["r0", "r1", "r2", "r0"]
    assert router.choose(exclude={"r1", "r2"}).replica_id == "r0"
    assert router.choose(exclude={"r0", "r1", "r2"}) is None
    r1 = router.by_id["r1"]
    router.record_result(r1, ok=False)
    router.record_result(r1, ok=False)  # second consecutive failure: ejected for 5 s
    assert {router.choose().replica_id for _ in range(6)} == {"r0", "r2"}
    clock.t = 5.0
    assert {router.choose().replica_id for _ in range(6)} == {"r0", "r1", "r2"}


def test_session_affinity_is_stable_and_moves_on_retry():
    router = Router(ups(4), "session_affinity")
    homes = {f"task-{i}": router.choose(f"task-{i}").replica_id for i in range(200)}
    assert all(router.choose(t).replica_id == r for t, r in homes.items())
    counts = {r: list(homes.values()).count(r) for r in ("r0", "r1", "r2", "r3")}
    assert min(counts.values()) >= 20  # 64 virtual nodes per replica spread 200 keys over all 4
    retry = router.choose("task-0", exclude={homes["task-0"]})
    assert retry.replica_id != homes["task-0"]
    # Removing a replica only moves the keys that lived on it (consistent hashing).
    smaller = Router([u for u in ups(4) if u.replica_id != "r3"], "session_affinity")
    moved = [t for t, r in homes.items() if r != "r3" and smaller.choose(t).replica_id != r]
    assert moved == []


def test_least_loaded_uses_scraped_load_plus_own_inflight():
    router = Router(ups(3), "least_loaded")
    router.update_scrape("r0", waiting=4, running=8)
    router.update_scrape("r1", waiting=0, running=3)
    router.update_scrape("r2", waiting=1, running=5)
    first = router.choose()
    assert first.replica_id == "r1"
    first.inflight += 4  # sent since the scrape: r1 now counts 7 > r2's 6
    assert router.choose().replica_id == "r2"


def test_parse_load_sums_label_sets():
    text = ('# HELP vllm:num_requests_waiting x\nvllm:num_requests_waiting{model_name="a b",engine="0"} 3.0\n'
            'vllm:num_requests_waiting{model_name="c",engine="1"} 2\nvllm:num_requests_running 7 1700000000\n'
            'vllm:num_requests_running_other 100\n')
    assert parse_load(text) == (5.0, 7.0)


def test_retry_budget_sliding_window():
    clock = Clock()
    budget = RetryBudget(ratio=0.1, window_s=10.0, min_retries=1, clock=clock)
    for _ in range(20):
        budget.record_request()
    # allowed: retries + 1 <= 1 + 0.1 * 20 = 3
    assert [budget.try_retry() for _ in range(4)] == [True, True, True, False]
    assert budget.denied == 1
    clock.t = 10.5  # everything left the window
    assert budget.window_counts == (0, 0)
    assert budget.try_retry() is True and budget.try_retry() is False


def test_admission_caps_and_priority_queue():
    async def scenario():
        adm = Admission({"interactive": 3, "batch": 2}, default_cap=1, retry_after_s=2.0, max_inflight=1)
        order = []
        await adm.acquire("batch")  # takes the only upstream slot
        async def waiter(prio, name):
            await adm.acquire(prio)
            order.append(name)
        tasks = [asyncio.create_task(waiter("batch", "b2")), asyncio.create_task(waiter("interactive", "i1"))]
        await asyncio.sleep(0)
        with pytest.raises(Rejected) as info:
            await adm.acquire("batch")  # 2 batch requests inside already
        assert (info.value.cap, info.value.retry_after_s) == (2, 2.0)
        assert adm.queued() == 2
        adm.release("batch")
        await asyncio.sleep(0)
        adm.release("interactive")
        await asyncio.gather(*tasks)
        adm.release("batch")
        return order, adm.inflight, dict(adm.inside)

    order, inflight, inside = asyncio.run(scenario())
    assert order == ["i1", "b2"]  # interactive is served first although it queued second
    assert inflight == 0 and inside == {"batch": 0, "interactive": 0}


# --- the proxy against scripted upstreams ---------------------------------------------------------

@pytest.fixture
def spans():
    return memory_tracing()


@pytest.fixture(scope="module")
def replicas():
    stubs = [StubUpstream(f"r{i}") for i in range(3)]
    servers = [ServerThread(s).start() for s in stubs]
    yield stubs, servers
    for server in servers:
        server.stop()


@pytest.fixture
def make_gateway(replicas, spans):
    stubs, servers = replicas
    for s in stubs:
        s.requests.clear()
        s.peers.clear()
        s.script = lambda req, headers: Behaviour()
    with gateway_servers(spans[0]) as start:
        def make(n=2, **kwargs):
            return start([Upstream(f"r{i}", servers[i].url) for i in range(n)], **kwargs)

        yield make


def finished(exporter, name, n=1):
    """The finished spans called ``name``, once at least ``n`` exist: the gateway ends its spans just
    after the last byte reached the client, so the test may look a moment too early (waits up to 10 s)."""
    deadline = time.monotonic() + 10
    while True:
        spans = [s for s in exporter.get_finished_spans() if s.name == name]
        if len(spans) >= n or time.monotonic() > deadline:
            return spans
        time.sleep(0.005)


def sse_events(text):
    return [e[6:] for e in text.split("\n\n") if e.startswith("data: ")]


def task_headers(task_id="T1", priority="interactive"):
    from opentelemetry import context

    ctx = with_task_baggage({sc.TASK_ID: task_id, sc.TASK_TYPE: "chat", sc.TENANT_ID: "acme",
                             sc.TENANT_PRIORITY: priority, sc.TASK_STEP: "s1", sc.TASK_ATTEMPT: 1},
                            context.Context())
    return dict(inject_headers({}, ctx))


def test_stream_passthrough_spans_and_traceparent_upstream(make_gateway, replicas, spans):
    stubs, _ = replicas
    gateway, url = make_gateway(n=1)
    resp = httpx.post(url + "/v1/chat/completions", json=BODY, headers=task_headers())
    events = sse_events(resp.text)
    assert resp.status_code == 200 and events[-1] == "[DONE]"
    assert json.loads(events[-2])["usage"]["completion_tokens"] == 5
    exporter = spans[1]
    server = finished(exporter, "gateway chat")[0]
    attempt = finished(exporter, "gateway.attempt")[0]
    assert server.kind.name == "SERVER" and attempt.kind.name == "CLIENT"
    assert attempt.parent.span_id == server.context.span_id
    a = attempt.attributes
    assert (a[sc.GATEWAY_ATTEMPT], a[sc.GATEWAY_REPLICA], a[sc.GATEWAY_TOKENS_STREAMED], a[sc.GEN_AI_USAGE_OUTPUT_TOKENS],
            a[sc.GEN_AI_USAGE_INPUT_TOKENS], a[sc.TASK_ID], a[sc.TASK_STEP]) == (1, "r0", 5, 5, 7, "T1", "s1")
    s = server.attributes
    assert (s[sc.GATEWAY_ADMISSION], s[sc.GATEWAY_RETRIES], s[sc.GATEWAY_UPSTREAM_STATUS], s[sc.GATEWAY_TOKENS_STREAMED],
            s[sc.GATEWAY_POLICY], s[sc.TENANT_ID]) == ("admitted", 0, 200, 5, "round_robin", "acme")
    assert s[sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] > 0
    assert gateway.stats.overhead.n == 1  # one first attempt relayed its first event
    sent = stubs[0].requests[0][2]["traceparent"]
    assert sent[3:35] == f"{attempt.context.trace_id:032x}" and sent[36:52] == f"{attempt.context.span_id:016x}"
    assert "task.id=T1" in stubs[0].requests[0][2]["baggage"]


def test_idle_upstream_connection_not_reused_past_vllms_keepalive(make_gateway, replicas):
    """vLLM closes an idle keep-alive connection after 5 s (VLLM_HTTP_TIMEOUT_KEEP_ALIVE): a request
    relayed on one at that instant is reset. Requests a moment apart share a connection; after more than
    UPSTREAM_KEEPALIVE_S idle (still below 5 s) the gateway opens a new one."""
    from serving.gateway.proxy import UPSTREAM_KEEPALIVE_S

    IDLE_S = 3.5  # below vLLM's 5 s, above the gateway's reuse limit
    assert UPSTREAM_KEEPALIVE_S < IDLE_S < 5
    stubs, _ = replicas
    _, url = make_gateway(n=1)
    with httpx.Client() as client:
        for pause in (0.0, 0.0, IDLE_S):
            time.sleep(pause)
            resp = client.post(url + "/v1/chat/completions", json=BODY)
            assert resp.status_code == 200 and sse_events(resp.text)[-1] == "[DONE]"
    first, second, third = stubs[0].peers
    assert first == second and third != second


def test_retry_before_first_byte_goes_to_another_replica(make_gateway, replicas, spans):
    stubs, _ = replicas
    stubs[0].script = lambda req, headers: Behaviour(status=503)
    gateway, url = make_gateway(n=2, retry_budget_min=5)
    resp = httpx.post(url + "/v1/chat/completions", json=BODY, headers=task_headers())
    assert resp.status_code == 200 and sse_events(resp.text)[-1] == "[DONE]"
    attempts = sorted(finished(spans[1], "gateway.attempt", 2), key=lambda s: s.attributes[sc.GATEWAY_ATTEMPT])
    assert [(s.attributes[sc.GATEWAY_REPLICA], s.attributes[sc.GATEWAY_UPSTREAM_STATUS], s.status.status_code.name)
            for s in attempts] == [("r0", 503, "ERROR"), ("r1", 200, "OK")]
    server = finished(spans[1], "gateway chat")[0]
    assert (server.attributes[sc.GATEWAY_RETRIES], server.attributes[sc.GATEWAY_REPLICA]) == (1, "r1")
    assert gateway.stats.retries == 1


def test_crash_after_first_byte_ends_with_error_chunk_and_done(make_gateway, replicas, spans):
    stubs, _ = replicas
    stubs[0].script = lambda req, headers: Behaviour(tokens=10, crash_after=3)
    gateway, url = make_gateway(n=2)
    resp = httpx.post(url + "/v1/chat/completions", json=BODY, headers=task_headers())
    events = sse_events(resp.text)
    assert resp.status_code == 200
    assert events[-1] == "[DONE]"
    assert json.loads(events[-2])["error"]["code"] == 500
    assert sum(1 for e in events[:-2] if json.loads(e)["choices"][0]["delta"].get("content")) == 3
    exporter = spans[1]
    server = finished(exporter, "gateway chat")[0]
    attempt = finished(exporter, "gateway.attempt")
    assert len(attempt) == 1  # no retry after the first byte
    assert (attempt[0].attributes[sc.GATEWAY_TOKENS_STREAMED], attempt[0].attributes[sc.ERROR_TYPE]) == (3, "stream_broken")
    assert server.attributes[sc.GATEWAY_TOKENS_STREAMED] == 3 and server.status.status_code.name == "ERROR"


def test_retry_budget_caps_retries_with_one_failing_replica(make_gateway, replicas, spans):
    stubs, _ = replicas
    stubs[0].script = lambda req, headers: Behaviour(status=500)
    gateway, url = make_gateway(n=2, retry_budget_ratio=0.1, retry_budget_min=0, max_attempts=3,
                                eject_after_failures=1000)
    statuses = []
    with httpx.Client() as client:
        for _ in range(40):
            statuses.append(client.post(url + "/v1/chat/completions", json=BODY).status_code)
    # Every request that hit r0 first was either retried (on r1, which succeeds) or denied by the budget.
    retries, denied = gateway.stats.retries, gateway.stats.retries_denied
    finished(spans[1], "gateway chat", 40)
    attempts = finished(spans[1], "gateway.attempt", 40 + retries)
    first_on_r0 = [s for s in attempts if s.attributes[sc.GATEWAY_ATTEMPT] == 1 and s.attributes[sc.GATEWAY_REPLICA] == "r0"]
    assert 1 <= retries <= 0.1 * 40  # the budget: retries <= 10% of requests in the window
    assert len(first_on_r0) == retries + denied and denied >= 10
    assert statuses.count(500) == denied and statuses.count(200) == 40 - denied
    assert len(attempts) == 40 + retries  # each retry is a span of its own
    retried = [s for s in attempts if s.attributes[sc.GATEWAY_ATTEMPT] == 2]
    assert len(retried) == retries and {s.attributes[sc.GATEWAY_REPLICA] for s in retried} == {"r1"}


def test_admission_rejects_with_retry_after(make_gateway, replicas, spans):
    stubs, _ = replicas
    stubs[0].script = lambda req, headers: Behaviour(tokens=3, delay_s=0.5)
    gateway, url = make_gateway(n=1, queue_caps={"interactive": 2, "batch": 1}, retry_after_s=3)

    async def burst():
        async with httpx.AsyncClient(timeout=10) as client:
            slow = [asyncio.create_task(client.post(url + "/v1/chat/completions", json=BODY, headers=task_headers(f"T{i}")))
                    for i in range(2)]
            while gateway.admission.inside.get("interactive", 0) < 2:
                await asyncio.sleep(0.01)
            rejected = await client.post(url + "/v1/chat/completions", json=BODY, headers=task_headers("T3"))
            batch = await client.post(url + "/v1/chat/completions", json=BODY, headers=task_headers("T4", "batch"))
            return rejected, batch, [await t for t in slow]

    rejected, batch, slow = asyncio.run(burst())
    assert rejected.status_code == 429 and rejected.headers["retry-after"] == "3"
    assert rejected.json()["error"]["code"] == 429
    assert batch.status_code == 200 and [r.status_code for r in slow] == [200, 200]
    span = [s for s in finished(spans[1], "gateway chat", 4) if s.attributes[sc.GATEWAY_ADMISSION] == "rejected"]
    assert len(span) == 1 and span[0].attributes[sc.TASK_ID] == "T3"
    metrics = httpx.get(url + "/metrics").text
    assert 'infercost_gateway_admission_rejections_total{priority="interactive"} 1.0' in metrics


def test_non_streaming_and_least_loaded(make_gateway, replicas, spans):
    stubs, _ = replicas
    stubs[0].waiting, stubs[0].running = 10, 10
    stubs[1].waiting, stubs[1].running = 0, 1
    try:
        gateway, url = make_gateway(n=2, policy="least_loaded", scrape_interval_s=0.05)
        while gateway.router.by_id["r0"].scraped_at is None or gateway.router.by_id["r1"].scraped_at is None:
            asyncio.run(asyncio.sleep(0.02))
        body = dict(BODY, stream=False)
        replies = [httpx.post(url + "/v1/chat/completions", json=body) for _ in range(3)]
    finally:
        stubs[0].waiting = stubs[0].running = stubs[1].waiting = stubs[1].running = 0
    assert [r.json()["usage"]["completion_tokens"] for r in replies] == [5, 5, 5]
    assert len(stubs[1].requests) == 3 and len(stubs[0].requests) == 0
    attempt = finished(spans[1], "gateway.attempt", 3)[0]
    assert attempt.attributes[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 5


def test_bad_request_and_all_replicas_down(make_gateway, replicas):
    stubs, _ = replicas
    gateway, url = make_gateway(n=1)
    bad = httpx.post(url + "/v1/chat/completions", content=b"{not json")
    assert bad.status_code == 400 and "invalid JSON" in bad.json()["error"]["message"]
    stubs[0].script = lambda req, headers: Behaviour(status=503, retry_after="4")
    down = httpx.post(url + "/v1/chat/completions", json=BODY)
    assert down.status_code == 503 and down.headers["retry-after"] == "4"
