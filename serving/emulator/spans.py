"""vLLM's ``llm_request`` span, as data: which attributes a finished request carries.

Mirrors vLLM 0.32 as captured from a real server (shared/reference/vllm-0.32-cpu-captured/):
latency attributes are float seconds between the request's engine timestamps; **no**
``gen_ai.response.finish_reasons``, no model name, no ``gen_ai.operation.name``; the request
parameters ``max_tokens`` (the derived default ``max_model_len - prompt`` when the client set none,
the capped value when prompt + max_tokens exceeds the context), ``top_p`` and ``n`` always (``n`` is
1 on each of the n child requests of an ``n`` > 1 call), ``temperature`` except when it is 0.
A request the client aborted gets no span at all (vLLM exports none), so callers never build one.
"""

from __future__ import annotations

from schema import semconv as sc

RESOURCE_SERVICE_NAME = "vllm"
SCOPE_NAME = "vllm.tracing.otel"  # instrumentation scope of vLLM 0.32's llm_request spans
INSTRUMENTING_MODULE = "vllm.llm_engine"  # resource vllm.instrumenting_module_name of those spans
DEFAULT_TEMPERATURE = 1.0  # vLLM's sampling default when neither the client nor generation_config sets one
DEFAULT_TOP_P = 1.0


def engine_span_attributes(req, request_id: str, max_model_len: int | None = None) -> dict:
    """Attributes of the ``llm_request`` span of a finished engine request (``engine.EngineRequest``).

    Times: ``req.arrival``, ``queued``, ``scheduled``, ``first_token`` (TTFT ends at ``first_seen``
    when set), ``last_token``, ``finished`` in one clock (seconds). ``max_model_len`` (tokens)
    derives ``max_tokens`` when neither the client nor the driver set it. Output: ``{attribute: str | int | float}``.
    """
    a = {
        sc.GEN_AI_REQUEST_ID: request_id,
        sc.GEN_AI_USAGE_PROMPT_TOKENS: req.prompt_tokens,
        sc.GEN_AI_USAGE_COMPLETION_TOKENS: req.out,
        sc.GEN_AI_LATENCY_E2E: req.finished - req.arrival,
    }
    if req.scheduled is not None:
        a[sc.GEN_AI_LATENCY_QUEUE] = req.scheduled - req.queued
    if req.first_token is not None:
        # vLLM: arrival -> the API server's pickup of the first token (its first_token_latency)
        seen = req.first_token if req.first_seen is None else req.first_seen
        a[sc.GEN_AI_LATENCY_TTFT] = seen - req.arrival
        if req.scheduled is not None:
            a[sc.GEN_AI_LATENCY_PREFILL] = req.first_token - req.scheduled
        last = req.last_token if req.finish_reason != "abort" else req.finished
        a[sc.GEN_AI_LATENCY_DECODE] = last - req.first_token
        a[sc.GEN_AI_LATENCY_INFERENCE] = last - req.scheduled
    p = req.params or {}
    max_tokens = req.max_tokens if req.max_tokens is not None else p.get("max_tokens")
    if max_tokens is None and max_model_len:
        max_tokens = max_model_len - req.prompt_tokens
    if max_tokens is not None:
        a[sc.GEN_AI_REQUEST_MAX_TOKENS] = int(max_tokens)
    a[sc.GEN_AI_REQUEST_TOP_P] = float(p["top_p"]) if p.get("top_p") is not None else DEFAULT_TOP_P
    temperature = float(p["temperature"]) if p.get("temperature") is not None else DEFAULT_TEMPERATURE
    if temperature != 0:
        a[sc.GEN_AI_REQUEST_TEMPERATURE] = temperature
    a[sc.GEN_AI_REQUEST_N] = 1  # per engine request: each of n choices is its own n=1 request
    return a


def sdk_resource() -> dict:
    """``telemetry.sdk.*`` as the OpenTelemetry SDK puts them on every resource (vLLM's spans have
    them); the live replicas get them from the SDK itself, the virtual-time simulator from here."""
    from opentelemetry.sdk.resources import Resource

    return {k: v for k, v in Resource.create({}).attributes.items() if k.startswith("telemetry.sdk.")}


def replica_resource(replica_id: str, gpu_type: str, gpu_count: int, model: str, process_id: int | None = None) -> dict:
    """Resource attributes of a replica's ``llm_request`` spans.

    ``service.*``, ``gpu.*`` and ``gen_ai.request.model`` are what the operator sets in
    ``OTEL_RESOURCE_ATTRIBUTES`` (README, "Pointing a real vLLM fleet at it"; all strings there, so
    ``gpu.count`` is a string as on the captured spans); vLLM 0.32 adds ``vllm.process_id`` (the
    API server's pid, new on every restart) and ``vllm.instrumenting_module_name``.
    """
    res = {sc.SERVICE_NAME: RESOURCE_SERVICE_NAME, sc.SERVICE_INSTANCE_ID: replica_id,
           sc.GPU_TYPE: gpu_type, sc.GPU_COUNT: str(gpu_count), sc.RESOURCE_MODEL: model,
           sc.VLLM_INSTRUMENTING_MODULE: INSTRUMENTING_MODULE}
    if process_id is not None:
        res[sc.VLLM_PROCESS_ID] = str(process_id)
    return res
