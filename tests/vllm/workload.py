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

from serving.plans import RetryPolicy
from serving.sdk import AsyncInstrumentedOpenAI, CallFailed, InstrumentedOpenAI, task
from serving.workloads.prompts import WORDS

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


def _generated(vllm_url: str) -> float:
    """vLLM's vllm:generation_tokens counter (all series)."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(vllm_url + "/metrics", timeout=10, trust_env=False).text
    return sum(s.value for f in text_string_to_metric_families(text) if f.name == "vllm:generation_tokens"
               for s in f.samples if s.name.endswith("_total"))


async def _abort_case(url, vllm_url, provider, model, messages, tokens_first: int = 8) -> Seen:
    """The client gives up mid-stream: the call's asyncio task is cancelled once vLLM has generated
    ``tokens_first`` tokens for it (the only request in flight; a busy host delays the first token by
    seconds, so a fixed delay would not do) plus 0.3 s for them to reach the client. The SDK records
    ``error.type`` ``cancelled`` and the tokens received; the connection closes, so the gateway and
    vLLM see a disconnect."""
    client = AsyncInstrumentedOpenAI(url + "/v1", tracer_provider=provider)
    async with task("chat", tenant="acme", slo_e2e_ms=60_000, tracer_provider=provider) as t:
        seen = Seen("abort", t.task_id, f"{t.span.get_span_context().trace_id:032x}", True)
        with t.step("answer"):
            before = await asyncio.to_thread(_generated, vllm_url)
            call = asyncio.ensure_future(client.chat(model=model, messages=messages, max_tokens=900,
                                                     extra_body={"ignore_eos": True}))
            for _ in range(600):  # at most ~60 s
                await asyncio.sleep(0.1)
                if await asyncio.to_thread(_generated, vllm_url) - before >= tokens_first:
                    break
            await asyncio.sleep(0.3)
            call.cancel()
            try:
                await call
            except asyncio.CancelledError:
                seen.error_type, seen.attempts = "cancelled", 1
        t.fail("cancelled")
    await client.close()
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
    out.append(asyncio.run(_abort_case(url, stack.vllm.url, provider, model, user(words(20, "abort")))))
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
