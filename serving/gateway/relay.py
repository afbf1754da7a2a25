"""Relaying one upstream response to the client: the SSE stream event by event, or a whole body.

Position: serving (gateway); mixed into :class:`serving.gateway.proxy.Gateway` (uses its
``stats``). Per stream it relays complete events as they arrive (no buffering beyond one event),
counts output tokens without decoding plain token events (:mod:`serving.gateway.sse`), and ends
every stream the client sees with ``[DONE]``:

* upstream broke, went silent past ``chunk_timeout_s``, or sent malformed data (not JSON, not an
  object, an event over ``MAX_EVENT_BYTES``, lines that are no SSE fields) after the first byte
  reached the client: the events before the fault, then an error event naming the ``error.type``
  (``stream_broken``, ``timeout``, ``upstream_malformed``) and ``[DONE]``;
* the same before the first byte reached the client: :class:`AttemptFailed` (retryable: the proxy
  tries another replica);
* the client left: the upstream request is closed at once (the attempt's task is cancelled by
  :mod:`serving.gateway.watchdog`), spans say ``client_disconnect``.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
from aiohttp.streams import EofStream
from opentelemetry.trace import Status, StatusCode

from schema import semconv as sc
from serving.gateway.sse import (carries_output, loads, midstream_error_event, plain_token_event, respond, usage_only_event,
                                 usage_token_event)
from serving.gateway.watchdog import AttemptWatch, take_cancellation
from serving.sdk.usage import StreamUsage

SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]
MAX_EVENT_BYTES = 1 << 20  # one SSE event larger than this is not an LLM chunk: malformed
_SSE_FIELDS = (b"data:", b"event:", b"id:", b"retry:", b":")
_DECODE_ERRORS = (ValueError, TypeError, AttributeError, KeyError)
_OK = Status(StatusCode.OK)
_ERROR_KIND = {"timeout": ("GatewayTimeoutError", 504), "upstream_malformed": ("BadGatewayError", 502),
               "stream_broken": ("InternalServerError", 500)}


class AttemptFailed(Exception):
    """An upstream attempt failed before any byte reached the client (``retryable``: try another replica)."""

    def __init__(self, error_type: str, status: int | None, retryable: bool, body: bytes = b"", headers=None,
                 phase: str = ""):
        super().__init__(error_type)
        self.error_type, self.status, self.retryable, self.body = error_type, status, retryable, body
        self.headers = headers or {}
        self.phase = phase  # which timeout, for error.type timeout

    @property
    def replica_fault(self) -> bool:
        """True when the failure counts against the replica (outlier detection): no answer, a 5xx,
        malformed or broken data — not a 4xx, which is the request's fault."""
        return self.status is None or self.status >= 500 or self.error_type in ("upstream_malformed", "stream_broken",
                                                                                 "timeout")


class ClientGone(Exception):
    """The client disconnected before the first byte of an answer was sent to it."""


def error_event(error_type: str, message: str) -> bytes:
    """The mid-stream error event (vLLM's shape) for ``error_type``, followed by ``[DONE]``."""
    kind, code = _ERROR_KIND.get(error_type, ("InternalServerError", 500))
    return midstream_error_event(f"{message} (error.type {error_type})", kind, code)


def _malformed_event(event: bytes) -> bool:
    """True when a non-``data:`` event holds a line that is no SSE field (SSE spec, "Interpreting an event stream")."""
    return any(line and not line.startswith(_SSE_FIELDS) for line in event.split(b"\n"))


