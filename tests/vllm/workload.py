"""The workload ``make test-vllm`` drives through the task SDK -> gateway -> real vLLM, and what the
client saw of each call (the ground truth the product's figures are checked against).

Every case is one task of one step; ``Seen`` keeps the client's view of each attempt-level outcome:
the SDK's ``CallResult`` (usage tokens, cached tokens, finish reasons, response id) or the
``CallFailed`` error type and the tokens received before the failure.
"""

from __future__ import annotations

import asyncio
import random
import threading
from dataclasses import dataclass, field

import httpx

from serving.plans import RetryPolicy
from serving.sdk import AsyncInstrumentedOpenAI, CallFailed, InstrumentedOpenAI, task
from serving.workloads.prompts import WORDS

ABORT_MAX_TOKENS = 900  # the aborted call asks for this many (ignore_eos); the client leaves after 8
SHARED_PREFIX_WORDS = 420  # > 3 blocks of 128 tokens (the CPU build's KV block): a prefix-cache hit of 384+


@dataclass
class Seen:
    """One task's call as the client saw it."""

    case: str
    task_id: str
    trace_id: str
    stream: bool
    n: int = 1
    ok: bool = False
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    finish_reasons: list = field(default_factory=list)
    response_id: str | None = None
    attempts: int = 0
    error_type: str | None = None
    partial_tokens: int = 0


def words(n: int, seed: str) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choices(WORDS, k=n))


def _run_case(client, provider, model, case, messages, *, stream=True, policy=None, **kw) -> Seen:
    with task("chat", tenant="acme", slo_e2e_ms=60_000, tracer_provider=provider) as t:
        seen = Seen(case, t.task_id, f"{t.span.get_span_context().trace_id:032x}", stream, kw.get("n", 1))
        with t.step("answer"):
            try:
                r = client.chat(model=model, messages=messages, stream=stream, retry_policy=policy, **kw)
            except CallFailed as exc:
                seen.error_type, seen.attempts, seen.partial_tokens = exc.error_type, exc.attempts, exc.partial_tokens
                t.fail(exc.error_type)
                return seen
        seen.ok = True
        seen.input_tokens, seen.output_tokens, seen.cached_tokens = r.input_tokens, r.output_tokens, r.cached_tokens
        seen.finish_reasons, seen.response_id, seen.attempts = list(r.finish_reasons), r.response_id, r.attempts
        t.succeed()
    return seen


class _StreamWatch(httpx.AsyncBaseTransport):
    """The client's HTTP transport, counting the SSE events as they reach the client's socket:
    ``reached`` is set once ``events`` arrived. A reader task drains the socket into a queue, so the
    count does not wait for the OpenAI client to parse each chunk (on 2 busy cores it fell seconds
    behind the stream), and vLLM's own /metrics answered only after ~5 s while it streamed."""

    def __init__(self, events: int):
        self.inner = httpx.AsyncHTTPTransport()
        self.events, self.seen, self.reached = events, 0, asyncio.Event()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        resp = await self.inner.handle_async_request(request)
        return httpx.Response(resp.status_code, headers=resp.headers, stream=_Drained(resp.stream, self),
                              extensions=resp.extensions)

    async def aclose(self) -> None:
        await self.inner.aclose()


class _Drained(httpx.AsyncByteStream):
    def __init__(self, inner, watch: _StreamWatch):
        self.inner, self.watch = inner, watch
        self.queue: asyncio.Queue = asyncio.Queue()
        self.reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        try:
            async for chunk in self.inner:
                self.watch.seen += chunk.count(b"data: ")
                if self.watch.seen >= self.watch.events:
                    self.watch.reached.set()
                self.queue.put_nowait(chunk)
        except Exception as exc:  # noqa: BLE001 - handed to the consumer
            self.queue.put_nowait(exc)
        self.queue.put_nowait(None)

    async def __aiter__(self):
        while (item := await self.queue.get()) is not None:
            if isinstance(item, Exception):
                raise item
            yield item

    async def aclose(self) -> None:
        self.reader.cancel()
        await self.inner.aclose()


