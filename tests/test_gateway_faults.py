"""Gateway under upstream faults: a replica that accepts connections and never
answers, a stream that goes silent, malformed upstream data, a client that leaves early, outlier
ejection. Real gateway, scripted upstreams (tests/stub_upstream.py) and a raw listening socket that
never answers; spans into an in-memory exporter. Times are bounded loosely (shared CI cores)."""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest

from schema import semconv as sc
from serving.gateway import ServerThread, Upstream
from tests.stub_upstream import Behaviour, StubUpstream, gateway_servers, memory_tracing

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


@pytest.fixture
def stub():
    s = StubUpstream("ok")
    server = ServerThread(s).start()
    yield s, server.url
    server.stop()


@pytest.fixture
def blackhole():
    """A replica that accepts TCP connections (kernel backlog) and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()


@pytest.fixture
def spans():
    return memory_tracing()


@pytest.fixture
def exporter(spans):
    return spans[1]


@pytest.fixture
def gateway_for(spans):
    with gateway_servers(spans[0]) as start:
        def make(upstreams: dict[str, str], **kwargs):
            return start([Upstream(k, v) for k, v in upstreams.items()], **kwargs)

        yield make


def attempts(exporter, n=1):
    deadline = time.monotonic() + 10
    while True:
        found = [s for s in exporter.get_finished_spans() if s.name == "gateway.attempt"]
        if len(found) >= n or time.monotonic() > deadline:
            return sorted(found, key=lambda s: s.start_time)
        time.sleep(0.01)


def events(text):
    return [e[6:] for e in text.split("\n\n") if e.startswith("data: ")]


def test_silent_replica_times_out_is_ejected_and_the_request_served_elsewhere(gateway_for, blackhole, stub, exporter):
    gateway, url = gateway_for({"dead": blackhole, "ok": stub[1]}, first_byte_timeout_s=0.3, eject_after_failures=1,
                               eject_s=30.0, max_ejection_percent=50.0)
    started = time.monotonic()
    resp = httpx.post(url + "/v1/chat/completions", json=BODY, timeout=10)
    took = time.monotonic() - started
    assert resp.status_code == 200 and events(resp.text)[-1] == "[DONE]"
    assert 0.3 <= took < 3.0  # one first-byte timeout, then the healthy replica
    first, second = attempts(exporter, 2)
    assert (first.attributes[sc.GATEWAY_REPLICA], first.attributes[sc.ERROR_TYPE],
            first.attributes[sc.GATEWAY_TIMEOUT_PHASE]) == ("dead", "timeout", "first_byte")
    assert first.attributes[sc.GATEWAY_OUTLIER_EJECTED] is True and first.attributes[sc.GATEWAY_OUTLIER_EJECTION_S] == 30.0
    assert second.attributes[sc.GATEWAY_REPLICA] == "ok" and sc.ERROR_TYPE not in second.attributes
    # ejected: the next requests go straight to the healthy replica, quickly
    started = time.monotonic()
    for _ in range(3):
        assert httpx.post(url + "/v1/chat/completions", json=BODY, timeout=10).status_code == 200
    assert time.monotonic() - started < 2.0
    assert {s.attributes[sc.GATEWAY_REPLICA] for s in attempts(exporter, 5)[2:]} == {"ok"}
    metrics = httpx.get(url + "/metrics").text
    assert 'infercost_gateway_outlier_ejections_total{replica="dead"} 1.0' in metrics
    assert 'infercost_gateway_replica_ejected{replica="dead"} 1.0' in metrics
    assert 'infercost_gateway_replica_ejected{replica="ok"} 0.0' in metrics


def test_only_replica_silent_answers_504_in_time(gateway_for, blackhole):
    gateway, url = gateway_for({"dead": blackhole}, first_byte_timeout_s=0.3, response_timeout_s=0.3)
    for body in (BODY, dict(BODY, stream=False)):
        started = time.monotonic()
        resp = httpx.post(url + "/v1/chat/completions", json=body, timeout=10)
        assert resp.status_code == 504 and "timed out" in resp.json()["error"]["message"]
        assert time.monotonic() - started < 3.0


def test_stream_silent_mid_way_ends_with_a_timeout_event_and_done(gateway_for, stub, exporter):
    stubs, url_up = stub
    stubs.script = lambda req, headers: Behaviour(tokens=6, stall_after=2, stall_s=5.0)
    gateway, url = gateway_for({"ok": url_up}, chunk_timeout_s=0.3)
    started = time.monotonic()
    resp = httpx.post(url + "/v1/chat/completions", json=BODY, timeout=10)
    assert time.monotonic() - started < 3.0
    got = events(resp.text)
    assert resp.status_code == 200 and got[-1] == "[DONE]"
    error = json.loads(got[-2])["error"]
    assert error["code"] == 504 and "error.type timeout" in error["message"]
    assert sum(1 for e in got[:-2] if json.loads(e)["choices"][0]["delta"].get("content")) == 2
    (attempt,) = attempts(exporter)
    assert (attempt.attributes[sc.ERROR_TYPE], attempt.attributes[sc.GATEWAY_TIMEOUT_PHASE],
            attempt.attributes[sc.GATEWAY_TOKENS_STREAMED]) == ("timeout", "chunk", 2)


@pytest.mark.parametrize("at, tokens_before", [(0, 0), (3, 2)])
def test_malformed_upstream_data_becomes_an_error_event_and_done(gateway_for, stub, exporter, at, tokens_before):
    stubs, url_up = stub
    stubs.script = lambda req, headers: Behaviour(tokens=5, malformed_at=at)
    gateway, url = gateway_for({"ok": url_up})
    resp = httpx.post(url + "/v1/chat/completions", json=BODY, timeout=10)
    got = events(resp.text)
    assert resp.status_code == 200 and got[-1] == "[DONE]"
    error = json.loads(got[-2])["error"]
    assert error["code"] == 502 and "error.type upstream_malformed" in error["message"]
    assert sum(1 for e in got[:-2] if json.loads(e)["choices"][0]["delta"].get("content")) == tokens_before
    found = attempts(exporter)
    assert found[-1].attributes[sc.ERROR_TYPE] == "upstream_malformed"
    # The request span ends just after the last byte reached the client: wait for it (as test_gateway's finished()).
    deadline = time.monotonic() + 10
    while not (server := [s for s in exporter.get_finished_spans() if s.name == "gateway chat"]):
        assert time.monotonic() < deadline, "no gateway chat span"
        time.sleep(0.01)
    assert server[0].attributes[sc.ERROR_TYPE] == "upstream_malformed"


def test_malformed_non_json_array_event_is_not_a_500(gateway_for, stub):
    stubs, url_up = stub
    stubs.script = lambda req, headers: Behaviour(tokens=3, malformed_at=0, malformed=b"data: [1, 2]\n\n")
    gateway, url = gateway_for({"ok": url_up})
    resp = httpx.post(url + "/v1/chat/completions", json=BODY, timeout=10)
    assert resp.status_code == 200 and events(resp.text)[-1] == "[DONE]"


def test_client_leaving_before_the_first_token_cancels_upstream_within_a_second(gateway_for, stub, exporter):
    stubs, url_up = stub
    stubs.script = lambda req, headers: Behaviour(tokens=5, delay_s=7.0)
    stubs.disconnects.clear()
    gateway, url = gateway_for({"ok": url_up})
    # A raw client: the gateway sends no headers before the first token, so the client leaves while
    # waiting for them (as an impatient user's HTTP client does).
    host, port = url.removeprefix("http://").split(":")
    payload = json.dumps(BODY).encode()
    sock = socket.create_connection((host, int(port)))
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
                 + f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
    deadline = time.monotonic() + 5
    while not stubs.requests and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    left = {"at": time.monotonic()}
    sock.close()
    deadline = time.monotonic() + 3
    while not stubs.disconnects and time.monotonic() < deadline:
        time.sleep(0.01)
    assert stubs.disconnects, "the upstream never saw the client leave"
    assert stubs.disconnects[0] - left["at"] < 1.0
    (attempt,) = attempts(exporter)
    assert attempt.attributes[sc.ERROR_TYPE] == "client_disconnect"
    assert gateway.router.by_id["ok"].consecutive_failures == 0  # a client leaving is not the replica's fault


def test_client_leaving_after_done_is_a_whole_answer_not_a_disconnect(gateway_for, stub, exporter):
    """vLLM's body ends with a zero-length chunk that can arrive after ``data: [DONE]``; the OpenAI SDK
    closes the connection as soon as it reads [DONE]. The client then has the whole answer: the
    attempt is ok with all its tokens, not a ``client_disconnect`` (partial) call."""
    stubs, url_up = stub
    stubs.script = lambda req, headers: Behaviour(tokens=4, end_delay_s=1.0)
    gateway, url = gateway_for({"ok": url_up})
    body = dict(BODY, stream_options={"include_usage": True})
    got = []
    with httpx.Client(timeout=10) as client:
        with client.stream("POST", url + "/v1/chat/completions", json=body) as resp:
            for line in resp.iter_lines():
                if line.startswith("data: "):
                    got.append(line[6:])
                    if got[-1] == "[DONE]":
                        break  # leaves the stream open only until the with-block closes it, as the SDK does
    left_ns = time.time_ns()
    assert got[-1] == "[DONE]" and json.loads(got[-2])["usage"]["completion_tokens"] == 4
    (attempt,) = attempts(exporter)
    assert attempt.end_time > left_ns, "the attempt ended before the client left (no race to test)"
    deadline = time.monotonic() + 10
    while not (server := [s for s in exporter.get_finished_spans() if s.name == "gateway chat"]):
        assert time.monotonic() < deadline, "no gateway chat span"
        time.sleep(0.01)
    assert sc.ERROR_TYPE not in attempt.attributes and attempt.status.is_ok
    assert attempt.attributes[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 4
    assert sc.ERROR_TYPE not in server[0].attributes
    assert gateway.router.by_id["ok"].consecutive_failures == 0


def test_upstream_silent_after_done_ends_the_attempt_ok(gateway_for, stub, exporter):
    """A replica that sends [DONE] and then never ends its body: the chunk timeout drops the upstream
    connection, but the client already has the whole answer, so no error event follows [DONE] and
    the attempt is ok (the replica is not blamed for an answer it delivered)."""
    stubs, url_up = stub
    stubs.script = lambda req, headers: Behaviour(tokens=3, end_delay_s=5.0)
    gateway, url = gateway_for({"ok": url_up}, chunk_timeout_s=0.5)
    started = time.monotonic()
    resp = httpx.post(url + "/v1/chat/completions", json=dict(BODY, stream_options={"include_usage": True}),
                      timeout=10)
    assert time.monotonic() - started < 4.0  # ended by the chunk timeout, not by the stub's 5 s
    assert resp.status_code == 200 and events(resp.text)[-1] == "[DONE]"
    assert not any("error" in json.loads(e) for e in events(resp.text)[:-1])
    (attempt,) = attempts(exporter)
    assert sc.ERROR_TYPE not in attempt.attributes and attempt.status.is_ok
    assert attempt.attributes[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 3
    assert gateway.router.by_id["ok"].consecutive_failures == 0


def test_error_event_then_silence_after_done_is_still_a_stream_error(gateway_for, stub, exporter):
    """vLLM's mid-stream error event and [DONE], then a body that never ends: the chunk timeout only
    drops the upstream connection; the attempt ends as its events said, ``stream_error`` with the two
    tokens streamed, not ok and not ``timeout``."""
    stubs, url_up = stub
    stubs.script = lambda req, headers: Behaviour(tokens=5, error_after=2, end_delay_s=5.0)
    gateway, url = gateway_for({"ok": url_up}, chunk_timeout_s=0.5)
    resp = httpx.post(url + "/v1/chat/completions", json=BODY, timeout=10)
    got = events(resp.text)
    assert resp.status_code == 200 and got[-1] == "[DONE]" and "error" in json.loads(got[-2])
    (attempt,) = attempts(exporter)
    assert attempt.attributes[sc.ERROR_TYPE] == "stream_error"
    assert attempt.attributes[sc.GATEWAY_TOKENS_STREAMED] == 2
