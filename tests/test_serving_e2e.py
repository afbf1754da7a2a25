"""End to end: task SDK -> gateway -> emulated vLLM replicas, spans through the OTLP receiver into the store.

Everything real and in-process: emulator replicas (serving.emulator.live), the gateway, the OTLP/HTTP
receiver (collectors.receiver) writing into the embedded store (fixture ``store``, chdb://memory).
Assertions read ``otel_traces`` and the ``llm_calls`` view.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import httpx
import pytest

from schema import semconv as sc

receiver_mod = pytest.importorskip("collectors.receiver", reason="the OTLP receiver is not in the tree yet")
live = pytest.importorskip("serving.emulator.live", reason="the emulator is not in the tree yet")

from serving.gateway import Gateway, GatewayConfig, ServerThread, Upstream  # noqa: E402
from serving.plans import RetryPolicy  # noqa: E402
from serving.sdk import CallFailed, InstrumentedOpenAI, make_tracer_provider, task  # noqa: E402

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def msg(words: int = 20):
    return [{"role": "user", "content": " ".join(["hello"] * words)}]


@pytest.fixture(scope="module")
def e2e_store():
    """One migrated database for this module (migrating takes seconds); tests isolate by trace id / service."""
    from schema.migrate import migrate
    from schema.store import connect

    s = connect("chdb://memory", f"t_{uuid.uuid4().hex[:12]}")
    migrate(s, retention_days=3650)
    yield s
    try:
        s.command(f"DROP DATABASE IF EXISTS `{s.database}` SYNC", tag="test.drop")
    finally:
        s.close()


@pytest.fixture
def rig(e2e_store, tmp_path):
    """Receiver + 2 emulated replicas (spans to the receiver) + a factory for gateways and SDK providers."""
    store = e2e_store
    receiver = receiver_mod.Receiver(receiver_mod.ReceiverConfig(port=0, spool_dir=tmp_path / "spool",
                                                                 batch_max_seconds=0.1), store).start()
    fleet = live.start_replicas(2, otlp_endpoint=receiver.url, ids=["replica-0", "replica-1"])
    providers, servers, gateways = [], [], []

    class Rig:
        pass

    r = Rig()
    r.store, r.receiver, r.fleet = store, receiver, fleet
    r.gateway_service = f"gateway-{uuid.uuid4().hex[:8]}"  # this test's gateway spans, in a shared store

    def gateway(**kwargs):
        provider = make_tracer_provider(r.gateway_service, otlp_endpoint=receiver.url, schedule_delay_ms=100)
        providers.append(provider)
        config = GatewayConfig([Upstream(x.replica_id, x.url) for x in fleet], **kwargs)
        gw = Gateway(config, tracer_provider=provider)
        gateways.append(gw)
        server = ServerThread(gw).start()
        servers.append(server)
        return gw, server.url

    def client_provider():
        provider = make_tracer_provider("research-app", otlp_endpoint=receiver.url, schedule_delay_ms=100)
        providers.append(provider)
        return provider

    def flush():
        deadline = time.monotonic() + 10  # a gateway ends its spans just after the last byte left
        while any(g.active_requests for g in gateways) and time.monotonic() < deadline:
            time.sleep(0.005)
        for p in providers:
            p.force_flush()
        for x in fleet:
            if x.server.tracer_provider is not None:
                x.server.tracer_provider.force_flush()
        assert receiver.flush(30)

    r.gateway, r.client_provider, r.flush = gateway, client_provider, flush
    yield r
    for s in servers:
        s.stop()
    fleet.stop()
    for p in providers:
        p.shutdown()
    receiver.stop()


def spans_of(store, trace_id):
    rows = store.query(
        "SELECT SpanId, ParentSpanId, SpanName, SpanKind, ServiceName, SpanAttributes, StatusCode "
        "FROM otel_traces WHERE TraceId = {t:String}", {"t": trace_id}, tag="test.e2e").result_rows
    return [dict(zip(("id", "parent", "name", "kind", "service", "attrs", "status"), row)) for row in rows]


def calls_of(store, trace_id):
    rows = store.query(
        "SELECT span_id, parent_span_id, call_source, replica, task_id, task_type, task_step, task_attempt, "
        "tenant_id, output_tokens, partial, status, error_type, policy, prompt_tokens "
        "FROM llm_calls WHERE trace_id = {t:String} ORDER BY start_time", {"t": trace_id}, tag="test.e2e").result_rows
    cols = ("id", "parent", "source", "replica", "task_id", "task_type", "step", "attempt", "tenant", "out",
            "partial", "status", "error_type", "policy", "prompt")
    return [dict(zip(cols, row)) for row in rows]


def trace_id_of(t) -> str:
    return f"{t.span.get_span_context().trace_id:032x}"


def test_five_step_task_with_failing_step_three(rig):
    gw, url = rig.gateway(max_attempts=1)  # no hidden retries here: the client's attempts are the subject
    provider = rig.client_provider()
    client = InstrumentedOpenAI(url + "/v1", tracer_provider=provider, sleep=lambda s: None,
                                retry_policy=RetryPolicy(max_attempts=3))
    with pytest.raises(CallFailed):
        with task("research_agent", tenant="acme", slo_e2e_ms=60_000, tracer_provider=provider) as t:
            for i in range(1, 6):
                if i == 3:
                    for x in rig.fleet:
                        x.set_fault("error_rate", 1.0)
                with t.step(f"s{i}"):
                    client.chat(model=MODEL, messages=msg(), max_tokens=4, extra_body={"ignore_eos": True})
    tid = trace_id_of(t)
    rig.flush()
    spans = spans_of(rig.store, tid)
    by_id = {s["id"]: s for s in spans}
    root = [s for s in spans if s["name"] == "task research_agent"][0]
    assert root["attrs"][sc.TASK_OUTCOME] == "failure" and root["parent"] == ""
    assert not [s for s in spans if s["name"] in ("step s4", "step s5")]
    client_spans = [s for s in spans if s["name"] == f"chat {MODEL}"]
    assert sorted((s["attrs"][sc.TASK_STEP], s["attrs"][sc.TASK_ATTEMPT]) for s in client_spans) == \
        [("s1", "1"), ("s2", "1"), ("s3", "1"), ("s3", "2"), ("s3", "3")]
    # client -> gateway chat -> gateway.attempt -> llm_request, linked by parent ids, for steps 1-2.
    engines = [s for s in spans if s["name"] == "llm_request"]
    assert len(engines) == 2
    for engine in engines:
        attempt = by_id[engine["parent"]]
        server = by_id[attempt["parent"]]
        client_span = by_id[server["parent"]]
        step = by_id[client_span["parent"]]
        assert (attempt["name"], server["name"], client_span["name"]) == ("gateway.attempt", "gateway chat", f"chat {MODEL}")
        assert by_id[step["parent"]]["id"] == root["id"]
        assert (server["service"], client_span["service"]) == (rig.gateway_service, "research-app")
        assert attempt["attrs"][sc.GATEWAY_REPLICA] == engine["attrs"].get(sc.SERVICE_INSTANCE_ID, attempt["attrs"][sc.GATEWAY_REPLICA])
    calls = calls_of(rig.store, tid)
    client_rows = sorted((c["step"], c["attempt"], c["status"], c["error_type"], c["out"]) for c in calls if c["source"] == "client")
    assert client_rows == [("s1", 1, "ok", "", 4), ("s2", 1, "ok", "", 4), ("s3", 1, "error", "http.500", 0),
                           ("s3", 2, "error", "http.500", 0), ("s3", 3, "error", "http.500", 0)]
    assert all(c["task_id"] == t.task_id and c["tenant"] == "acme" for c in calls if c["source"] != "engine")
    engine_rows = [c for c in calls if c["source"] == "engine"]
    assert sorted(c["out"] for c in engine_rows) == [4, 4]
    assert {c["replica"] for c in engine_rows} <= {"replica-0", "replica-1"}
    gateway_rows = [c for c in calls if c["source"] == "gateway"]
    assert len(gateway_rows) == 5 and {c["policy"] for c in gateway_rows} == {"round_robin"}


def test_replica_crash_mid_stream_partial_tokens_and_retry(rig):
    gw, url = rig.gateway(retry_budget_min=5)
    provider = rig.client_provider()
    for x in rig.fleet:  # slow tokens down so the crash lands mid-stream
        x.set_fault("slowdown", 4.0)
    client = InstrumentedOpenAI(url + "/v1", tracer_provider=provider, sleep=lambda s: None,
                                retry_policy=RetryPolicy(max_attempts=3))
    out = {}

    def run():
        with task("chat", tenant="globex", tracer_provider=provider) as t:
            out["task"] = t
            with t.step("answer"):
                out["result"] = client.chat(model=MODEL, messages=msg(), max_tokens=40, extra_body={"ignore_eos": True})
            t.succeed()

    worker = threading.Thread(target=run)
    worker.start()
    victim = None
    deadline = time.monotonic() + 30
    while victim is None and time.monotonic() < deadline:
        for x in rig.fleet:
            try:  # the replicas' loop mutates this dict; a torn read is just retried
                running = [r for r in list(x.server.engine.by_id.values()) if x.server.engine.out_tokens(r) >= 3]
            except (RuntimeError, KeyError, AttributeError):
                running = []
            if running:
                victim = x
        time.sleep(0.005)
    assert victim is not None
    victim.set_fault("crash", None)  # stays down
    for x in rig.fleet:
        if x is not victim:
            x.set_fault("slowdown", 1.0)
    worker.join(60)
    result, t = out["result"], out["task"]
    assert result.output_tokens == 40 and result.attempts == 2
    rig.flush()
    tid = trace_id_of(t)
    calls = calls_of(rig.store, tid)
    first_client = [c for c in calls if c["source"] == "client" and c["attempt"] == 1][0]
    second_client = [c for c in calls if c["source"] == "client" and c["attempt"] == 2][0]
    crashed_attempt = [c for c in calls if c["source"] == "gateway" and c["replica"] == victim.replica_id
                       and c["parent"] in {s["id"] for s in spans_of(rig.store, tid)
                                           if s["name"] == "gateway chat" and s["parent"] == first_client["id"]}][0]
    partial_tokens = first_client["out"]
    assert partial_tokens >= 3 and first_client["partial"] == 1 and first_client["error_type"] == "stream_broken"
    assert (crashed_attempt["out"], crashed_attempt["partial"], crashed_attempt["status"]) == (partial_tokens, 1, "error")
    spans = {s["id"]: s for s in spans_of(rig.store, tid)}
    server_span = spans[crashed_attempt["parent"]]
    assert int(server_span["attrs"][sc.GATEWAY_TOKENS_STREAMED]) == partial_tokens
    # The retry succeeded on the other replica; the crashed request left no engine span (lost with the GPU).
    assert (second_client["status"], second_client["out"], second_client["partial"]) == ("ok", 40, 0)
    engine_rows = [c for c in calls if c["source"] == "engine"]
    assert [(c["replica"], c["out"]) for c in engine_rows] == [(next(x.replica_id for x in rig.fleet if x is not victim), 40)]


def test_retry_budget_holds_with_one_replica_failing_everything(rig):
    rig.fleet[0].set_fault("error_rate", 1.0)
    gw, url = rig.gateway(retry_budget_ratio=0.1, retry_budget_min=1, eject_after_failures=10_000)
    body = {"model": MODEL, "messages": msg(5), "max_tokens": 2, "stream": True}

    async def load():
        async with httpx.AsyncClient(timeout=30) as c:
            return [r.status_code for r in await asyncio.gather(*(c.post(url + "/v1/chat/completions", json=body)
                                                                   for _ in range(30)))]

    statuses = asyncio.run(load())
    rig.flush()
    attempts = rig.store.query(
        "SELECT SpanAttributes['gateway.attempt'] AS a, count() FROM otel_traces "
        "WHERE SpanName = 'gateway.attempt' AND ServiceName = {s:String} GROUP BY a ORDER BY a",
        {"s": rig.gateway_service}, tag="test.e2e").result_rows
    requests = rig.store.scalar("SELECT count() FROM otel_traces WHERE SpanName = 'gateway chat' AND ServiceName = {s:String}",
                                {"s": rig.gateway_service}, tag="test.e2e")
    retries = sum(n for a, n in attempts if a != "1")
    assert requests == 30 and dict(attempts)["1"] == 30
    assert retries == gw.stats.retries and 1 <= retries <= 1 + 0.1 * 30
    assert statuses.count(500) == gw.stats.retries_denied and statuses.count(200) == 30 - statuses.count(500)


def test_admission_429_with_retry_after_lands_in_store(rig):
    gw, url = rig.gateway(queue_caps={"interactive": 1}, retry_after_s=2)
    for x in rig.fleet:
        x.set_fault("slowdown", 5.0)
    body = {"model": MODEL, "messages": msg(5), "max_tokens": 20, "stream": True}

    async def burst():
        async with httpx.AsyncClient(timeout=30) as c:
            first = asyncio.create_task(c.post(url + "/v1/chat/completions", json=body))
            while gw.admission.inside.get("interactive", 0) < 1:
                await asyncio.sleep(0.005)
            second = await c.post(url + "/v1/chat/completions", json=body)
            return await first, second

    first, second = asyncio.run(burst())
    assert first.status_code == 200 and second.status_code == 429 and second.headers["retry-after"] == "2"
    rig.flush()
    rows = rig.store.query("SELECT SpanAttributes['gateway.admission'], SpanAttributes['gateway.upstream.status_code'] "
                           "FROM otel_traces WHERE SpanName = 'gateway chat' AND ServiceName = {s:String} ORDER BY 1",
                           {"s": rig.gateway_service}, tag="test.e2e").result_rows
    assert rows == [("admitted", "200"), ("rejected", "429")]


def test_cumulative_usage_from_the_emulator(rig):
    gw, url = rig.gateway()
    provider = rig.client_provider()
    client = InstrumentedOpenAI(url + "/v1", tracer_provider=provider)
    with task("copilot", tenant="acme", tracer_provider=provider) as t:
        result = client.chat(model=MODEL, messages=msg(12), max_tokens=7, step="edit",
                             stream_options={"include_usage": True, "continuous_usage_stats": True},
                             extra_body={"ignore_eos": True})
        t.succeed()
    assert result.output_tokens == 7  # the sum of cumulative usage chunks would be 28
    rig.flush()
    calls = calls_of(rig.store, trace_id_of(t))
    assert sorted((c["source"], c["out"], c["partial"]) for c in calls) == \
        [("client", 7, 0), ("engine", 7, 0), ("gateway", 7, 0)]
    client_row = [c for c in calls if c["source"] == "client"][0]
    assert (client_row["task_type"], client_row["step"], client_row["attempt"]) == ("copilot", "edit", 1)
    assert client_row["prompt"] == [c for c in calls if c["source"] == "engine"][0]["prompt"]


def test_workload_plans_replayed_live_land_as_planned(rig, traces_dir):
    from serving.workloads import build_plans, run_live

    gw, url = rig.gateway(policy="session_affinity")
    provider = rig.client_provider()
    plans = build_plans("azure", traces_dir, mix={"chat": 1}, duration_s=6, max_tokens_cap=3, seed=5)
    planned = {p.task_id: p.steps[0].calls[0] for p in plans}
    assert len(planned) >= 3
    report = asyncio.run(run_live(plans, url + "/v1", tracer_provider=provider, time_scale=20,
                                  policy=RetryPolicy(max_attempts=1)))
    assert report.outcomes == {"success": len(plans)}
    rig.flush()
    rows = rig.store.query(
        "SELECT c.task_id, c.output_tokens, e.prompt_tokens, e.output_tokens FROM llm_calls AS c "
        "INNER JOIN llm_calls AS g ON g.trace_id = c.trace_id AND g.call_source = 'gateway' "
        "INNER JOIN llm_calls AS e ON e.parent_span_id = g.span_id AND e.call_source = 'engine' "
        "WHERE c.call_source = 'client' AND c.task_id IN {ids:Array(String)}",
        {"ids": list(planned)}, tag="test.e2e").result_rows
    assert len(rows) == len(planned)
    for task_id, client_out, engine_prompt, engine_out in rows:
        call = planned[task_id]
        # The emulator counts the prompt's words plus 4 chat-template tokens (role header, end of turn).
        assert (client_out, engine_out, engine_prompt) == (call.output_tokens, call.output_tokens, call.prompt_tokens + 4)
