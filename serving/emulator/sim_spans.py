"""Span attributes of the simulated client, gateway and task layers (docs/telemetry.md contract).

Where it sits: used by fleet_sim.py only; the engine's own span is spans.py. Service names match
the live components: the gateway's default ``infercost-gateway``, and ``infercost-load``, the
tracer the live load runner (``infercost load``) gives the task SDK.
"""

from __future__ import annotations

import json

from schema import semconv as sc

CLIENT_SERVICE = "infercost-load"  # as the live load runner (infercost load) names its tracer
GATEWAY_SERVICE = "infercost-gateway"
GATEWAY_SPAN_NAME = "gateway chat"
GATEWAY_ATTEMPT_SPAN_NAME = "gateway.attempt"


def task_context(task) -> dict:
    return {sc.TASK_ID: task.task_id, sc.TASK_TYPE: task.task_type, sc.TENANT_ID: task.tenant,
            sc.TENANT_PRIORITY: task.priority}


def step_context(step: str, call: int, attempt: int) -> dict:
    """task.step / task.call / task.attempt of one attempt, as the gateway copies them from the
    client's W3C baggage (strings): the cost job decides useful/retry per (step, call)."""
    return {sc.TASK_STEP: step, sc.TASK_CALL: str(call), sc.TASK_ATTEMPT: str(attempt)}


# The span builders below return only their span's own attributes; every span of a task also
# carries ``task_context(task)``, which the simulator encodes once per task (``serving.otlp_encoding.span(pre=...)``).


def task_root_attrs(task, outcome: str, error_type: str | None) -> dict:
    a = {sc.TASK_OUTCOME: outcome}
    if task.slo_ttft_ms is not None:
        a[sc.SLO_TTFT_MS] = float(task.slo_ttft_ms)
    if task.slo_e2e_ms is not None:
        a[sc.SLO_E2E_MS] = float(task.slo_e2e_ms)
    if error_type:
        a[sc.ERROR_TYPE] = error_type
    return a


def usage_attrs(input_tokens: int | None, cached_tokens: int | None, output_tokens: int | None) -> dict:
    """The call's ``gen_ai.usage.*`` token counts, each left out while unknown (None)."""
    usage = {sc.GEN_AI_USAGE_INPUT_TOKENS: input_tokens, sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: cached_tokens,
             sc.GEN_AI_USAGE_OUTPUT_TOKENS: output_tokens}
    return {k: v for k, v in usage.items() if v is not None}


def outcome_attrs(ttfc: float | None, error_type: str | None, status: int | None = None) -> dict:
    """How the call went, as far as known: time to first chunk, upstream HTTP status (gateway spans),
    error type; each left out while unknown."""
    a = {}
    if ttfc is not None:
        a[sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] = ttfc
    if status is not None:
        a[sc.GATEWAY_UPSTREAM_STATUS] = status
    if error_type:
        a[sc.ERROR_TYPE] = error_type
    return a


def client_attrs(task, step: str, attempt: int, *, input_tokens: int | None, output_tokens: int | None,
                 finish_reason: str | None, ttfc: float | None, tokens_received: int, error_type: str | None,
                 call: int = 1, cached_tokens: int | None = None) -> dict:
    a = {
        sc.GEN_AI_OPERATION_NAME: "chat",
        sc.GEN_AI_PROVIDER_NAME: "vllm",
        sc.GEN_AI_REQUEST_MODEL: task.model,
        sc.GEN_AI_REQUEST_STREAM: True,
        sc.TASK_STEP: step,
        sc.TASK_CALL: call,
        sc.TASK_ATTEMPT: attempt,
        sc.CLIENT_TOKENS_RECEIVED: tokens_received,
        sc.CLIENT_PARTIAL: bool(error_type) and tokens_received > 0,
    }
    a.update(usage_attrs(input_tokens, cached_tokens, output_tokens))
    if finish_reason:
        a[sc.GEN_AI_RESPONSE_FINISH_REASONS] = json.dumps([finish_reason])
    a.update(outcome_attrs(ttfc, error_type))
    return a


def gateway_attrs(task, policy: str, retries: int, replica: str | None, status: int | None, tokens: int,
                  ttfc: float | None, error_type: str | None, step_ctx: dict | None = None) -> dict:
    a = {sc.GATEWAY_POLICY: policy, sc.GATEWAY_RETRIES: retries, sc.GATEWAY_ADMISSION: "admitted",
         sc.GATEWAY_TOKENS_STREAMED: tokens, sc.GEN_AI_REQUEST_MODEL: task.model, **(step_ctx or {})}
    if replica:
        a[sc.GATEWAY_REPLICA] = replica
    a.update(outcome_attrs(ttfc, error_type, status))
    return a


def gateway_attempt_attrs(task, policy: str, attempt: int, replica: str, status: int | None, tokens: int,
                          error_type: str | None, step_ctx: dict | None = None, *, input_tokens: int | None = None,
                          output_tokens: int | None = None, finish_reason: str | None = None,
                          ttfc: float | None = None, cached_tokens: int | None = None) -> dict:
    """The real gateway's attempt span (serving/gateway/relay.py): it asks every replica for
    continuous usage, so ``input_tokens`` (prompt tokens, from the first chunk) is known once a
    first chunk arrived, even when the stream then broke or the client left, and with it
    ``cached_tokens`` (``usage.prompt_tokens_details.cached_tokens``: the replicas run with
    ``--enable-prompt-tokens-details``, as serving/vllm/launch.py starts vLLM and the live emulator
    answers; None for a miss, whose usage has no details, as vLLM 0.32 answers); ``output_tokens`` and ``finish_reason`` only from a stream that ended cleanly; ``ttfc``
    seconds at the gateway."""
    a = {sc.GATEWAY_ATTEMPT: attempt, sc.GATEWAY_REPLICA: replica, sc.GATEWAY_POLICY: policy,
         sc.GATEWAY_TOKENS_STREAMED: tokens, **(step_ctx or {})}
    a.update(usage_attrs(input_tokens, cached_tokens, output_tokens))
    if finish_reason:
        a[sc.GEN_AI_RESPONSE_FINISH_REASONS] = [finish_reason]
    a.update(outcome_attrs(ttfc, error_type, status))
    return a
