"""A scripted OpenAI-compatible upstream for gateway/SDK tests and the gateway benchmark.

A test double, not product code. Each request's behaviour comes from ``StubUpstream.script`` (a
callable ``(request_json, headers) -> Behaviour``), so a test can make one replica crash mid-stream,
answer 503 with ``Retry-After``, or put usage in odd chunks. The engine emulator
(``serving/emulator``) is the realistic replica; this one is deterministic and fast.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field, replace
from contextlib import contextmanager
from typing import Callable

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from serving.gateway import Gateway, GatewayConfig, ServerThread
from serving.gateway.sse import read_body

USAGE_MODES = ("final", "in_last_choice", "cumulative", "none")


@dataclass
class Behaviour:
    """What the stub does with one request.

    status: HTTP status (non-200 -> an error body, ``retry_after`` header if set). tokens: output
    tokens, one per chunk. usage: final | in_last_choice | cumulative | none. crash_after: close
    the connection abruptly after this many token chunks. error_after: send vLLM's mid-stream
    error chunk + [DONE] after this many token chunks. delay_s: wait before the first chunk;
    token_gap_s: between chunks. prompt_tokens: reported in usage; cached_tokens: reported as
    ``usage.prompt_tokens_details.cached_tokens`` (vLLM's ``--enable-prompt-tokens-details``) when set.
    A request asking ``stream_options.continuous_usage_stats`` gets cumulative usage on every chunk,
    as vLLM answers it. malformed_at: replace token chunk
    number N (0 = the first event) by ``malformed`` bytes. stall_after / stall_s: go silent for
    stall_s seconds after that many token chunks. end_delay_s: hold the end of the body this long
    after ``data: [DONE]`` (the terminating zero-length chunk of a chunked response can arrive in a
    later read than the last event).
    """

    status: int = 200
    retry_after: str | None = None
    tokens: int = 5
    usage: str = "final"
    crash_after: int | None = None
    error_after: int | None = None
    delay_s: float = 0.0
    token_gap_s: float = 0.0
    prompt_tokens: int = 7
    cached_tokens: int | None = None
    malformed_at: int | None = None
    malformed: bytes = b"data: {not json\n\n"
    stall_after: int | None = None
    stall_s: float = 0.0
    end_delay_s: float = 0.0


class _Crash(Exception):
    pass


@dataclass
class StubUpstream:
    """ASGI app. ``requests`` records (path, json body, lower-cased headers) of every request, ``peers``
    its client's (host, port) (a reused keep-alive connection keeps its port); ``disconnects`` the
    monotonic times at which a client left while the stub was waiting."""

    replica_id: str = "stub"
    script: Callable[[dict, dict], Behaviour] = field(default=lambda req, headers: Behaviour())
    requests: list = field(default_factory=list)
    peers: list = field(default_factory=list)
    disconnects: list = field(default_factory=list)
    waiting: int = 0
    running: int = 0

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                await send({"type": msg["type"] + ".complete"})
                if msg["type"] == "lifespan.shutdown":
                    return
        if scope["type"] != "http":
            return
        if scope["path"] == "/metrics":
            text = (f'vllm:num_requests_waiting{{model_name="m",engine="0"}} {self.waiting}\n'
                    f'vllm:num_requests_running{{model_name="m",engine="0"}} {self.running}\n').encode()
            await _plain(send, 200, text, b"text/plain")
            return
        body = await read_body(receive)
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        req = json.loads(body or b"{}")
        self.requests.append((scope["path"], req, headers))
        self.peers.append(tuple(scope.get("client") or ()))
        b = self.script(req, headers)
        if b.status != 200:
            extra = [(b"retry-after", b.retry_after.encode())] if b.retry_after else []
            payload = json.dumps({"error": {"message": f"stub {b.status}", "type": "Error", "param": None,
                                            "code": b.status}}).encode()
            await _plain(send, b.status, payload, b"application/json", extra)
            return
        rid = f"chatcmpl-{self.replica_id}-{len(self.requests)}"
        model = req.get("model", "m")
        if not req.get("stream"):
            doc = {"id": rid, "object": "chat.completion", "created": int(time.time()), "model": model,
                   "choices": [{"index": 0, "message": {"role": "assistant", "content": "x" * b.tokens},
                                "finish_reason": "stop"}],
                   "usage": {"prompt_tokens": b.prompt_tokens, "completion_tokens": b.tokens,
                             "total_tokens": b.prompt_tokens + b.tokens}}
            if b.cached_tokens is not None:
                doc["usage"]["prompt_tokens_details"] = {"cached_tokens": b.cached_tokens}
            await asyncio.sleep(b.delay_s)
            await _plain(send, 200, json.dumps(doc).encode(), b"application/json")
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream; charset=utf-8")]})
        if b.delay_s and not await self._wait(b.delay_s, receive):
            return

        def chunk(delta, finish=None, usage=None, choices=True):
            doc = {"id": rid, "object": "chat.completion.chunk", "created": 0, "model": model,
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if choices else []}
            if usage is not None:
                doc["usage"] = usage
            return b"data: " + json.dumps(doc).encode() + b"\n\n"

        def usage_at(n):
            u = {"prompt_tokens": b.prompt_tokens, "completion_tokens": n, "total_tokens": b.prompt_tokens + n}
            if b.cached_tokens is not None:
                u["prompt_tokens_details"] = {"cached_tokens": b.cached_tokens}
            return u

        include = (req.get("stream_options") or {}).get("include_usage", False)
        if include and (req.get("stream_options") or {}).get("continuous_usage_stats") and b.usage == "final":
            b = replace(b, usage="cumulative_and_final")
        cumulative = b.usage in ("cumulative", "cumulative_and_final")
        first = chunk({"role": "assistant", "content": ""}, usage=usage_at(0) if cumulative else None)
        await send({"type": "http.response.body", "body": b.malformed if b.malformed_at == 0 else first,
                    "more_body": True})
        for i in range(1, b.tokens + 1):
            if b.malformed_at == i:
                await send({"type": "http.response.body", "body": b.malformed, "more_body": True})
                continue
            if b.stall_after is not None and i == b.stall_after + 1 and not await self._wait(b.stall_s, receive):
                return
            if b.crash_after is not None and i > b.crash_after:
                raise _Crash("stub replica crashed mid-stream")
            if b.error_after is not None and i > b.error_after:
                err = {"error": {"message": "engine died", "type": "InternalServerError", "param": None, "code": 500}}
                await self._end(send, receive, b"data: " + json.dumps(err).encode() + b"\n\ndata: [DONE]\n\n", b)
                return
            last = i == b.tokens
            usage = None
            if cumulative or (b.usage == "in_last_choice" and last and include):
                usage = usage_at(i)
            await send({"type": "http.response.body", "body": chunk({"content": "tok "}, "stop" if last else None, usage),
                        "more_body": True})
            if b.token_gap_s:
                await asyncio.sleep(b.token_gap_s)
        tail = b""
        if include and b.usage in ("final", "cumulative_and_final"):
            tail += chunk(None, usage=usage_at(b.tokens), choices=False)
        tail += b"data: [DONE]\n\n"
        await self._end(send, receive, tail, b)

    async def _end(self, send, receive, tail: bytes, b: Behaviour) -> None:
        """Send the last events and end the body (``end_delay_s`` after them, if set)."""
        if b.end_delay_s:
            await send({"type": "http.response.body", "body": tail, "more_body": True})
            await self._wait(b.end_delay_s, receive)
            tail = b""
        await send({"type": "http.response.body", "body": tail, "more_body": False})


    async def _wait(self, seconds: float, receive) -> bool:
        """Sleep ``seconds`` unless the client leaves first (recorded in ``disconnects``); True if it stayed."""
        waiter = asyncio.ensure_future(receive())
        try:
            done, _ = await asyncio.wait([waiter], timeout=seconds)
            if waiter in done and waiter.result().get("type") == "http.disconnect":
                self.disconnects.append(time.monotonic())
                return False
            return True
        finally:
            waiter.cancel()


async def _plain(send, status, body, ctype, extra=()):
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", ctype), (b"content-length", str(len(body)).encode()), *extra]})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def memory_tracing() -> tuple[TracerProvider, InMemorySpanExporter]:
    """A tracer provider that hands each span to an in-memory exporter as it ends."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


@contextmanager
def gateway_servers(tracer_provider: TracerProvider):
    """Yields ``start(upstreams, **config) -> (gateway, url)``, which serves a real gateway in front of
    ``upstreams`` (a list of :class:`serving.gateway.Upstream`); every gateway started is stopped at the end."""
    running = []

    def start(upstreams, **config):
        gateway = Gateway(GatewayConfig(upstreams, **config), tracer_provider=tracer_provider)
        server = ServerThread(gateway).start()
        running.append(server)
        return gateway, server.url

    try:
        yield start
    finally:
        for server in running:
            server.stop()
