"""vLLM's ``llm_request`` span, as data: which attributes a finished or aborted request carries.

Mirrors vLLM V1 ``OutputProcessor.do_tracing`` (shared/reference/vllm-telemetry.md): latency
attributes are float seconds between the request's engine timestamps; request parameters only
when set. Intervals whose end event never happened (an abort before the first token) are left
out rather than reported as vLLM's negative garbage.
"""

from __future__ import annotations

import json

from schema import semconv as sc

RESOURCE_SERVICE_NAME = "vllm"


def finish_reasons_json(reason: str) -> str:
    return json.dumps([reason])


def engine_span_attributes(req, request_id: str) -> dict:
    """Attributes of the ``llm_request`` span of an engine request (``engine.EngineRequest``).

    Times: ``req.arrival``, ``queued``, ``scheduled``, ``first_token``, ``last_token``,
    ``finished`` in one clock (seconds); output: ``{attribute: str | int | float}``.
    """
    a = {
        sc.GEN_AI_REQUEST_ID: request_id,
        sc.GEN_AI_USAGE_PROMPT_TOKENS: req.prompt_tokens,
        sc.GEN_AI_USAGE_COMPLETION_TOKENS: req.out,
        sc.GEN_AI_LATENCY_E2E: req.finished - req.arrival,
        sc.GEN_AI_RESPONSE_FINISH_REASONS: finish_reasons_json(req.finish_reason),
    }
    if req.scheduled is not None:
        a[sc.GEN_AI_LATENCY_QUEUE] = req.scheduled - req.queued
    if req.first_token is not None:
        a[sc.GEN_AI_LATENCY_TTFT] = req.first_token - req.arrival
        if req.scheduled is not None:
            a[sc.GEN_AI_LATENCY_PREFILL] = req.first_token - req.scheduled
        last = req.last_token if req.finish_reason != "abort" else req.finished
        a[sc.GEN_AI_LATENCY_DECODE] = last - req.first_token
        a[sc.GEN_AI_LATENCY_INFERENCE] = last - req.scheduled
    p = req.params
    if p:
        if p.get("max_tokens") is not None:
            a[sc.GEN_AI_REQUEST_MAX_TOKENS] = int(p["max_tokens"])
        if p.get("temperature") is not None:
            a[sc.GEN_AI_REQUEST_TEMPERATURE] = float(p["temperature"])
        if p.get("top_p") is not None:
            a[sc.GEN_AI_REQUEST_TOP_P] = float(p["top_p"])
        if p.get("n") is not None:
            a[sc.GEN_AI_REQUEST_N] = int(p["n"])
    return a


def replica_resource(replica_id: str, gpu_type: str, gpu_count: int, model: str) -> dict:
    """Resource attributes naming a replica (vLLM sets these via OTEL_RESOURCE_ATTRIBUTES)."""
    return {sc.SERVICE_NAME: RESOURCE_SERVICE_NAME, sc.SERVICE_INSTANCE_ID: replica_id,
            sc.GPU_TYPE: gpu_type, sc.GPU_COUNT: gpu_count, sc.RESOURCE_MODEL: model}
