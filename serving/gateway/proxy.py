"""The gateway: an OpenAI-compatible reverse proxy (ASGI) that records what only it sees.

Position: serving (gateway), in front of N vLLM (or emulated) replicas. Per request it

1. extracts ``traceparent`` + ``baggage`` (task context) and opens ``gateway chat`` (SERVER);
2. runs admission control (:mod:`serving.gateway.admission`): past a priority's cap, 429 +
   ``Retry-After`` and ``gateway.admission=rejected``;
3. for each upstream attempt opens ``gateway.attempt`` (CLIENT, child of the request span) and
   sends ITS context upstream as ``traceparent``, so the engine's ``llm_request`` is its child;
4. retries on another replica only before the first byte reached the client (connection error,
   timeout, 429/5xx, malformed data, or a stream that died before its first event), under the retry
   budget (:mod:`serving.gateway.budget`) — each retry is its own ``gateway.attempt`` span; a
   replica failing repeatedly is ejected for a while (outlier detection,
   :mod:`serving.gateway.routing`: ``gateway.outlier.ejected`` on the attempt span, the
   ``infercost_gateway_outlier_ejections_total`` metric);
5. relays the SSE stream event by event as it arrives (:mod:`serving.gateway.relay`); an upstream
   failure after the first byte ends the client's stream with vLLM's mid-stream error chunk and
   ``[DONE]``, and both spans record the tokens already streamed;
6. bounds every attempt by connect / first-byte / between-chunk / response timeouts and stops the
   upstream request within a watchdog tick when the client disconnects
   (:mod:`serving.gateway.watchdog`);
7. asks every replica for ``stream_options: {include_usage, continuous_usage_stats}`` so the first
   chunk already carries the prompt's token count: an attempt whose stream breaks still records
   its prompt (and, with vLLM's ``--enable-prompt-tokens-details``, cached) tokens, the prefill it
   paid for. The usage-only last chunk is not relayed to a client that did not ask for usage.

``error.type`` on gateway spans: ``timeout`` (``gateway.timeout.phase`` says which),
``connection_error``, ``upstream_malformed``, ``stream_broken``, ``stream_error`` (the replica sent
an error event), ``http.<status>`` (the replica answered an HTTP error), ``client_disconnect``,
and on the request span also ``admission_rejected``, ``no_replica``, ``invalid_request``.

Span shapes and attribute names: docs/telemetry.md, ``schema.semconv``. ``/metrics`` serves the
gateway's own Prometheus metrics (:mod:`serving.gateway.stats`); ``/health`` answers 200.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

import aiohttp
import yarl
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from schema import semconv as sc
from serving.gateway.admission import Admission, Rejected
from serving.gateway.budget import RetryBudget
from serving.gateway.config import GatewayConfig
from serving.gateway.routing import Router
from serving.gateway.scraper import scrape_loop
from serving.gateway.spans import SpanFactory
from serving.gateway.relay import SSE_HEADERS, AttemptFailed, ClientGone, RelayMixin, end_error, error_event
from serving.gateway.sse import error_body, loads, read_body, respond, retry_after_value
from serving.gateway.stats import GatewayStats, make_registry
from serving.gateway.watchdog import AttemptWatch, take_cancellation, watchdog_loop
from serving.sdk.context import EMPTY_CONTEXT, PROPAGATOR, baggage_header, inject_span_headers, task_attributes

log = logging.getLogger(__name__)

INSTRUMENTATION_NAME = "infercost.serving.gateway"
PROXIED_PATHS = {"/v1/chat/completions": "chat", "/v1/completions": "text_completion"}
RETRYABLE_STATUS = frozenset((429, 500, 502, 503, 504))
# Request headers forwarded upstream; trace headers are replaced by the attempt span's own.
FORWARD_HEADERS = ("authorization", "content-type", "accept", "x-request-id", "user-agent")
# The request headers the gateway reads (forwarded ones, trace context, baggage, priority), by their
# raw lower-case bytes: the others (host, content-length, ...) are never decoded.
_READ_HEADERS = {name.encode(): name for name in (*FORWARD_HEADERS, "traceparent", "tracestate", "baggage", "x-priority")}
# Idle upstream connections are reused for at most this long (s). vLLM's API server closes an idle
# keep-alive connection after 5 s (VLLM_HTTP_TIMEOUT_KEEP_ALIVE, uvicorn's default too): a request sent
# on a connection at that instant is reset before its first byte. aiohttp takes the pool's oldest idle
# connection first and checks its idle time on acquisition, so a margin below 5 s avoids the race; a new
# connection on loopback costs ~0.1 ms. collectors.scraper keeps its own for the same reason.
UPSTREAM_KEEPALIVE_S = 3.0
_USAGE_OPTIONS = b', "stream_options": {"include_usage": true, "continuous_usage_stats": true}}'


class Gateway(RelayMixin):
    """The ASGI application. ``await start()`` / ``await stop()`` (or ASGI lifespan) manage the upstream client.

    config: validated here (ValueError lists every problem). tracer_provider: where spans go
    (default global). Attributes ``stats``, ``router``, ``budget``, ``admission`` are live state
    (tests and the benchmark read them).
    """

    def __init__(self, config: GatewayConfig, tracer_provider: trace.TracerProvider | None = None):
        config.validate()
        self.config = config
        self.tracer = trace.get_tracer(INSTRUMENTATION_NAME, tracer_provider=tracer_provider)
        self.spans = SpanFactory(self.tracer)
        self.router = Router(config.upstreams, config.policy, config.eject_after_failures, config.eject_s,
                             max_ejection_s=config.max_ejection_s, max_ejection_percent=config.max_ejection_percent)
        self.budget = RetryBudget(config.retry_budget_ratio, config.retry_budget_window_s, config.retry_budget_min)
        self.admission = Admission(config.queue_caps, config.default_queue_cap, config.retry_after_s,
                                   config.max_inflight, config.priorities_order)
        self.stats = GatewayStats()
        self.registry = make_registry(self.stats, self.router, self.admission)
        self.client: aiohttp.ClientSession | None = None
        self.active_requests = 0  # requests whose gateway span has not ended yet
        self._scraper: asyncio.Task | None = None
        self._watches: set[AttemptWatch] = set()  # attempts in flight (timeouts, disconnects)
        self._watchdog: asyncio.Task | None = None
        self._urls: dict[tuple[str, str], yarl.URL] = {}

    # --- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        if self.client is not None:
            return
        # aiohttp, not httpx, upstream: its C parser and O(1) connection pool keep the proxy's added
        # latency under a millisecond (benchmarks/bench_gateway.py; httpx's pool scan dominated at
        # 256 streams). trust_env=False: an HTTP(S)_PROXY must never sit between us and replicas.
        # Only the connect timeout is aiohttp's: first-byte, between-chunk and response deadlines are
        # the watchdog's (one task, no timer per chunk).
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.config.connect_timeout_s, sock_read=None)
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=UPSTREAM_KEEPALIVE_S, enable_cleanup_closed=False)
        # DummyCookieJar: a proxy keeps no cookies (one client's Set-Cookie must never ride along on
        # another client's request), and the jar's per-request filtering is CPU on the hot path.
        self.client = aiohttp.ClientSession(connector=connector, timeout=timeout, trust_env=False,
                                            auto_decompress=False, skip_auto_headers=("User-Agent",),
                                            cookie_jar=aiohttp.DummyCookieJar())
        if self.config.policy == "least_loaded":
            self._scraper = asyncio.create_task(scrape_loop(self.client, self.router, self.config.scrape_interval_s),
                                                name="gateway-scraper")
        c = self.config
        tick = min(max(min(c.first_byte_timeout_s, c.chunk_timeout_s, c.response_timeout_s) / 4, 0.02), 0.25)
        self._watchdog = asyncio.create_task(watchdog_loop(self._watches, tick), name="gateway-watchdog")

    async def stop(self) -> None:
        for task in (self._scraper, self._watchdog):
            if task is not None:
                task.cancel()
                try:
                    await task
                except (asyncio.CancelledError, Exception):  # noqa: BLE001 - shutting down
                    pass
        self._scraper = self._watchdog = None
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
        headers = _read_headers(scope["headers"])
        if "traceparent" in headers or "baggage" in headers:
            ctx = PROPAGATOR.extract(headers)  # extract() without its re-lowering: the keys are lower-case
            task_attrs = task_attributes(ctx)
        else:  # what extract() returns without either header (tracestate alone is ignored)
            ctx, task_attrs = EMPTY_CONTEXT, {}
        cfg, stats = self.config, self.stats
        priority = task_attrs.get(sc.TENANT_PRIORITY) or headers.get("x-priority") or cfg.default_priority
        attrs = {sc.GEN_AI_OPERATION_NAME: operation, sc.GATEWAY_POLICY: cfg.policy, **task_attrs}
        span = self.spans.start("gateway chat", SpanKind.SERVER, ctx, attrs)
        self.active_requests += 1
        try:
            try:
                request = loads(body)
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
                body, client_usage = _ask_usage(request, body)
            span.set_attributes({sc.GEN_AI_REQUEST_MODEL: str(model), sc.GEN_AI_REQUEST_STREAM: stream} if model
                                else {sc.GEN_AI_REQUEST_STREAM: stream})
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
        # Baggage goes upstream unchanged (vLLM ignores it; another proxy may not): encoded once.
        baggage_value = baggage_header(ctx) if ctx is not EMPTY_CONTEXT else None
        parent_ctx = trace.set_span_in_context(span, ctx)
        task_id = task_attrs.get(sc.TASK_ID)
        retries = 0
        failure: AttemptFailed | None = None
        # One pending receive() per request: the client's http.disconnect cuts the attempt in flight.
        current: list[AttemptWatch | None] = [None]
        disconnect = asyncio.ensure_future(receive())
        disconnect.add_done_callback(lambda f: current[0] is not None and current[0].on_receive(f))
        try:
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
                if disconnect.done():
                    failure = AttemptFailed("client_disconnect", None, False)
                    break
                replica = router.choose(task_id, tried)
                if replica is None:
                    break
                tried.add(replica.replica_id)
                aattrs = {sc.GATEWAY_ATTEMPT: attempt, sc.GATEWAY_REPLICA: replica.replica_id,
                          sc.GATEWAY_POLICY: cfg.policy, sc.GEN_AI_OPERATION_NAME: operation, **task_attrs}
                if model:
                    aattrs[sc.GEN_AI_REQUEST_MODEL] = str(model)
                aspan = self.spans.start("gateway.attempt", SpanKind.CLIENT, parent_ctx, aattrs)
                up_headers = dict(base_headers)
                inject_span_headers(up_headers, aspan.get_span_context(), baggage_value)
                span.set_attributes({sc.GATEWAY_REPLICA: replica.replica_id, sc.GATEWAY_RETRIES: retries})
                watch = AttemptWatch(asyncio.current_task(), stream, cfg.first_byte_timeout_s, cfg.chunk_timeout_s,
                                     cfg.response_timeout_s)
                current[0] = watch
                self._watches.add(watch)
                replica.inflight += 1
                try:
                    outcome = await self._one_attempt(send, span, aspan, replica, up_headers, body, stream, received_at,
                                                      watch, operation, client_usage, attempt)
                except AttemptFailed as exc:
                    failure = exc
                    self._record_replica(replica, aspan, ok=not exc.replica_fault)
                    stats.attempts[(replica.replica_id, "error")] += 1
                    if exc.phase:
                        aspan.set_attribute(sc.GATEWAY_TIMEOUT_PHASE, exc.phase)
                    end_error(aspan, exc.error_type, exc.status)
                    if not exc.retryable:
                        break
                    continue
                except ClientGone:
                    failure = AttemptFailed("client_disconnect", None, False)
                    stats.attempts[(replica.replica_id, "error")] += 1
                    end_error(aspan, "client_disconnect", None)
                    break
                finally:
                    replica.inflight -= 1
                    watch.active = False
                    current[0] = None
                    self._watches.discard(watch)
                # Committed: the client has bytes; no more retries whatever happens.
                ok = outcome is None
                if outcome != "client_disconnect":  # a client leaving says nothing about the replica
                    self._record_replica(replica, aspan, ok=ok)
                stats.attempts[(replica.replica_id, "ok" if ok else "error")] += 1
                stats.requests[(cfg.policy, "ok" if ok else outcome)] += 1
                if ok:
                    span.set_status(Status(StatusCode.OK))
                else:
                    span.set_status(Status(StatusCode.ERROR, outcome))
                    span.set_attribute(sc.ERROR_TYPE, outcome)
                return
        finally:
            disconnect.cancel()
        await self._no_answer(send, span, failure, retries, stream)

    def _record_replica(self, replica, aspan, ok: bool) -> None:
        """Outlier detection: record the attempt's result; mark the attempt that ejected its replica."""
        ejected_s = self.router.record_result(replica, ok=ok)
        if ejected_s:
            self.stats.ejections[replica.replica_id] += 1
            aspan.set_attribute(sc.GATEWAY_OUTLIER_EJECTED, True)
            aspan.set_attribute(sc.GATEWAY_OUTLIER_EJECTION_S, ejected_s)
            log.warning("replica %s ejected for %.0f s after %d consecutive failures", replica.replica_id, ejected_s,
                        self.config.eject_after_failures)

    async def _no_answer(self, send, span, failure: AttemptFailed | None, retries: int, stream: bool) -> None:
        """No attempt reached the client: relay the last upstream answer, or say what went wrong."""
        cfg, stats = self.config, self.stats
        span.set_attribute(sc.GATEWAY_RETRIES, retries)
        if failure is None:
            stats.requests[(cfg.policy, "no_replica")] += 1
            span.set_status(Status(StatusCode.ERROR, "no replica available"))
            span.set_attribute(sc.ERROR_TYPE, "no_replica")
            await respond(send, 503, error_body("no replica available", "ServiceUnavailableError", 503),
                          extra=[(b"retry-after", retry_after_value(cfg.retry_after_s))])
            return
        outcome = "client_disconnect" if failure.error_type == "client_disconnect" else "upstream_error"
        stats.requests[(cfg.policy, outcome)] += 1
        span.set_attribute(sc.ERROR_TYPE, failure.error_type)
        span.set_status(Status(StatusCode.ERROR, failure.error_type))
        if outcome == "client_disconnect":
            return  # nobody to answer
        if stream and failure.error_type == "upstream_malformed":
            # a streaming client gets a stream: the error as an event, then [DONE]
            span.set_attribute(sc.GATEWAY_UPSTREAM_STATUS, 200)
            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            await send({"type": "http.response.body", "more_body": False,
                        "body": error_event("upstream_malformed", "every replica tried sent malformed data")})
            return
        if failure.status is not None and failure.body:
            status, payload = failure.status, failure.body
        elif failure.error_type == "timeout":
            status = 504
            payload = error_body(f"upstream timed out ({failure.phase or 'timeout'})", "GatewayTimeoutError", 504)
        else:
            status = 502
            payload = error_body(f"upstream failed: {failure.error_type}", "BadGatewayError", 502)
        span.set_attribute(sc.GATEWAY_UPSTREAM_STATUS, status)
        extra = [(b"retry-after", failure.headers["retry-after"].encode())] if "retry-after" in failure.headers else []
        await respond(send, status, payload, extra=extra)

    async def _one_attempt(self, send, span, aspan, replica, up_headers, body, stream, received_at, watch,
                           operation, client_usage: bool = True, attempt: int = 1) -> str | None:
        """Run one upstream attempt. Raises AttemptFailed before the first byte reached the client (or
        ClientGone); after that returns None (clean end) or an error.type (the stream broke)."""
        url = self._urls.get((replica.replica_id, operation))
        if url is None:  # parsed once per replica and path, not per request
            url = self._urls[(replica.replica_id, operation)] = yarl.URL(
                replica.upstream.url + ("/v1/chat/completions" if operation == "chat" else "/v1/completions"))
        # Gateway time before the upstream request leaves: body read, parsing, admission, routing, spans.
        pre_s = time.monotonic() - received_at
        resp = None
        clean = False
        try:
            try:
                resp = await self.client.post(url, data=body, headers=up_headers)
            except asyncio.TimeoutError as exc:
                raise AttemptFailed("timeout", None, True, phase="connect") from exc
            except aiohttp.ClientError as exc:
                raise AttemptFailed("connection_error", None, True) from exc
            status = resp.status
            aspan.set_attribute(sc.GATEWAY_UPSTREAM_STATUS, status)
            if status >= 400:
                payload = await _read_quietly(resp)
                retry_after = resp.headers.get("retry-after")
                raise AttemptFailed(f"http.{status}", status, status in RETRYABLE_STATUS, payload,
                                    {"retry-after": retry_after} if retry_after else {})
            if not stream:
                try:
                    payload = await resp.read()
                except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                    raise AttemptFailed("stream_broken", status, True) from exc
                clean = True
                return await self._relay_whole(send, span, aspan, status, payload, received_at, watch)
            if resp.content_type != "text/event-stream":
                raise AttemptFailed("upstream_malformed", status, True)
            outcome = await self._relay_stream(send, span, aspan, resp, received_at, replica.replica_id, watch,
                                               pre_s if attempt == 1 else None, client_usage)
            clean = outcome is None
            return outcome
        except asyncio.CancelledError:
            # the watchdog (a deadline passed) or the client (it left) cut the attempt; else: shutdown
            if not take_cancellation(watch):
                raise
            if watch.reason == "client_disconnect":
                raise ClientGone() from None
            raise AttemptFailed("timeout", resp.status if resp is not None else None, True, phase=watch.phase) from None
        finally:
            # A fully read response goes back to the pool; anything else closes its connection (the
            # replica sees the client leave and stops the request).
            if resp is not None:
                if clean:
                    resp.release()
                else:
                    resp.close()