async def _abort_case(url, provider, model, messages, tokens_first: int = 8) -> Seen:
    """The client gives up mid-stream: the call's asyncio task is cancelled as soon as ``tokens_first``
    token events (after the role chunk) reached the client, of the 900 it asked for (a busy host delays
    the first token by seconds, so a fixed delay would not do). The SDK records ``error.type``
    ``cancelled`` and the tokens received; the connection closes, so the gateway and vLLM see a
    disconnect."""
    watch = _StreamWatch(tokens_first + 1)
    client = AsyncInstrumentedOpenAI(url + "/v1", tracer_provider=provider,
                                     http_client=httpx.AsyncClient(transport=watch, timeout=120))
    async with task("chat", tenant="acme", slo_e2e_ms=60_000, tracer_provider=provider) as t:
        seen = Seen("abort", t.task_id, f"{t.span.get_span_context().trace_id:032x}", True)
        with t.step("answer"):
            call = asyncio.ensure_future(client.chat(model=model, messages=messages, max_tokens=ABORT_MAX_TOKENS,
                                                     extra_body={"ignore_eos": True}))
            waiting = asyncio.ensure_future(watch.reached.wait())
            await asyncio.wait({call, waiting}, timeout=120, return_when=asyncio.FIRST_COMPLETED)
            waiting.cancel()
            assert not call.done(), "the call to abort ended before it could be cancelled"
            call.cancel()
            try:
                await call
            except asyncio.CancelledError:
                seen.error_type, seen.attempts = "cancelled", 1
            await client.close()  # the connection closes now: the gateway and vLLM see the client leave
        t.fail("cancelled")
    return seen


def run_workload(stack) -> list[Seen]:
    """Drive every case; returns what the client saw, in order. Takes ~1 min on 2 shared cores."""
    model = stack.model
    provider = stack.client_provider()
    url = stack.gateway()
    client = InstrumentedOpenAI(url + "/v1", tracer_provider=provider, sleep=lambda s: None)
    one_try = RetryPolicy(max_attempts=1, timeout_s=60)
    out: list[Seen] = []

    def user(text):
        return [{"role": "user", "content": text}]

    # Streaming with usage on, a few at once (batches of more than one sequence).
    threads = []
    for i in range(4):
        th = threading.Thread(target=lambda i=i: out.append(
            _run_case(client, provider, model, "stream", user(words(30, f"s{i}")), max_tokens=16)))
        threads.append(th)
        th.start()
    for th in threads:
        th.join()
    for i in range(3):
        out.append(_run_case(client, provider, model, "unary", user(words(25, f"u{i}")), stream=False, max_tokens=12))
    # max_tokens hits: the random-weight model never stops by itself here.
    for i, stream in enumerate((True, False)):
        out.append(_run_case(client, provider, model, "max_tokens", user(words(20, f"m{i}")), stream=stream,
                             max_tokens=20, extra_body={"ignore_eos": True}))
    # n=2: vLLM runs two engine requests (two llm_request spans, one parent): one call.
    for stream in (True, False):
        out.append(_run_case(client, provider, model, "n2", user(words(15, f"n{stream}")), stream=stream, n=2,
                             max_tokens=10, extra_body={"ignore_eos": True}))
    # Shared prefix, one after another so each later call hits the prefix cache.
    system = [{"role": "system", "content": words(SHARED_PREFIX_WORDS, "shared-system-prompt")}]
    for i in range(4):
        out.append(_run_case(client, provider, model, "prefix", system + user(words(12, f"q{i}")), max_tokens=8,
                             stream=i % 2 == 0))
    # Prompt + max_tokens over the 1024-token context: answered 200, output capped.
    out.append(_run_case(client, provider, model, "capped", user(words(990, "capped")), max_tokens=200,
                         extra_body={"ignore_eos": True}, policy=one_try))
    # Prompt alone over the context: HTTP 400, a client error, not retried.
    out.append(_run_case(client, provider, model, "too_long", user(words(1100, "too-long")), max_tokens=8,
                         policy=one_try))
    # Client abort: the client gives up mid-stream (vLLM exports no span for it).
    # The receiver drained first: its store inserts run in this process and, while they hold the
    # interpreter, the client's event loop would see the stream seconds late (vLLM done by then).
    stack.flush()
    out.append(asyncio.run(_abort_case(url, provider, model, user(words(20, "abort")))))
    # A retried call: a gateway whose first upstream is down answers 502; the client's second attempt
    # goes to the next upstream (round robin), real vLLM.
    from serving.vllm.launch import free_port

    dead = f"http://127.0.0.1:{free_port()}"
    url2 = stack.gateway([("replica-down", dead), ("replica-0", stack.vllm.url)], max_attempts=1,
                         scrape_interval_s=60.0)
    client2 = InstrumentedOpenAI(url2 + "/v1", tracer_provider=provider, sleep=lambda s: None)
    out.append(_run_case(client2, provider, model, "retried", user(words(20, "retried")), max_tokens=12,
                         policy=RetryPolicy(max_attempts=3, timeout_s=60, backoff_base_s=0.01)))
    client.close()
    client2.close()
    return out
