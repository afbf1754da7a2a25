"""Builders for cost-engine tests: spans in the shapes of docs/telemetry.md, metric points, fleets.

No tests here; ``tests/test_cost*.py`` import these. Spans go straight into ``otel_traces`` (the
``llm_calls``, ``task_spans`` and ``gateway_requests`` views fill on insert); metric points into
``otel_metrics_gauge`` / ``otel_metrics_sum`` with the replica in ``service.instance.id``.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pytest

from schema import jobs
from schema import semconv as sc
from schema.fleet import parse_fleet, sync_fleet

T0 = datetime(2026, 1, 5, 10, 0, 0)  # a Monday, UTC; every test time is T0 + seconds
_ids = itertools.count(1)

SPAN_COLUMNS = ["Timestamp", "TraceId", "SpanId", "ParentSpanId", "SpanName", "SpanKind", "ServiceName",
                "ResourceAttributes", "SpanAttributes", "Duration", "StatusCode", "StatusMessage"]


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def new_id(prefix: str = "s") -> str:
    return f"{prefix}{next(_ids):015d}"


def fleet_yaml(price: float = 3.60, gpu_count: int = 1, w_prefill: float = 0.1, w_decode: float = 1.0,
               replicas=("r1",), extra: str = "") -> str:
    reps = "\n".join(f"  {r}: {{gpu_type: H100, gpu_count: {gpu_count}}}" for r in replicas)
    return (f"gpu_types:\n  H100:\n    prices:\n      - {{usd_per_gpu_hour: {price}, valid_from: 2025-01-01}}\n"
            f"  A100:\n    prices:\n      - {{usd_per_gpu_hour: 1.8, valid_from: 2025-01-01}}\n"
            f"replicas:\n{reps}\nallocation: {{w_prefill: {w_prefill}, w_decode: {w_decode}}}\n"
            f"abandon_timeout_s: 600\n{extra}")


def sync(store, text: str):
    return sync_fleet(store, parse_fleet(text))


@dataclass
class Call:
    """Ids of one call's spans (client attempt -> gateway request -> gateway attempt -> engine)."""

    trace: str
    client: str | None = None
    request: str | None = None
    attempt: str | None = None
    engine: str | None = None


@dataclass
class Spans:
    """Collects otel_traces rows; :meth:`flush` inserts them."""

    rows: list = field(default_factory=list)

    def span(self, trace, span_id, parent, name, kind, start, end, service, attrs, resource=None, status="Ok"):
        start_dt, end_dt = at(start), at(end)
        duration = int(round((end - start) * 1e9))
        self.rows.append([start_dt, trace, span_id, parent or "", name, kind, service, resource or {},
                          {k: str(v) for k, v in attrs.items() if v is not None}, duration, status, ""])
        return span_id

    def task(self, trace, task_id, start, end, outcome="success", task_type="chat", tenant="acme",
             slo_ttft_ms=None, slo_e2e_ms=None):
        attrs = {sc.TASK_ID: task_id, sc.TASK_TYPE: task_type, sc.TENANT_ID: tenant,
                 sc.TENANT_PRIORITY: "interactive", sc.TASK_OUTCOME: outcome,
                 sc.SLO_TTFT_MS: slo_ttft_ms, sc.SLO_E2E_MS: slo_e2e_ms}
        return self.span(trace, new_id("t"), "", f"task {task_type}", "Internal", start, end, "app", attrs,
                         status="Error" if outcome == "failure" else "Ok")

    def call(self, *, task_id=None, task_type="chat", tenant="acme", step="1", attempt=1, start=0.0, end=1.0,
             replica="r1", prompt=100, cached=None, output=10, model="llama", client=True, gateway=True,
             engine=True, ok=True, partial=False, streamed=None, ttft=0.1, trace=None, finish="stop",
             gateway_prompt=True) -> Call:
        """One client attempt with (optionally) its gateway request + attempt and engine request.

        ``engine=False`` models a crashed replica (its span never exported): the gateway attempt
        carries ``gateway.tokens_streamed`` = ``streamed`` and an error.
        """
        trace = trace or new_id("tr")
        ctx = {sc.TASK_ID: task_id, sc.TASK_TYPE: task_type if task_id else None,
               sc.TENANT_ID: tenant if task_id else None, sc.TASK_STEP: step if task_id else None,
               sc.TASK_ATTEMPT: attempt if task_id else None}
        ids = Call(trace)
        status = "Ok" if ok else "Error"
        got = streamed if streamed is not None else output
        if client:
            ids.client = self.span(trace, new_id("c"), "", f"chat {model}", "Client", start - 0.002, end + 0.002,
                                   "client", ctx | {
                                       sc.GEN_AI_OPERATION_NAME: "chat", sc.GEN_AI_REQUEST_MODEL: model,
                                       sc.GEN_AI_USAGE_INPUT_TOKENS: prompt if ok else None,
                                       sc.GEN_AI_USAGE_OUTPUT_TOKENS: output if ok else None,
                                       sc.CLIENT_TOKENS_RECEIVED: got,
                                       sc.CLIENT_PARTIAL: "true" if partial else None,
                                       sc.ERROR_TYPE: None if ok else "stream_broken"}, status=status)
        parent = ids.client
        if gateway:
            ids.request = self.span(trace, new_id("g"), ids.client, "gateway chat", "Server", start - 0.001,
                                    end + 0.001, "gateway", ctx | {sc.GATEWAY_POLICY: "round_robin",
                                                                   sc.GATEWAY_REPLICA: replica,
                                                                   sc.GATEWAY_ADMISSION: "admitted"}, status=status)
            ids.attempt = self.span(trace, new_id("a"), ids.request, "gateway.attempt", "Client", start - 0.0005,
                                    end + 0.0005, "gateway", ctx | {
                                        sc.GATEWAY_ATTEMPT: 1, sc.GATEWAY_REPLICA: replica,
                                        sc.GEN_AI_REQUEST_MODEL: model,
                                        sc.GEN_AI_USAGE_INPUT_TOKENS: prompt if (ok or gateway_prompt) else None,
                                        sc.GATEWAY_TOKENS_STREAMED: got,
                                        sc.ERROR_TYPE: None if ok else "stream_broken"}, status=status)
            parent = ids.attempt
        if engine:
            ids.engine = self.span(trace, new_id("e"), parent, "llm_request", "Server", start, end, "vllm", {
                sc.GEN_AI_REQUEST_ID: new_id("chatcmpl-"), sc.GEN_AI_USAGE_PROMPT_TOKENS: prompt,
                sc.GEN_AI_USAGE_COMPLETION_TOKENS: output, sc.GEN_AI_USAGE_CACHED_TOKENS: cached,
                sc.GEN_AI_LATENCY_TTFT: ttft, sc.GEN_AI_LATENCY_E2E: end - start,
                sc.GEN_AI_RESPONSE_FINISH_REASONS: json.dumps([finish]), sc.GEN_AI_REQUEST_MODEL: model,
            }, resource={sc.SERVICE_INSTANCE_ID: replica, sc.GPU_TYPE: "H100", sc.GPU_COUNT: "1"})
        return ids

    def flush(self, store):
        if self.rows:
            store.insert("otel_traces", self.rows, SPAN_COLUMNS, tag="test.spans")
        self.rows = []


