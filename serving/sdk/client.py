"""An instrumented OpenAI client: one CLIENT span per attempt, task context on the wire, retries.

Position: serving (task SDK). Built on the official ``openai`` package (its own retries are turned
off: hidden retries would be hidden cost). For each attempt of a call it

* opens ``chat {model}`` (kind CLIENT, docs/telemetry.md) with the GenAI semantic-convention
  attributes, the task context from baggage, ``task.step`` and ``task.attempt``;
* injects W3C ``traceparent`` (this span) and ``baggage`` (task.id, task.type, task.step,
  task.attempt, tenant.id, tenant.priority) into the request headers;
* streams with ``stream_options.include_usage`` and accounts tokens with
  :class:`serving.sdk.usage.StreamUsage` (usage read even from a chunk that still has choices;
  cumulative usage replaced, never summed; tokens counted up to a break -> ``partial``);
* retries under :class:`serving.plans.RetryPolicy`: 429 / 5xx / timeouts / connection errors /
  broken streams, exponential backoff with full jitter, ``Retry-After`` honoured as a floor.

Prompts and completions are recorded on spans only with ``record_content=True``.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import urlparse

import openai
from opentelemetry import baggage as otel_baggage
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from schema import semconv as sc
from serving.plans import RetryPolicy
from serving.sdk.context import inject_headers, task_attributes, with_task_baggage
from serving.sdk.retry import backoff_s, is_retryable_status, parse_retry_after
from serving.sdk.task import INSTRUMENTATION_NAME, current_task
from serving.sdk.usage import StreamUsage

PROVIDER = "vllm"


@dataclass
class CallResult:
    """A call that succeeded. Tokens are tokens; ttft_s seconds (request sent -> first chunk)."""

    text: str
    finish_reasons: list[str]
    input_tokens: int | None
    output_tokens: int
    cached_tokens: int | None
    attempts: int
    response_id: str | None = None
    ttft_s: float | None = None


class StreamBroken(Exception):
    """A stream that ended (error chunk, EOF) without any choice finishing."""


class CallFailed(Exception):
    """Every attempt of a call failed (or the first failure was not retryable).

    error_type: the last attempt's ``error.type`` (``http.503``, ``timeout``, ``stream_broken``, ...).
    attempts: attempts made. partial_tokens: output tokens received by all failed attempts together.
    """

    def __init__(self, error_type: str, attempts: int, last_error: BaseException | None, partial_tokens: int = 0):
        super().__init__(f"call failed after {attempts} attempt(s): {error_type}: {last_error}")
        self.error_type = error_type
        self.attempts = attempts
        self.last_error = last_error
        self.partial_tokens = partial_tokens


@dataclass
class _Outcome:
    error_type: str | None = None
    retryable: bool = False
    retry_after_s: float | None = None
    tokens: int = 0


@dataclass
class _Attempt:
    """Span and accounting of one attempt (shared by the sync and async clients)."""

    tracer: trace.Tracer
    model: str
    stream: bool
    attempt: int
    step: str | None
    call: int | None
    server: tuple[str, int | None]
    request_attrs: dict[str, Any]
    record_content: bool
    messages: Any
    usage: StreamUsage = field(default_factory=lambda: StreamUsage(keep_text=True))
    span: Any = None
    started: float = 0.0
    first_chunk_s: float | None = None
    token: Any = None

    def begin(self) -> dict[str, str]:
        """Open the span; return the headers to send (traceparent of this span + baggage)."""
        parent = otel_context.get_current()
        extra = {sc.TASK_ATTEMPT: self.attempt}
        if self.step:
            extra[sc.TASK_STEP] = self.step
        if self.call is not None:
            extra[sc.TASK_CALL] = self.call
        ctx = with_task_baggage(extra, parent)
        attrs: dict[str, Any] = {
            sc.GEN_AI_OPERATION_NAME: "chat", sc.GEN_AI_PROVIDER_NAME: PROVIDER,
            sc.GEN_AI_REQUEST_MODEL: self.model, sc.GEN_AI_REQUEST_STREAM: self.stream,
            sc.SERVER_ADDRESS: self.server[0],
        }
        if self.server[1] is not None:
            attrs[sc.SERVER_PORT] = self.server[1]
        attrs.update(task_attributes(ctx))
        attrs[sc.TASK_ATTEMPT] = self.attempt
        if self.call is not None:
            attrs[sc.TASK_CALL] = self.call
        attrs.update(self.request_attrs)
        if self.record_content:
            attrs[sc.GEN_AI_INPUT_MESSAGES] = json.dumps(self.messages, default=str)
        self.span = self.tracer.start_span(f"chat {self.model}", kind=SpanKind.CLIENT, attributes=attrs, context=ctx)
        ctx = trace.set_span_in_context(self.span, ctx)
        self.started = time.monotonic()
        return dict(inject_headers({}, ctx))

    def on_chunk(self, chunk: Any) -> None:
        self.usage.feed(chunk)
        # Time to the first chunk that carries output (a token), not to a role-only first chunk:
        # that is the TTFT the user feels (and what vLLM's first chunk means).
        if self.first_chunk_s is None and self.usage.content_chunks:
            self.first_chunk_s = time.monotonic() - self.started

    def on_response(self, response: Any) -> None:
        """A non-streaming ChatCompletion."""
        self.first_chunk_s = time.monotonic() - self.started
        u = self.usage
        u.response_id, u.model = response.id, response.model
        for choice in response.choices or ():
            if choice.message is not None and choice.message.content:
                u.text_parts.append(choice.message.content)
            if choice.finish_reason:
                u.finish_by_index[choice.index] = choice.finish_reason
        if response.usage is not None:
            u.usage_prompt_tokens = response.usage.prompt_tokens
            u.usage_completion_tokens = response.usage.completion_tokens
            details = getattr(response.usage, "prompt_tokens_details", None)
            if details is not None and getattr(details, "cached_tokens", None) is not None:
                u.usage_cached_tokens = details.cached_tokens
        u.content_chunks = u.usage_completion_tokens or (1 if u.text_parts else 0)

    def _common_end(self) -> None:
        u, span = self.usage, self.span
        span.set_attribute(sc.CLIENT_TOKENS_RECEIVED, u.tokens_received)
        if self.first_chunk_s is not None:
            span.set_attribute(sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK, self.first_chunk_s)
        if u.response_id:
            span.set_attribute(sc.GEN_AI_RESPONSE_ID, u.response_id)
        if u.model:
            span.set_attribute(sc.GEN_AI_RESPONSE_MODEL, u.model)
        if u.finish_reasons:
            span.set_attribute(sc.GEN_AI_RESPONSE_FINISH_REASONS, u.finish_reasons)
        if u.usage_prompt_tokens is not None:
            span.set_attribute(sc.GEN_AI_USAGE_INPUT_TOKENS, int(u.usage_prompt_tokens))
        if u.usage_cached_tokens is not None:
            span.set_attribute(sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, int(u.usage_cached_tokens))

    def end_ok(self) -> CallResult:
        u, span = self.usage, self.span
        self._common_end()
        span.set_attribute(sc.GEN_AI_USAGE_OUTPUT_TOKENS, u.tokens_received)
        span.set_attribute(sc.CLIENT_PARTIAL, False)
        if self.record_content:
            span.set_attribute(sc.GEN_AI_OUTPUT_MESSAGES, json.dumps([{"role": "assistant", "content": u.text}]))
        span.set_status(Status(StatusCode.OK))
        span.end()
        return CallResult(text=u.text, finish_reasons=u.finish_reasons, input_tokens=u.usage_prompt_tokens,
                          output_tokens=u.tokens_received, cached_tokens=u.usage_cached_tokens,
                          attempts=self.attempt, response_id=u.response_id, ttft_s=self.first_chunk_s)

    def end_error(self, exc: BaseException, policy: RetryPolicy) -> _Outcome:
        outcome = classify(exc, policy, streamed=self.usage.chunks > 0)
        outcome.tokens = self.usage.tokens_received
        span = self.span
        self._common_end()
        span.set_attribute(sc.CLIENT_PARTIAL, outcome.tokens > 0)
        span.set_attribute(sc.ERROR_TYPE, outcome.error_type)
        span.set_status(Status(StatusCode.ERROR, str(exc)[:200]))
        span.end()
        return outcome


def classify(exc: BaseException, policy: RetryPolicy, streamed: bool) -> _Outcome:
    """``error.type`` and retryability of an attempt's exception.

    ``http.<status>`` (retryable per ``policy.retry_on_status``, ``Retry-After`` parsed), ``timeout``,
    ``stream_broken`` (an error chunk or a dropped connection after the stream started),
    ``connection_error``; anything else is ``type(exc).__name__`` and not retried.
    """
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        retry_after = parse_retry_after(exc.response.headers.get("retry-after")) if exc.response is not None else None
        return _Outcome(f"http.{status}", is_retryable_status(policy, status), retry_after)
    if isinstance(exc, StreamBroken):
        return _Outcome("stream_broken", True)
    if isinstance(exc, asyncio.CancelledError):  # the task was abandoned / cancelled mid-attempt
        return _Outcome("cancelled", False)
    if isinstance(exc, (openai.APITimeoutError, asyncio.TimeoutError, TimeoutError)):
        return _Outcome("timeout", True)
    if isinstance(exc, (openai.APIConnectionError, openai.APIError)):
        return _Outcome("stream_broken" if streamed or not isinstance(exc, openai.APIConnectionError) else "connection_error", True)
    return _Outcome(type(exc).__name__, False)


class _Base:
    """What the synchronous and the asyncio client share; each names its OpenAI client class and how it
    waits between attempts (``sleep=None``: that default)."""

    _openai_class: type
    _default_sleep: Callable

    def __init__(self, base_url: str, api_key: str = "EMPTY", *, tracer_provider: trace.TracerProvider | None = None,
                 retry_policy: RetryPolicy | None = None, record_content: bool = False,
                 rng: random.Random | None = None, sleep: Callable | None = None, **openai_kwargs):
        self.tracer = trace.get_tracer(INSTRUMENTATION_NAME, tracer_provider=tracer_provider)
        self.policy = retry_policy or RetryPolicy()
        self.record_content = record_content
        self.rng = rng or random.Random()
        parsed = urlparse(base_url)
        self.server = (parsed.hostname or "", parsed.port)
        self.openai = self._openai_class(base_url=base_url, api_key=api_key, max_retries=0, **openai_kwargs)
        self._sleep = sleep if sleep is not None else self._default_sleep

    def _attempt(self, model, stream, attempt, step, call, messages, kwargs) -> _Attempt:
        request_attrs = {}
        for key, attr in (("max_tokens", sc.GEN_AI_REQUEST_MAX_TOKENS), ("temperature", sc.GEN_AI_REQUEST_TEMPERATURE),
                          ("top_p", sc.GEN_AI_REQUEST_TOP_P)):
            if kwargs.get(key) is not None:
                request_attrs[attr] = kwargs[key]
        return _Attempt(self.tracer, model, stream, attempt, step, call, self.server, request_attrs, self.record_content,
                        messages)

    @staticmethod
    def _call_index(step: str | None) -> int | None:
        """``task.call`` of a new call: its index within its step in the open task (None outside a task
        of this process, e.g. when the task context only arrived as baggage)."""
        owner = current_task()
        if owner is None:
            return None
        return owner.next_call(step or otel_baggage.get_baggage(sc.TASK_STEP))

    @staticmethod
    def _request_kwargs(stream: bool, kwargs: dict, headers: dict, policy: RetryPolicy) -> dict:
        req = dict(kwargs)
        req["stream"] = stream
        if stream:
            req.setdefault("stream_options", {"include_usage": True})
        extra = dict(req.pop("extra_headers", None) or {})
        extra.update(headers)
        req["extra_headers"] = extra
        req.setdefault("timeout", policy.timeout_s)
        return req


class InstrumentedOpenAI(_Base):
    """Synchronous instrumented client. ``chat(...)`` returns :class:`CallResult` or raises :class:`CallFailed`.

    base_url: the gateway or a replica, e.g. ``http://127.0.0.1:8000/v1``. tracer_provider: where
    spans go (default global). retry_policy: default ``RetryPolicy()``. record_content: put prompts
    and completions on spans (off by default). rng: for reproducible jitter. ``self.openai`` is
    the underlying ``openai.OpenAI`` (its own retries disabled).
    """

    _openai_class = openai.OpenAI
    _default_sleep = staticmethod(time.sleep)

    def close(self) -> None:
        self.openai.close()

    def chat(self, *, model: str, messages: list[dict], stream: bool = True, step: str | None = None,
             retry_policy: RetryPolicy | None = None, **kwargs) -> CallResult:
        """One chat completion with retries. ``step`` overrides ``task.step`` from the open Step.

        kwargs go to ``chat.completions.create`` (max_tokens, temperature, ...). Raises CallFailed.
        """
        policy = retry_policy or self.policy
        partial = 0
        call = self._call_index(step)
        for attempt in range(1, policy.max_attempts + 1):
            rec = self._attempt(model, stream, attempt, step, call, messages, kwargs)
            headers = rec.begin()
            try:
                req = self._request_kwargs(stream, kwargs, headers, policy)
                if stream:
                    deadline = rec.started + policy.timeout_s
                    with self.openai.chat.completions.create(model=model, messages=messages, **req) as chunks:
                        for chunk in chunks:
                            rec.on_chunk(chunk)
                            if time.monotonic() > deadline:
                                raise TimeoutError(f"attempt exceeded {policy.timeout_s}s")
                    if rec.usage.error is not None or not rec.usage.finished:
                        raise StreamBroken("stream ended without a finish reason")
                else:
                    rec.on_response(self.openai.chat.completions.create(model=model, messages=messages, **req))
                return rec.end_ok()
            except Exception as exc:  # noqa: BLE001 - every failure is recorded on the span, then judged
                outcome = rec.end_error(exc, policy)
                partial += outcome.tokens
                if not outcome.retryable or attempt == policy.max_attempts:
                    raise CallFailed(outcome.error_type, attempt, exc, partial) from exc
                self._sleep(backoff_s(policy, attempt, self.rng, outcome.retry_after_s))
        raise AssertionError("unreachable")


class AsyncInstrumentedOpenAI(_Base):
    """The asyncio twin of :class:`InstrumentedOpenAI` (``await client.chat(...)``); ``self.openai`` is ``openai.AsyncOpenAI``."""

    _openai_class = openai.AsyncOpenAI
    _default_sleep = staticmethod(asyncio.sleep)

    async def close(self) -> None:
        await self.openai.close()

    async def _once(self, rec: _Attempt, model, messages, stream, req) -> None:
        if stream:
            chunks = await self.openai.chat.completions.create(model=model, messages=messages, **req)
            async with chunks:
                async for chunk in chunks:
                    rec.on_chunk(chunk)
            if rec.usage.error is not None or not rec.usage.finished:
                raise StreamBroken("stream ended without a finish reason")
        else:
            rec.on_response(await self.openai.chat.completions.create(model=model, messages=messages, **req))

    async def chat(self, *, model: str, messages: list[dict], stream: bool = True, step: str | None = None,
                   retry_policy: RetryPolicy | None = None, first_attempt: int = 1, **kwargs) -> CallResult:
        """As :meth:`InstrumentedOpenAI.chat`; the attempt timeout bounds the whole attempt.
        ``first_attempt``: the ``task.attempt`` of the first try (> 1 when the caller re-asks after
        rejecting an earlier answer); the policy's attempts are counted from it."""
        policy = retry_policy or self.policy
        partial = 0
        call = self._call_index(step)
        for attempt in range(first_attempt, first_attempt + policy.max_attempts):
            rec = self._attempt(model, stream, attempt, step, call, messages, kwargs)
            headers = rec.begin()
            try:
                req = self._request_kwargs(stream, kwargs, headers, policy)
                await asyncio.wait_for(self._once(rec, model, messages, stream, req), policy.timeout_s)
                return rec.end_ok()
            except asyncio.CancelledError as exc:
                rec.end_error(exc, policy)
                raise
            except Exception as exc:  # noqa: BLE001
                outcome = rec.end_error(exc, policy)
                partial += outcome.tokens
                if not outcome.retryable or attempt == first_attempt + policy.max_attempts - 1:
                    raise CallFailed(outcome.error_type, attempt, exc, partial) from exc
                await self._sleep(backoff_s(policy, attempt, self.rng, outcome.retry_after_s))
        raise AssertionError("unreachable")
