"""Once only: a span delivered twice is counted once, whatever the delivery.

The telemetry is produced by the real producers — task SDK -> gateway -> emulated vLLM replicas —
and captured as the raw OTLP/HTTP requests they sent (a capturing endpoint stands in for the
receiver). Those exact bodies are then delivered to the real receiver: once; twice (an exporter
retry); again re-batched (all in one request, and one request per resource); and through a
receiver whose inserts succeed but are never confirmed, restarted on the same spool (the spool
replays them). Every live-ops figure — requests, tokens, attempts, retries, retry ratio, tasks
ended, goodput, triangle throughput and successful tasks — must equal the single delivery's,
which is also checked against the workload counted by hand.

Workload (hand count): task A (chat, success): replica-0 refuses (HTTP 500), the gateway retries
on replica-1 (1 hidden retry). Task B (research_agent, success, SLO 60 s): step 1 on one replica;
step 2: both replicas refuse its first client attempt (2 gateway attempts, both failed), the
client retries and succeeds. Task C (chat, failure): one successful call, then the task fails.
Engine calls 4 (4 x 3 output tokens), gateway attempts 7 in 5 gateway requests (2 hidden
retries), client attempts 5 (1 retry): retry ratio (1 + 2) / (5 + 2) = 3/7; tasks ended 3,
succeeded 2, within SLO 2; the triangle's successful tasks per replica add up to 4 (A and B each
had a call on both replicas).
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from collectors.receiver import Receiver, ReceiverConfig
from conftest import new_store, drop_store
from schema import jobs
from schema.queries import alerts as alert_queries
from schema.queries import cost as cost_queries
from schema.queries import ops
from schema.store import StoreUnavailable
from serving.emulator import live
from serving.gateway import Gateway, GatewayConfig, ServerThread, Upstream
from serving.gateway.sse import read_body
from serving.plans import RetryPolicy
from serving.sdk import CallFailed, InstrumentedOpenAI, make_tracer_provider, task

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
PB = "application/x-protobuf"


class Capture:
    """An OTLP/HTTP endpoint that keeps every trace request body as sent (and answers 200)."""

    def __init__(self):
        self.bodies: list[bytes] = []

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        if scope["path"] == "/v1/traces":
            self.bodies.append(body)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", PB.encode())]})
        await send({"type": "http.response.body", "body": b""})


def _workload(capture_url: str) -> None:
    fleet = live.start_replicas(2, otlp_endpoint=capture_url, ids=["replica-0", "replica-1"])
    gw_provider = make_tracer_provider("dedup-gateway", otlp_endpoint=capture_url, schedule_delay_ms=100)
    app_provider = make_tracer_provider("dedup-app", otlp_endpoint=capture_url, schedule_delay_ms=100)
    gateway = Gateway(GatewayConfig([Upstream(x.replica_id, x.url) for x in fleet], retry_budget_min=10,
                                    eject_after_failures=100), tracer_provider=gw_provider)
    server = ServerThread(gateway).start()
    by_id = {x.replica_id: x for x in fleet}

    def heal(_seconds):  # the client's back-off: the replicas recover meanwhile
        for x in fleet:
            x.set_fault("error_rate", 0.0)

    client = InstrumentedOpenAI(server.url + "/v1", tracer_provider=app_provider, sleep=heal,
                                retry_policy=RetryPolicy(max_attempts=3))

    def call():
        client.chat(model=MODEL, messages=[{"role": "user", "content": "hello " * 10}], max_tokens=3,
                    extra_body={"ignore_eos": True})

    try:
        with task("chat", tenant="acme", tracer_provider=app_provider) as t:
            by_id["replica-0"].set_fault("error_rate", 1.0)
            gateway.router._rr = 0  # the first attempt goes to replica-0, the retry to replica-1
            with t.step("answer"):
                call()
            heal(0)
            t.succeed()
        with task("research_agent", tenant="acme", slo_e2e_ms=60_000, tracer_provider=app_provider) as t:
            with t.step("plan"):
                call()
            for x in fleet:
                x.set_fault("error_rate", 1.0)
            with t.step("search"):
                call()
            t.succeed()
        with task("chat", tenant="globex", tracer_provider=app_provider) as t:
            with t.step("answer"):
                call()
            t.fail("bad_answer")
        deadline = time.monotonic() + 10
        while gateway.active_requests and time.monotonic() < deadline:
            time.sleep(0.01)
        for provider in (gw_provider, app_provider, *(x.server.tracer_provider for x in fleet)):
            if provider is not None:
                provider.force_flush()
    except CallFailed:
        raise AssertionError("the workload's retries should have succeeded") from None
    finally:
        server.stop()
        fleet.stop()
        gw_provider.shutdown()
        app_provider.shutdown()


@pytest.fixture(scope="module")
def captured() -> list[bytes]:
    capture = Capture()
    server = ServerThread(capture).start()
    try:
        _workload(server.url)
    finally:
        server.stop()
    assert capture.bodies
    return capture.bodies


def _spans(bodies: list[bytes]) -> list:
    """(resource, scope, span) of every span in the bodies."""
    out = []
    for body in bodies:
        req = ExportTraceServiceRequest.FromString(body)
        for rs in req.resource_spans:
            for ss in rs.scope_spans:
                out += [(rs.resource, ss.scope, sp) for sp in ss.spans]
    return out


def _one_request(spans) -> bytes:
    req = ExportTraceServiceRequest()
    for resource, scope, span in spans:
        rs = req.resource_spans.add()
        rs.resource.CopyFrom(resource)
        ss = rs.scope_spans.add()
        ss.scope.CopyFrom(scope)
        ss.spans.append(span)
    return req.SerializeToString()


def rebatched(bodies: list[bytes]) -> list[bytes]:
    """The same spans batched differently: everything in one request, then one request per span."""
    spans = _spans(bodies)
    return [_one_request(spans)] + [_one_request([s]) for s in reversed(spans)]


class UnconfirmedInserts:
    """The real store, but every insert 'fails' after it succeeded (the answer got lost)."""

    def __init__(self, store):
        self.store, self.embedded, self.inserts = store, store.embedded, 0

    def raw_insert(self, *args, **kwargs):
        self.store.raw_insert(*args, **kwargs)
        self.inserts += 1
        raise StoreUnavailable("injected: connection reset after the insert", "test", "unreachable")

    def __getattr__(self, name):
        return getattr(self.store, name)


def deliver(store, spool: Path, *deliveries: list[bytes], sink=None) -> None:
    receiver = Receiver(ReceiverConfig(port=0, spool_dir=spool, batch_max_seconds=0.05, drain_timeout_s=0.5),
                        store, sink=sink).start()
    try:
        with httpx.Client(timeout=30) as client:
            for bodies in deliveries:
                for body in bodies:
                    resp = client.post(f"{receiver.url}/v1/traces", content=body, headers={"content-type": PB})
                    assert resp.status_code == 200, resp.text
        if sink is None:
            assert receiver.flush(30)
        else:
            deadline = time.monotonic() + 10
            while sink.inserts < 2 and time.monotonic() < deadline:  # inserted (at least once) but never confirmed
                time.sleep(0.02)
    finally:
        receiver.stop()


def figures(store) -> dict:
    """Every live-ops figure the module docstring lists, over the whole workload."""
    rows = store.query("SELECT min(Timestamp), max(Timestamp) FROM otel_traces", tag="test").result_rows[0]
    start = rows[0].replace(tzinfo=timezone.utc).replace(second=0, microsecond=0) - timedelta(minutes=1)
    end = rows[1].replace(tzinfo=timezone.utc).replace(second=0, microsecond=0) + timedelta(minutes=2)
    fleet = ops.fleet_tiles(store, start, end)
    tiles, calls = fleet.current, fleet.raw["calls"]
    current = calls[calls["window"] == "current"].iloc[0]
    retries = alert_queries.retry_windows(store, end, int((end - start).total_seconds()), 60, lookback_s=0)
    jobs.run_jobs(store, start=start - timedelta(minutes=5), end=end)
    triangle = cost_queries.replica_windows(store, start, end, int((end - start).total_seconds()))
    return {
        "spans": store.scalar("SELECT count() FROM otel_traces", tag="test"),
        "engine_requests": tiles.requests, "output_tokens": int(current["engine_output_tokens"]),
        "gateway_attempts": int(current["gateway_attempts"]), "gateway_requests": int(current["gateway_requests"]),
        "client_attempts": int(current["client_attempts"]), "client_retries": int(current["client_retries"]),
        "retry_ratio": round(tiles.retry_ratio, 6),
        "retry_windows": {k: dict(v) for k, v in retries.items()},
        "tasks_ended": tiles.tasks_ended, "tasks_succeeded": tiles.tasks_succeeded,
        "tasks_within_slo": tiles.tasks_within_slo,
        "triangle_requests": int(triangle["requests"].sum()),
        "triangle_tokens_per_s": round(float(triangle["throughput_tokens_per_s"].sum()), 6),
        "triangle_successful_tasks": int(triangle["successful_tasks"].sum()),
        "tasks_rows": store.scalar("SELECT count() FROM tasks", tag="test"),
    }


@pytest.fixture
def fresh():
    stores = []

    def make():
        stores.append(new_store())
        return stores[-1]

    yield make
    for s in stores:
        drop_store(s)


def test_once_matches_the_hand_count(captured, fresh, tmp_path):
    store = fresh()
    deliver(store, tmp_path / "spool", captured)
    f = figures(store)
    assert (f["engine_requests"], f["output_tokens"]) == (4, 12)
    assert (f["gateway_attempts"], f["gateway_requests"], f["client_attempts"], f["client_retries"]) == (7, 5, 5, 1)
    assert f["retry_ratio"] == round(3 / 7, 6)
    assert (f["tasks_ended"], f["tasks_succeeded"], f["tasks_within_slo"]) == (3, 2, 2)
    # successful tasks per replica: A and B each had a call (failed or not) on both replicas
    assert f["triangle_requests"] == 4 and f["triangle_successful_tasks"] == 4 and f["tasks_rows"] == 3


def test_twice_rebatched_and_replayed_after_restart_count_once(captured, fresh, tmp_path):
    once = fresh()
    deliver(once, tmp_path / "once", captured)
    expected = figures(once)

    twice = fresh()  # an exporter retrying every request, and the same spans batched two other ways
    deliver(twice, tmp_path / "twice", captured, captured, rebatched(captured))
    assert figures(twice) == expected

    replayed = fresh()  # inserts that succeed unconfirmed; the receiver restarts on the same spool
    sink = UnconfirmedInserts(replayed)
    deliver(replayed, tmp_path / "replay", captured, sink=sink)
    assert sink.inserts >= 2  # the writer retried the unconfirmed batch before the restart
    deliver(replayed, tmp_path / "replay")  # restart: the spool replays what was never confirmed
    assert figures(replayed) == expected