def metrics_up(store, replica: str, minutes, *, waiting=0.0, running=1.0, kv=0.5, counters=None):
    """One scrape per minute (at +30 s) of the three vLLM gauges for ``replica``; ``counters`` =
    {minute: (prompt_total, generation_total)} adds cumulative vllm:prompt_tokens / generation_tokens."""
    gauge_rows, sum_rows = [], []
    resource = {sc.SERVICE_INSTANCE_ID: replica, sc.GPU_TYPE: "H100"}
    for minute in minutes:
        ts = at(minute * 60 + 30)
        for name, value in (("vllm:num_requests_waiting", waiting), ("vllm:num_requests_running", running),
                            ("vllm:kv_cache_usage_perc", kv)):
            gauge_rows.append([resource, "vllm", name, {"model_name": "llama"}, ts, ts, float(value)])
    for minute, (prompt_total, generation_total) in (counters or {}).items():
        ts = at(minute * 60 + 45)
        for name, value in (("vllm:prompt_tokens", prompt_total), ("vllm:generation_tokens", generation_total)):
            sum_rows.append([resource, "vllm", name, {"model_name": "llama"}, T0, ts, float(value), 2, True])
    cols = ["ResourceAttributes", "ServiceName", "MetricName", "Attributes", "StartTimeUnix", "TimeUnix", "Value"]
    if gauge_rows:
        store.insert("otel_metrics_gauge", gauge_rows, cols, tag="test.gauges")
    if sum_rows:
        store.insert("otel_metrics_sum", sum_rows, cols + ["AggregationTemporality", "IsMonotonic"], tag="test.sums")


def one(df):
    assert len(df) == 1, df
    return df.iloc[0]


# --- a shared store per test module, emptied before each test (migrating costs seconds) ----------

_DATA_TABLES = ("otel_traces", "otel_metrics_gauge", "otel_metrics_sum", "otel_metrics_histogram", "llm_calls",
                "task_spans", "gateway_requests", "call_costs_history", "call_costs_live", "replica_minutes_history",
                "replica_minutes_live", "tasks_history", "tasks_live", "cost_watermark", "job_clock", "gpu_prices",
                "replicas", "task_slos")


def reset(store) -> None:
    """Empty every table the cost engine reads or writes (cost_settings keeps its rows: each test
    syncs its own fleet, whose row is the newest)."""
    for table in _DATA_TABLES:
        store.command(f"TRUNCATE TABLE IF EXISTS {table}", tag="test.reset")


@pytest.fixture(scope="module")
def _module_store():
    from tests.conftest import drop_store, new_store

    store = new_store()
    jobs.stop(store)  # explicit runs only: the periodic chain must not interleave
    yield store
    drop_store(store)


@pytest.fixture
def cstore(_module_store):
    """A migrated store with the periodic chain stopped and every cost table empty."""
    reset(_module_store)
    return _module_store
