"""The gateway: an OpenAI-compatible reverse proxy (ASGI) that records what only it sees.

Position: serving (gateway), in front of N vLLM (or emulated) replicas. Per request it

1. extracts ``traceparent`` + ``baggage`` (task context) and opens ``gateway chat`` (SERVER);
2. runs admission control (:mod:`serving.gateway.admission`): past a priority's cap, 429 +
   ``Retry-After`` and ``gateway.admission=rejected``;
3. for each upstream attempt opens ``gateway.attempt`` (CLIENT, child of the request span) and
   sends ITS context upstream as ``traceparent``, so the engine's ``llm_request`` is its child;
4. retries on another replica only before the first byte reached the client (connection error,
   429/5xx, or a stream that died before its first event), under the retry budget
   (:mod:`serving.gateway.budget`) — each retry is its own ``gateway.attempt`` span;
5. relays the SSE stream event by event as it arrives (no buffering beyond one event), counting
   output tokens (:class:`serving.sdk.usage.StreamUsage`); an upstream failure after the first
   byte ends the client's stream with vLLM's mid-stream error chunk and ``[DONE]``, and both spans
   record the tokens already streamed;
6. asks every replica for ``stream_options: {include_usage, continuous_usage_stats}`` so the first
   chunk already carries the prompt's token count: an attempt whose stream breaks still records
   its prompt (and, with vLLM's ``--enable-prompt-tokens-details``, cached) tokens, the prefill it
   paid for. The usage-only last chunk is not relayed to a client that did not ask for usage.

Span shapes and attribute names: docs/telemetry.md, ``schema.semconv``. ``/metrics`` serves the
gateway's own Prometheus metrics (:mod:`serving.gateway.stats`); ``/health`` answers 200.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

import aiohttp
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from schema import semconv as sc
from serving.gateway.admission import Admission, Rejected
from serving.gateway.budget import RetryBudget
from serving.gateway.config import GatewayConfig
from serving.gateway.routing import Router
from serving.gateway.scraper import scrape_loop
from serving.gateway.sse import (carries_output, error_body, midstream_error_event, plain_token_event, read_body,
                                 respond, retry_after_value, usage_only_event, usage_token_event)
from serving.gateway.stats import GatewayStats, make_registry
from serving.sdk.context import extract, inject_headers, task_attributes
from serving.sdk.usage import StreamUsage

log = logging.getLogger(__name__)

INSTRUMENTATION_NAME = "infercost.serving.gateway"
PROXIED_PATHS = {"/v1/chat/completions": "chat", "/v1/completions": "text_completion"}
RETRYABLE_STATUS = frozenset((429, 500, 502, 503, 504))
# Request headers forwarded upstream; trace headers are replaced by the attempt span's own.
FORWARD_HEADERS = ("authorization", "content-type", "accept", "x-request-id", "user-agent")
_SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]


class _AttemptFailed(Exception):
    def __init__(self, error_type: str, status: int | None, retryable: bool, body: bytes = b"", headers=None):
        super().__init__(error_type)
        self.error_type, self.status, self.retryable, self.body = error_type, status, retryable, body
        self.headers = headers or {}


class Gateway:
    """The ASGI application. ``await start()`` / ``await stop()`` (or ASGI lifespan) manage the upstream client.

    config: validated here (ValueError lists every problem). tracer_provider: where spans go
    (default global). Attributes ``stats``, ``router``, ``budget``, ``admission`` are live state
    (tests and the benchmark read them).
    """

    def __init__(self, config: GatewayConfig, tracer_provider: trace.TracerProvider | None = None):
        config.validate()
        self.config = config
        self.tracer = trace.get_tracer(INSTRUMENTATION_NAME, tracer_provider=tracer_provider)
        self.router = Router(config.upstreams, config.policy, config.eject_after_failures, config.eject_s)
        self.budget = RetryBudget(config.retry_budget_ratio, config.retry_budget_window_s, config.retry_budget_min)
        self.admission = Admission(config.queue_caps, config.default_queue_cap, config.retry_after_s,
                                   config.max_inflight, config.priorities_order)
        self.stats = GatewayStats()
        self.registry = make_registry(self.stats, self.router, self.admission)
        self.client: aiohttp.ClientSession | None = None
        self.active_requests = 0  # requests whose gateway span has not ended yet
        self._scraper: asyncio.Task | None = None

    # --- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        if self.client is not None:
            return
        # aiohttp, not httpx, upstream: its C parser and O(1) connection pool keep the proxy's added
        # latency under a millisecond (benchmarks/bench_gateway.py; httpx's pool scan dominated at
        # 256 streams). trust_env=False: an HTTP(S)_PROXY must never sit between us and replicas.
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.config.connect_timeout_s,
                                        sock_read=self.config.read_timeout_s)
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=30.0, enable_cleanup_closed=False)
        self.client = aiohttp.ClientSession(connector=connector, timeout=timeout, trust_env=False,
                                            auto_decompress=False, skip_auto_headers=("User-Agent",))
        if self.config.policy == "least_loaded":
            self._scraper = asyncio.create_task(scrape_loop(self.client, self.router, self.config.scrape_interval_s),
                                                name="gateway-scraper")

    async def stop(self) -> None:
        if self._scraper is not None:
            self._scraper.cancel()
            try:
                await self._scraper
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - shutting down
                pass
            self._scraper = None
        if self.client is not None:
            await self.client.close()
            self.client = None

    # --- ASGI ----------------------------------------------------------------------------------
    async def __call__(self, scope, receive, send):
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
            return
        if kind != "http":
            return
        path, method = scope["path"], scope["method"]
        if method == "POST" and path in PROXIED_PATHS:
            if self.client is None:
                await self.start()
            await self._proxy(scope, receive, send, PROXIED_PATHS[path])
        elif path == "/metrics":
            await respond(send, 200, generate_latest(self.registry), CONTENT_TYPE_LATEST.encode())
        elif path in ("/health", "/healthz"):
            await respond(send, 200, b'{"status":"ok"}')
        elif method == "GET" and path == "/v1/models":
            await self._models(send)
        else:
            await respond(send, 404, error_body(f"no route for {method} {path}", "NotFoundError", 404))

    async def _lifespan(self, receive, send):
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await self.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _models(self, send):
        if self.client is None:
            await self.start()
        replica = self.router.choose()
        try:
            async with self.client.get(replica.upstream.url + "/v1/models") as resp:
                await respond(send, resp.status, await resp.read())
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            await respond(send, 502, error_body(f"replica {replica.replica_id}: {exc!r}", "BadGatewayError", 502))

    # --- the proxy -----------------------------------------------------------------------------
    async def _proxy(self, scope, receive, send, operation: str):
        received_at = time.monotonic()
        body = await read_body(receive)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        ctx = extract(headers)
        task_attrs = task_attributes(ctx)
        cfg, stats = self.config, self.stats
        priority = task_attrs.get(sc.TENANT_PRIORITY) or headers.get("x-priority") or cfg.default_priority
        attrs = {sc.GEN_AI_OPERATION_NAME: operation, sc.GATEWAY_POLICY: cfg.policy, **task_attrs}
        span = self.tracer.start_span("gateway chat", kind=SpanKind.SERVER, context=ctx, attributes=attrs)
        self.active_requests += 1
        try:
            try:
                request = json.loads(body)
                if not isinstance(request, dict):
                    raise ValueError("the body must be a JSON object")
            except ValueError as exc:
                span.set_attribute(sc.ERROR_TYPE, "invalid_request")
                span.set_status(Status(StatusCode.ERROR, "invalid JSON body"))
                await respond(send, 400, error_body(f"invalid JSON body: {exc}", "BadRequestError", 400))
                return
            model = request.get("model")
            stream = bool(request.get("stream"))
            client_usage = True
            if stream:
                body, client_usage = _ask_usage(request)
            if model:
                span.set_attribute(sc.GEN_AI_REQUEST_MODEL, str(model))
            span.set_attribute(sc.GEN_AI_REQUEST_STREAM, stream)
            try:
                await self.admission.acquire(priority)
            except Rejected as rej:
                stats.rejections[priority] += 1
                stats.requests[(cfg.policy, "rejected")] += 1
                span.set_attribute(sc.GATEWAY_ADMISSION, "rejected")
                span.set_attribute(sc.GATEWAY_UPSTREAM_STATUS, 429)
                span.set_attribute(sc.ERROR_TYPE, "admission_rejected")
                span.set_status(Status(StatusCode.ERROR, str(rej)))
                await respond(send, 429, error_body(str(rej), "RateLimitError", 429),
                               extra=[(b"retry-after", retry_after_value(rej.retry_after_s))])
                return
            span.set_attribute(sc.GATEWAY_ADMISSION, "admitted")
            try:
                await self._attempts(send, span, ctx, headers, body, model, stream, task_attrs, received_at, receive,
                                     operation, client_usage)
            finally:
                self.admission.release(priority)
        finally:
            span.end()
            self.active_requests -= 1

    async def _attempts(self, send, span, ctx, headers, body, model, stream, task_attrs, received_at, receive, operation,
                        client_usage=True):
        cfg, stats, router = self.config, self.stats, self.router
        self.budget.record_request()
        tried: set[str] = set()
        base_headers = {k: headers[k] for k in FORWARD_HEADERS if k in headers}
        # Baggage goes upstream unchanged (vLLM ignores it; another proxy may not).
        parent_ctx = trace.set_span_in_context(span, ctx)
        task_id = task_attrs.get(sc.TASK_ID)
        retries = 0
        failure: _AttemptFailed | None = None
        for attempt in range(1, cfg.max_attempts + 1):
            if attempt > 1:
                if len(tried) >= len(router.replicas):
                    break  # every replica already failed this request
                # Ask the budget before choosing, so a denied retry does not advance round-robin.
                if not self.budget.try_retry():
                    stats.retries_denied += 1
                    break
                retries += 1
                stats.retries += 1
            replica = router.choose(task_id, tried)
            if replica is None:
                break
            tried.add(replica.replica_id)
            aattrs = {sc.GATEWAY_ATTEMPT: attempt, sc.GATEWAY_REPLICA: replica.replica_id, sc.GATEWAY_POLICY: cfg.policy,
                      sc.GEN_AI_OPERATION_NAME: operation, **task_attrs}
            if model:
                aattrs[sc.GEN_AI_REQUEST_MODEL] = str(model)
            aspan = self.tracer.start_span("gateway.attempt", kind=SpanKind.CLIENT, context=parent_ctx, attributes=aattrs)
            up_headers = dict(base_headers)
            inject_headers(up_headers, trace.set_span_in_context(aspan, ctx))
            span.set_attribute(sc.GATEWAY_REPLICA, replica.replica_id)
            span.set_attribute(sc.GATEWAY_RETRIES, retries)
            replica.inflight += 1
            try:
                outcome = await self._one_attempt(send, span, aspan, replica, up_headers, body, stream, received_at, receive,
                                                  operation, client_usage)
            except _AttemptFailed as exc:
                failure = exc
                router.record_result(replica, ok=False)
                stats.attempts[(replica.replica_id, "error")] += 1
                _end_error(aspan, exc.error_type, exc.status)
                if not exc.retryable:
                    break
                continue
            finally:
                replica.inflight -= 1
            # Committed: the client has bytes; no more retries whatever happens.
            ok = outcome is None
            router.record_result(replica, ok=ok)
            stats.attempts[(replica.replica_id, "ok" if ok else "error")] += 1
            stats.requests[(cfg.policy, "ok" if ok else outcome)] += 1
            if ok:
                span.set_status(Status(StatusCode.OK))
            else:
                span.set_status(Status(StatusCode.ERROR, outcome))
                span.set_attribute(sc.ERROR_TYPE, outcome)
            return
        # No attempt reached the client: relay the last upstream answer, or 502/503.
        span.set_attribute(sc.GATEWAY_RETRIES, retries)
        if failure is None:
            stats.requests[(cfg.policy, "no_replica")] += 1
            span.set_status(Status(StatusCode.ERROR, "no replica available"))
            span.set_attribute(sc.ERROR_TYPE, "no_replica")
            await respond(send, 503, error_body("no replica available", "ServiceUnavailableError", 503),
                           extra=[(b"retry-after", retry_after_value(cfg.retry_after_s))])
            return
        stats.requests[(cfg.policy, "upstream_error")] += 1
        span.set_attribute(sc.ERROR_TYPE, failure.error_type)
        span.set_status(Status(StatusCode.ERROR, failure.error_type))
        if failure.status is not None and failure.body:
            status, payload = failure.status, failure.body
        else:
            status = 502
            payload = error_body(f"upstream failed: {failure.error_type}", "BadGatewayError", 502)
        span.set_attribute(sc.GATEWAY_UPSTREAM_STATUS, status)
        extra = [(b"retry-after", failure.headers["retry-after"].encode())] if "retry-after" in failure.headers else []
        await respond(send, status, payload, extra=extra)

    async def _one_attempt(self, send, span, aspan, replica, up_headers, body, stream, received_at, receive,
                           operation, client_usage=True) -> str | None:
        """Run one upstream attempt. Raises _AttemptFailed before the first byte reached the client;
        after that returns None (clean end) or an error.type (the stream broke)."""
        url = replica.upstream.url + ("/v1/chat/completions" if operation == "chat" else "/v1/completions")
        # Gateway time before the upstream request leaves: body read, parsing, admission, routing, spans.
        pre_s = time.monotonic() - received_at
        try:
            resp = await self.client.post(url, data=body, headers=up_headers)
        except asyncio.TimeoutError as exc:
            raise _AttemptFailed("timeout", None, True) from exc
        except aiohttp.ClientError as exc:
            raise _AttemptFailed("connection_error", None, True) from exc
        status = resp.status
        aspan.set_attribute(sc.GATEWAY_UPSTREAM_STATUS, status)
        clean = False
        try:
            if status >= 400:
                payload = await _read_quietly(resp)
                retry_after = resp.headers.get("retry-after")
                raise _AttemptFailed(f"http.{status}", status, status in RETRYABLE_STATUS, payload,
                                     {"retry-after": retry_after} if retry_after else {})
            if not stream:
                try:
                    payload = await resp.read()
                except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                    raise _AttemptFailed("stream_broken", status, True) from exc
                clean = True
                return await self._relay_whole(send, span, aspan, status, payload, received_at)
            outcome = await self._relay_stream(send, span, aspan, resp, received_at, receive, replica.replica_id,
                                               pre_s if aspan_attempt(aspan) == 1 else None, client_usage)
            clean = outcome is None
            return outcome
        finally:
            # A fully read response goes back to the pool; anything else closes its connection.
            if clean:
                resp.release()
            else:
                resp.close()

    async def _relay_whole(self, send, span, aspan, status, payload, received_at) -> None:
        usage = StreamUsage()
        try:
            doc = json.loads(payload)
            usage.feed({"id": doc.get("id"), "model": doc.get("model"), "usage": doc.get("usage"),
                        "choices": [{"index": c.get("index", 0), "finish_reason": c.get("finish_reason")}
                                    for c in doc.get("choices") or ()]})
        except (ValueError, AttributeError):
            pass
        ttft = time.monotonic() - received_at
        await respond(send, status, payload)
        self._finish_ok(span, aspan, usage, status, ttft)

    async def _relay_stream(self, send, span, aspan, resp, received_at, receive, replica_id,
                            pre_s: float | None = None, client_usage: bool = True) -> str | None:
        usage = StreamUsage()
        raw = resp.content.iter_any()
        buf = b""
        committed = False
        saw_done = False
        ttft = None
        disconnect = asyncio.ensure_future(receive())
        try:
            while True:
                try:
                    chunk = await raw.__anext__()
                    got_at = time.monotonic()
                except StopAsyncIteration:
                    break
                except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                    if not committed:
                        raise _AttemptFailed("stream_broken", resp.status, True) from exc
                    return await self._break(send, span, aspan, usage, ttft, "stream_broken",
                                             f"upstream replica {replica_id} failed mid-stream: {type(exc).__name__}")
                buf += chunk
                cut = buf.rfind(b"\n\n")
                if cut < 0:
                    continue
                out, buf = buf[:cut + 2], buf[cut + 2:]
                for event in out.split(b"\n\n"):
                    if event.startswith(b"data: "):
                        data = event[6:]
                        if data.startswith(b"[DONE]"):
                            saw_done = True
                        elif usage.chunks and (plain_token_event(data) or (usage.usage_prompt_tokens is not None
                                                                           and usage_token_event(data))):
                            # Hot path: a token chunk with nothing else to read (no finish, error,
                            # and no usage we still need): count it without decoding JSON.
                            usage.chunks += 1
                            if carries_output(data):
                                usage.content_chunks += 1
                        else:
                            if not client_usage and usage_only_event(data):
                                out = out.replace(event + b"\n\n", b"", 1)  # usage the client did not ask for
                            try:
                                usage.feed(json.loads(data))
                            except ValueError:
                                pass
                if ttft is None and usage.content_chunks:
                    # TTFT = the first chunk carrying a token (a role-only first chunk is not one).
                    ttft = time.monotonic() - received_at
                if not committed:
                    await send({"type": "http.response.start", "status": resp.status, "headers": _SSE_HEADERS})
                    committed = True
                await send({"type": "http.response.body", "body": out, "more_body": True})
                if pre_s is not None:
                    # Added latency of the proxy: before the upstream send + first event's relay time.
                    self.stats.overhead.observe(pre_s + time.monotonic() - got_at)
                    pre_s = None
                if disconnect.done():
                    self._finish_error(span, aspan, usage, ttft, "client_disconnect")
                    return "client_disconnect"
            if not committed:
                raise _AttemptFailed("stream_broken", resp.status, True)
            if not saw_done:
                return await self._break(send, span, aspan, usage, ttft, "stream_broken",
                                         f"upstream replica {replica_id} closed the stream early")
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            if usage.error is not None:
                self._finish_error(span, aspan, usage, ttft, "stream_error")
                return "stream_error"
            self._finish_ok(span, aspan, usage, resp.status, ttft)
            return None
        finally:
            disconnect.cancel()

    async def _break(self, send, span, aspan, usage, ttft, error_type, message) -> str:
        await send({"type": "http.response.body", "body": midstream_error_event(message), "more_body": False})
        self._finish_error(span, aspan, usage, ttft, error_type)
        return error_type

    def _record_tokens(self, span, aspan, usage: StreamUsage, ttft: float | None) -> None:
        tokens = usage.tokens_received
        self.stats.tokens_streamed += tokens
        for s in (span, aspan):
            s.set_attribute(sc.GATEWAY_TOKENS_STREAMED, tokens)
            if ttft is not None:
                s.set_attribute(sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK, ttft)
        if ttft is not None:
            self.stats.ttft.observe(ttft)
        if usage.usage_prompt_tokens is not None:
            aspan.set_attribute(sc.GEN_AI_USAGE_INPUT_TOKENS, int(usage.usage_prompt_tokens))
        if usage.usage_cached_tokens is not None:
            aspan.set_attribute(sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, int(usage.usage_cached_tokens))
        if usage.finish_reasons:
            aspan.set_attribute(sc.GEN_AI_RESPONSE_FINISH_REASONS, usage.finish_reasons)
        if usage.response_id:
            aspan.set_attribute(sc.GEN_AI_RESPONSE_ID, usage.response_id)

    def _finish_ok(self, span, aspan, usage, status, ttft) -> None:
        self._record_tokens(span, aspan, usage, ttft)
        if usage.usage_completion_tokens is not None:
            aspan.set_attribute(sc.GEN_AI_USAGE_OUTPUT_TOKENS, int(usage.usage_completion_tokens))
        span.set_attribute(sc.GATEWAY_UPSTREAM_STATUS, status)
        aspan.set_status(Status(StatusCode.OK))
        aspan.end()

    def _finish_error(self, span, aspan, usage, ttft, error_type) -> None:
        self._record_tokens(span, aspan, usage, ttft)
        span.set_attribute(sc.GATEWAY_UPSTREAM_STATUS, 200)
        _end_error(aspan, error_type, None)


def _ask_usage(request: dict) -> tuple[bytes, bool]:
    """The upstream body of a streamed request: ``stream_options`` with ``include_usage`` and
    ``continuous_usage_stats`` (vLLM: usage on every chunk, cumulative), so prompt tokens are known
    from the first chunk. Returns (body, whether the client itself asked for usage)."""
    options = request.get("stream_options")
    options = dict(options) if isinstance(options, dict) else {}
    client_usage = bool(options.get("include_usage"))
    options.update(include_usage=True, continuous_usage_stats=True)
    return json.dumps({**request, "stream_options": options}).encode(), client_usage


def aspan_attempt(aspan) -> int:
    attrs = getattr(aspan, "attributes", None) or {}
    return int(attrs.get(sc.GATEWAY_ATTEMPT, 1))


def _end_error(aspan, error_type: str, status: int | None) -> None:
    aspan.set_attribute(sc.ERROR_TYPE, error_type)
    if status is not None:
        aspan.set_attribute(sc.GATEWAY_UPSTREAM_STATUS, status)
    aspan.set_status(Status(StatusCode.ERROR, error_type))
    aspan.end()


async def _read_quietly(resp: aiohttp.ClientResponse) -> bytes:
    try:
        return await resp.read()
    except (aiohttp.ClientError, asyncio.TimeoutError):
        return b""
