"""The instrumentations teams already run, driving emulated vLLM replicas (tests import these).

No infercost code in the client: the ``openai`` client, instrumented by

* the official OpenTelemetry GenAI instrumentation (``opentelemetry-instrumentation-openai-v2``, plus
  ``opentelemetry-instrumentation-httpx``), under the application's own ``invoke_agent {name}`` span;
* OpenLLMetry (``opentelemetry-instrumentation-openai``), under a Traceloop workflow span;

exporting over OTLP/HTTP to the receiver of a :class:`tests.producers.Rig`. Today's ``openai`` client
(3.x, on ``httpx2``) sends no ``traceparent``, so vLLM's ``llm_request`` spans are roots of their own
traces: only ``gen_ai.response.id`` ties a client call to the engine request it caused.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import openai
from opentelemetry.trace import Status, StatusCode

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


@dataclass
class ClientCall:
    """What the client saw of one chat completion (the truth the store is checked against)."""

    response_id: str
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int


@dataclass
class Run:
    """One task: its trace id (hex) and root span id, outcome, and the calls it made."""

    trace_id: str
    root_span_id: str
    ok: bool
    calls: list[ClientCall] = field(default_factory=list)


@contextlib.contextmanager
def instrumented(kind: str, provider):
    """The ``openai`` client instrumented by ``kind`` ("openai-v2" | "openllmetry") for the block."""
    if kind == "openai-v2":
        from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

        instrumentors = [OpenAIInstrumentor(), HTTPXClientInstrumentor()]
    elif kind == "openllmetry":
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor

        instrumentors = [OpenAIInstrumentor()]
    else:
        raise ValueError(f"unknown instrumentation {kind!r}")
    for inst in instrumentors:
        inst.instrument(tracer_provider=provider)
    try:
        yield
    finally:
        for inst in instrumentors:
            inst.uninstrument()


def _root_attributes(kind: str, name: str) -> tuple[str, dict]:
    if kind == "openai-v2":  # OpenTelemetry GenAI agent span
        return f"invoke_agent {name}", {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name,
                                         "gen_ai.provider.name": "openai"}
    return f"{name}.workflow", {"traceloop.span.kind": "workflow", "traceloop.workflow.name": name,
                                "traceloop.entity.name": name}


def agent_runs(kind: str, provider, base_url: str, outcomes: list[bool], calls_per_run: int = 3,
               name: str = "research_assistant", stream: bool = True, max_tokens: int = 8) -> list[Run]:
    """One root span per entry of ``outcomes`` with ``calls_per_run`` chat completions under it; a
    False outcome ends the run with status Error and ``error.type`` after its calls (the agent
    could not use the answers), as an agent framework records a failed run."""
    tracer = provider.get_tracer("agent-app")
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="none", max_retries=2)
    runs = []
    with instrumented(kind, provider):
        for i, ok in enumerate(outcomes):
            span_name, attributes = _root_attributes(kind, name)
            with tracer.start_as_current_span(span_name, attributes=attributes | {"gen_ai.conversation.id": f"c{i}"},
                                              record_exception=False, set_status_on_exception=False) as root:
                ctx = root.get_span_context()
                run = Run(format(ctx.trace_id, "032x"), format(ctx.span_id, "016x"), ok)
                for step in range(calls_per_run):
                    run.calls.append(_chat(client, f"run {i} step {step}: summarise the findings", stream, max_tokens))
                if not ok:
                    root.set_attribute("error.type", "AgentError")
                    root.set_status(Status(StatusCode.ERROR, "the agent gave up"))
            runs.append(run)
    return runs


def _chat(client, prompt: str, stream: bool, max_tokens: int) -> ClientCall:
    messages = [{"role": "user", "content": prompt}]
    if not stream:
        r = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=max_tokens)
        return _call(r.id, r.usage)
    chunks = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=max_tokens, stream=True,
                                            stream_options={"include_usage": True})
    response_id, usage = "", None
    for chunk in chunks:
        response_id = chunk.id or response_id
        usage = chunk.usage or usage
    return _call(response_id, usage)


def _call(response_id: str, usage) -> ClientCall:
    details = getattr(usage, "prompt_tokens_details", None)
    cached = (getattr(details, "cached_tokens", None) or 0) if details is not None else 0
    return ClientCall(response_id, usage.prompt_tokens, cached, usage.completion_tokens)


def run_in_subprocess(kind: str, otlp_endpoint: str, base_url: str, outcomes: list[bool], **kwargs) -> list[Run]:
    """:func:`agent_runs` in a process of its own: the instrumentations patch the ``openai`` and
    ``httpx`` modules process-wide and do not all restore them, so they must not touch the test's
    process (the task SDK's traceparent would then come from their spans)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    args = json.dumps({"kind": kind, "otlp": otlp_endpoint, "base_url": base_url, "outcomes": outcomes,
                       "kwargs": kwargs})
    out = subprocess.run([sys.executable, "-m", "tests.genai_producers", args], cwd=Path(__file__).resolve().parents[1],
                         capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"producer {kind} failed: {out.stderr[-3000:]}")
    return [Run(r["trace_id"], r["root_span_id"], r["ok"], [ClientCall(**c) for c in r["calls"]])
            for r in json.loads(out.stdout.strip().splitlines()[-1])]


if __name__ == "__main__":
    import dataclasses
    import json
    import sys

    from serving.sdk import make_tracer_provider

    spec = json.loads(sys.argv[1])
    provider = make_tracer_provider("agent-app", otlp_endpoint=spec["otlp"], schedule_delay_ms=50)
    done = agent_runs(spec["kind"], provider, spec["base_url"], spec["outcomes"], **spec["kwargs"])
    provider.shutdown()  # exports every span before the process ends
    print(json.dumps([dataclasses.asdict(r) for r in done]))