class RelayMixin:
    """The relay half of the gateway (see module doc)."""

    async def _relay_whole(self, send, span, aspan, status, payload, received_at, watch: AttemptWatch) -> None:
        usage = StreamUsage()
        try:
            doc = loads(payload)
            if not isinstance(doc, dict):
                raise TypeError(f"a JSON {type(doc).__name__}, not an object")
            usage.feed({"id": doc.get("id"), "model": doc.get("model"), "usage": doc.get("usage"),
                        "choices": [{"index": c.get("index", 0), "finish_reason": c.get("finish_reason")}
                                    for c in doc.get("choices") or ()]})
        except _DECODE_ERRORS as exc:
            raise AttemptFailed("upstream_malformed", status, True) from exc
        ttft = time.monotonic() - received_at
        watch.active = False  # decided: a disconnect from here on changes nothing
        await respond(send, status, payload)
        self._finish_ok(span, aspan, usage, status, ttft)

    async def _relay_stream(self, send, span, aspan, resp, received_at, replica_id, watch: AttemptWatch,
                            pre_s: float | None = None, client_usage: bool = True) -> str | None:
        """Relay an SSE stream; ``client_usage`` False: the client did not ask for usage, so the
        usage-only last chunk the gateway asked for on its behalf is not relayed."""
        usage = StreamUsage()
        skipped = None  # the newest token event the hot path did not decode (its usage is cumulative)
        content = resp.content
        buf = b""
        committed = False
        saw_done = ended = False
        ttft = None
        try:
            while True:
                try:
                    chunk = await content.readany()  # what iter_any() yields, without its iterator frame
                    if not chunk:  # b"": the end of the body
                        break
                    got_at = watch.last = time.monotonic()
                    watch.got_first = True
                except EofStream:  # iter_any() ends on it too
                    break
                except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                    if not committed:
                        raise AttemptFailed("stream_broken", resp.status, True) from exc
                    _catch_up(usage, skipped)
                    return await self._break(send, span, aspan, usage, ttft, "stream_broken", watch,
                                             f"upstream replica {replica_id} failed mid-stream: {type(exc).__name__}")
                buf += chunk
                cut = buf.rfind(b"\n\n")
                if cut < 0:
                    if len(buf) > MAX_EVENT_BYTES:
                        return await self._malformed(send, span, aspan, usage, ttft, watch, committed, resp, b"",
                                                     replica_id, f"no event boundary in {len(buf)} bytes")
                    continue
                out, buf = buf[:cut + 2], buf[cut + 2:]
                events = out.split(b"\n\n")
                for index, event in enumerate(events):
                    if event.startswith(b"data: "):
                        data = event[6:]
                        if data.startswith(b"[DONE]"):
                            saw_done = True
                        elif usage.chunks and data[:1] == b"{" and data[-1:] == b"}" and (
                                (usage.usage_prompt_tokens is not None and usage_token_event(data))
                                or plain_token_event(data)):
                            # Hot path: a token chunk with nothing else to read (no finish, error,
                            # and no usage we still need): count it without decoding JSON (an
                            # object's braces are checked: garbage takes the decoding path). The
                            # usage test first: with continuous usage every chunk has usage, so
                            # plain_token_event would only scan it in vain (the same decision).
                            usage.chunks += 1
                            if carries_output(data):
                                usage.content_chunks += 1
                            skipped = data
                        else:
                            skipped = None
                            if not client_usage and usage_only_event(data):
                                out = out.replace(event + b"\n\n", b"", 1)  # usage the client did not ask for
                            try:
                                doc = loads(data)
                                if not isinstance(doc, dict):
                                    raise TypeError(f"a JSON {type(doc).__name__}, not an object")
                                usage.feed(doc)
                            except _DECODE_ERRORS as exc:
                                good = b"\n\n".join(events[:index]) + b"\n\n" if index else b""
                                return await self._malformed(send, span, aspan, usage, ttft, watch, committed, resp,
                                                             good, replica_id, f"event {usage.chunks + 1}: {exc}")
                    elif event and _malformed_event(event):
                        good = b"\n\n".join(events[:index]) + b"\n\n" if index else b""
                        return await self._malformed(send, span, aspan, usage, ttft, watch, committed, resp, good,
                                                     replica_id, "a line that is no SSE field")
                if ttft is None and usage.content_chunks:
                    # TTFT = the first chunk carrying a token (a role-only first chunk is not one).
                    ttft = time.monotonic() - received_at
                if not committed:
                    await send({"type": "http.response.start", "status": resp.status, "headers": SSE_HEADERS})
                    committed = True
                # [DONE] read and the upstream body complete: nothing can follow, so the last events
                # and the end of the response go out in one write.
                ended = saw_done and not buf and content.is_eof()
                if ended:
                    watch.active = False
                await send({"type": "http.response.body", "body": out, "more_body": not ended})
                if saw_done:
                    # The client has [DONE]; the upstream body's end (vLLM's zero-length chunk) may
                    # come in a later read, after the client already closed its connection.
                    watch.answered = True
                if pre_s is not None:
                    # Added latency of the proxy: before the upstream send + first event's relay time.
                    self.stats.overhead.observe(pre_s + time.monotonic() - got_at)
                    pre_s = None
                if ended:
                    break
                watch.last = time.monotonic()  # a slow client is not a silent replica
            if not committed:
                raise AttemptFailed("stream_broken", resp.status, True)
            if not saw_done:
                _catch_up(usage, skipped)
                return await self._break(send, span, aspan, usage, ttft, "stream_broken", watch,
                                         f"upstream replica {replica_id} closed the stream early")
            if not ended:
                watch.active = False
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            return self._finish_answered(span, aspan, usage, resp.status, ttft)
        except asyncio.CancelledError:
            if not take_cancellation(watch):
                raise
            _catch_up(usage, skipped)
            if watch.answered:
                # Cut (an upstream silent after its [DONE]) once the client had the whole answer: the
                # call ended as its events said; only the upstream connection is dropped, not reused.
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                return self._finish_answered(span, aspan, usage, resp.status, ttft)
            if watch.reason == "client_disconnect":
                self._finish_error(span, aspan, usage, ttft, "client_disconnect")
                return "client_disconnect"
            aspan.set_attribute(sc.GATEWAY_TIMEOUT_PHASE, watch.phase)
            limit = watch.chunk_s if watch.got_first else watch.first_byte_s
            if not committed:
                raise AttemptFailed("timeout", resp.status, True, phase=watch.phase) from None
            return await self._break(send, span, aspan, usage, ttft, "timeout", watch,
                                     f"upstream replica {replica_id} sent nothing for {limit:g} s")

    async def _malformed(self, send, span, aspan, usage, ttft, watch, committed, resp, good: bytes, replica_id,
                         detail: str) -> str:
        """Malformed upstream data: before any byte reached the client, a retryable failure; after,
        the good events, an error event and [DONE]."""
        if not committed:
            if not good:
                raise AttemptFailed("upstream_malformed", resp.status, True)
            await send({"type": "http.response.start", "status": resp.status, "headers": SSE_HEADERS})
        if good:
            await send({"type": "http.response.body", "body": good, "more_body": True})
        return await self._break(send, span, aspan, usage, ttft, "upstream_malformed", watch,
                                 f"upstream replica {replica_id} sent malformed data ({detail})")

    async def _break(self, send, span, aspan, usage, ttft, error_type, watch, message) -> str:
        watch.active = False
        try:
            await send({"type": "http.response.body", "body": error_event(error_type, message), "more_body": False})
        except OSError:  # the client went away meanwhile: the spans still say what happened
            pass
        self._finish_error(span, aspan, usage, ttft, error_type)
        return error_type

    def _record_tokens(self, usage: StreamUsage, ttft: float | None) -> tuple[dict, dict]:
        """(request span attributes, attempt span attributes) of the tokens streamed; set in one call
        per span by the caller (one lock and one pass each, not one per attribute)."""
        tokens = usage.tokens_received
        self.stats.tokens_streamed += tokens
        common = {sc.GATEWAY_TOKENS_STREAMED: tokens}
        if ttft is not None:
            common[sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] = ttft
            self.stats.ttft.observe(ttft)
        attempt = dict(common)
        if usage.usage_prompt_tokens is not None:
            attempt[sc.GEN_AI_USAGE_INPUT_TOKENS] = int(usage.usage_prompt_tokens)
        if usage.usage_cached_tokens is not None:
            attempt[sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] = int(usage.usage_cached_tokens)
        if usage.finish_reasons:
            attempt[sc.GEN_AI_RESPONSE_FINISH_REASONS] = usage.finish_reasons
        if usage.response_id:
            attempt[sc.GEN_AI_RESPONSE_ID] = usage.response_id
        return common, attempt

    def _finish_ok(self, span, aspan, usage, status, ttft) -> None:
        common, attempt = self._record_tokens(usage, ttft)
        if usage.usage_completion_tokens is not None:
            attempt[sc.GEN_AI_USAGE_OUTPUT_TOKENS] = int(usage.usage_completion_tokens)
        common[sc.GATEWAY_UPSTREAM_STATUS] = status
        span.set_attributes(common)
        aspan.set_attributes(attempt)
        aspan.set_status(_OK)
        aspan.end()

    def _finish_answered(self, span, aspan, usage, status, ttft) -> str | None:
        """End an attempt whose ``[DONE]`` reached the client, as its events said: ``stream_error`` after
        vLLM's error event, else ok (None)."""
        if usage.error is not None:
            self._finish_error(span, aspan, usage, ttft, "stream_error")
            return "stream_error"
        self._finish_ok(span, aspan, usage, status, ttft)
        return None

    def _finish_error(self, span, aspan, usage, ttft, error_type) -> None:
        common, attempt = self._record_tokens(usage, ttft)
        common[sc.GATEWAY_UPSTREAM_STATUS] = 200
        span.set_attributes(common)
        aspan.set_attributes(attempt)
        end_error(aspan, error_type, None)


def end_error(aspan, error_type: str, status: int | None) -> None:
    """End an attempt span as failed with ``error.type`` (and the upstream status, if any)."""
    aspan.set_attribute(sc.ERROR_TYPE, error_type)
    if status is not None:
        aspan.set_attribute(sc.GATEWAY_UPSTREAM_STATUS, status)
    aspan.set_status(Status(StatusCode.ERROR, error_type))
    aspan.end()


def _catch_up(usage: StreamUsage, skipped: bytes | None) -> None:
    """Read the cumulative usage (continuous_usage_stats) of the newest event the hot path skipped,
    so an attempt cut short records the tokens vLLM counted, not only the chunks that carried text
    (one chunk can carry several tokens)."""
    if skipped is None:
        return
    try:
        doc = loads(skipped)
        counted = (doc.get("usage") or {}).get("completion_tokens") if isinstance(doc, dict) else None
    except (ValueError, AttributeError):
        return
    if isinstance(counted, int) and counted > (usage.usage_completion_tokens or 0):
        usage.usage_completion_tokens = counted