def _read_headers(raw) -> dict[str, str]:
    """The request headers the gateway reads (``_READ_HEADERS``), names lower-cased, values latin-1;
    a repeated header: its last value."""
    out = {}
    for key, value in raw:
        name = _READ_HEADERS.get(key)
        if name is None:
            if key.islower() or (name := _READ_HEADERS.get(key.lower())) is None:
                continue
        out[name] = value.decode("latin-1")
    return out


def _ask_usage(request: dict, body: bytes) -> tuple[bytes, bool]:
    """The upstream body of a streamed request: ``stream_options`` with ``include_usage`` and
    ``continuous_usage_stats`` (vLLM: usage on every chunk, cumulative), so prompt tokens are known
    from the first chunk. Returns (body, whether the client itself asked for usage)."""
    options = request.get("stream_options")
    if options is None and "stream_options" not in request:
        # The common case: splice the options into the client's own bytes (no re-encoding; the
        # parsed object gains the same last key as the encoding branch below).
        return body.rstrip()[:-1] + _USAGE_OPTIONS, False
    options = dict(options) if isinstance(options, dict) else {}
    client_usage = bool(options.get("include_usage"))
    options.update(include_usage=True, continuous_usage_stats=True)
    return json.dumps({**request, "stream_options": options}).encode(), client_usage


async def _read_quietly(resp: aiohttp.ClientResponse) -> bytes:
    try:
        return await resp.read()
    except (aiohttp.ClientError, asyncio.TimeoutError):
        return b""
