"""Attribute and span names: the contracts between the serving tier, the collectors and the SQL.

OpenTelemetry GenAI semantic conventions and vLLM's own names where they exist; our ``task.*`` /
``tenant.*`` / ``slo.*`` contract (docs/telemetry.md); ``gateway.*`` for what only the gateway sees.
The SQL in ``schema/migrations`` reads the same strings; keep both in step (a test checks that
every name the ``llm_calls`` view reads is declared here).
"""

from __future__ import annotations

# --- vLLM's request span (vllm/tracing; see shared/reference/vllm-telemetry.md) -------------------
VLLM_SPAN_NAME = "llm_request"  # kind SERVER; start = arrival, end = final output processed
GEN_AI_REQUEST_ID = "gen_ai.request.id"
GEN_AI_USAGE_PROMPT_TOKENS = "gen_ai.usage.prompt_tokens"  # deprecated name, vLLM still emits it
GEN_AI_USAGE_COMPLETION_TOKENS = "gen_ai.usage.completion_tokens"  # deprecated name
GEN_AI_LATENCY_TTFT = "gen_ai.latency.time_to_first_token"  # seconds, arrival -> first token
GEN_AI_LATENCY_E2E = "gen_ai.latency.e2e"  # seconds, arrival -> finish
GEN_AI_LATENCY_QUEUE = "gen_ai.latency.time_in_queue"  # seconds, queued -> scheduled
GEN_AI_LATENCY_PREFILL = "gen_ai.latency.time_in_model_prefill"  # seconds, scheduled -> first token
GEN_AI_LATENCY_DECODE = "gen_ai.latency.time_in_model_decode"  # seconds, first -> last token
GEN_AI_LATENCY_INFERENCE = "gen_ai.latency.time_in_model_inference"  # seconds, scheduled -> last token
GEN_AI_REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
GEN_AI_REQUEST_TEMPERATURE = "gen_ai.request.temperature"
GEN_AI_REQUEST_TOP_P = "gen_ai.request.top_p"
GEN_AI_REQUEST_N = "gen_ai.request.n"

# --- OpenTelemetry GenAI semantic conventions (client / gateway spans) ---------------------------
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"  # chat, text_completion, ...
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_REQUEST_STREAM = "gen_ai.request.stream"
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"  # string[]; stored as a JSON list
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"  # includes cached tokens
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"  # included in input_tokens
GEN_AI_USAGE_CACHED_TOKENS = "gen_ai.usage.cached_tokens"  # older vLLM name of the cache-read count
# Input tokens written to the cache (computed, so not a saving); its name before the rename. A span
# carrying either reported its cache usage: without a cache-read count it read nothing (llm_calls).
GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS = "gen_ai.usage.cache_write.input_tokens"
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK = "gen_ai.response.time_to_first_chunk"  # seconds
ERROR_TYPE = "error.type"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"

# --- Resource attributes naming the replica ----------------------------------------------------
SERVICE_NAME = "service.name"
SERVICE_INSTANCE_ID = "service.instance.id"  # the replica id (set via OTEL_RESOURCE_ATTRIBUTES)
GPU_TYPE = "gpu.type"  # e.g. H100, A100 (resource attribute of a replica)
GPU_COUNT = "gpu.count"
RESOURCE_MODEL = "gen_ai.request.model"  # resource attribute fallback when spans carry no model
VLLM_PROCESS_ID = "vllm.process_id"  # vLLM >= 0.32 resource: API server pid (changes on restart), a string
VLLM_INSTRUMENTING_MODULE = "vllm.instrumenting_module_name"  # vLLM >= 0.32 resource: vllm.llm_engine, ...

# --- Task context (docs/telemetry.md; travels as W3C baggage) ----------------------------------
TASK_ID = "task.id"
TASK_TYPE = "task.type"
TASK_OUTCOME = "task.outcome"  # task root span: success | failure | abandoned
TASK_STEP = "task.step"
TASK_ATTEMPT = "task.attempt"  # 1 for the first try of a step's call, 2.. for retries
TASK_CALL = "task.call"  # call index within its step (1..); the attempts of one call share it
TENANT_ID = "tenant.id"
TENANT_PRIORITY = "tenant.priority"  # interactive | batch | ...
SLO_TTFT_MS = "slo.ttft_ms"
SLO_E2E_MS = "slo.e2e_ms"
BAGGAGE_KEYS = (TASK_ID, TASK_TYPE, TASK_STEP, TASK_CALL, TASK_ATTEMPT, TENANT_ID, TENANT_PRIORITY)

TASK_OUTCOMES = ("success", "failure", "abandoned")
TASK_SPAN_NAME_PREFIX = "task "  # task root span: "task {task.type}", kind INTERNAL

# --- Gateway span (what only the gateway sees) -------------------------------------------------
GATEWAY_REPLICA = "gateway.replica"  # replica id chosen for this attempt
GATEWAY_POLICY = "gateway.policy"  # round_robin | least_loaded | session_affinity
GATEWAY_RETRIES = "gateway.retries"  # retries the gateway performed for this request
GATEWAY_UPSTREAM_STATUS = "gateway.upstream.status_code"  # HTTP status from the replica
GATEWAY_TOKENS_STREAMED = "gateway.tokens_streamed"  # output tokens relayed before the end/break
GATEWAY_ADMISSION = "gateway.admission"  # admitted | rejected
GATEWAY_ATTEMPT = "gateway.attempt"  # 1.. within the gateway's own retries
GATEWAY_TIMEOUT_PHASE = "gateway.timeout.phase"  # connect | first_byte | chunk | response (error.type timeout)
GATEWAY_OUTLIER_EJECTED = "gateway.outlier.ejected"  # true on the attempt whose failure ejected its replica
GATEWAY_OUTLIER_EJECTION_S = "gateway.outlier.ejection_s"  # seconds the replica is ejected for

# --- Client span ---------------------------------------------------------------------------
CLIENT_TOKENS_RECEIVED = "gen_ai.client.tokens_received"  # output tokens seen before the end/break
CLIENT_PARTIAL = "gen_ai.client.partial"  # true when a stream broke after tokens arrived

# Finish reasons that mean the call completed normally (anything else with tokens = partial).
NORMAL_FINISH_REASONS = ("stop", "length", "tool_calls", "content_filter", "function_call", "repetition")

# Values of llm_calls.call_source
SOURCE_ENGINE = "engine"
SOURCE_GATEWAY = "gateway"
SOURCE_CLIENT = "client"

# --- Content capture (opt-in only; serving.sdk records no prompts/completions by default) ------
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"  # JSON of the request messages (GenAI semconv)
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"  # JSON of the completion (GenAI semconv)
