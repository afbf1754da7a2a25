"""Builders for cost-engine tests: spans in the shapes their real producers emit, metric points, fleets.

No tests here; ``tests/test_cost*.py`` import these. Spans are built with typed attribute values in
the shape serving.sdk, serving.gateway and vLLM 0.32 emit them (docs/telemetry.md;
tests/fixtures/vllm-0.32-cpu-captured) and stored through the receiver's ingest path
(``collectors.ingest.ingest_traces``: OTLP protobuf -> otel_traces -> the views); metric points into
``otel_metrics_gauge`` / ``otel_metrics_sum`` with the replica in ``service.instance.id``
(``tests/test_cost_scenarios.py`` scrapes vLLM-format pages with the real scraper instead).
"""

from __future__ import annotations

import hashlib
import itertools
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pytest

from schema import jobs
from schema import semconv as sc
from schema.fleet import parse_fleet, sync_fleet

T0 = datetime(2026, 1, 5, 10, 0, 0)  # a Monday, UTC; every test time is T0 + seconds
_ids = itertools.count(1)

def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def new_id(prefix: str = "s") -> str:
    """A fresh 64-bit span id (16 hex digits); ``prefix`` only varies the sequence."""
    return f"{next(_ids):016x}"


def hex_id(name: str, nbytes: int) -> str:
    """``name`` as an OTLP id of ``nbytes`` bytes (hex): kept when it already is one, else hashed."""
    if len(name) == 2 * nbytes and all(ch in "0123456789abcdef" for ch in name):
        return name
    return hashlib.md5(name.encode()).hexdigest()[:2 * nbytes]


def fleet_yaml(price: float = 3.60, gpu_count: int = 1, w_prefill: float = 0.1, w_decode: float = 1.0,
               replicas=("r1",), extra: str = "", capacity: float | None = 1e-9, billing: str = "on_demand") -> str:
    """A fleet.yaml text. ``capacity`` (work units per minute per replica): the default 1e-9 makes
    every minute with work allocate all its spend (any work saturates it), so a scenario about
    another rule keeps its figures independent of utilisation; ``None`` lets the job learn it."""
    cap = f", capacity: {capacity}" if capacity is not None else ""
    reps = "\n".join(f"  {r}: {{gpu_type: H100, gpu_count: {gpu_count}, billing: {billing}{cap}}}" for r in replicas)
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


_KINDS = {"Internal": 1, "Server": 2, "Client": 3}
_STATUS = {"Unset": 0, "Ok": 1, "Error": 2}


def _any_value(value, out) -> None:
    if isinstance(value, bool):
        out.bool_value = value
    elif isinstance(value, int):
        out.int_value = value
    elif isinstance(value, float):
        out.double_value = value
    elif isinstance(value, (list, tuple)):
        for item in value:
            _any_value(item, out.array_value.values.add())
    else:
        out.string_value = str(value)


def _chat_attrs(model: str, prompt, cached, output, finishes, ttfc) -> dict:
    """The GenAI attributes of a chat call that the client and the gateway attempt both record (None: not
    known to that producer, left out)."""
    return {sc.GEN_AI_OPERATION_NAME: "chat", sc.GEN_AI_REQUEST_MODEL: model, sc.GEN_AI_USAGE_INPUT_TOKENS: prompt,
            sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: cached, sc.GEN_AI_USAGE_OUTPUT_TOKENS: output,
            sc.GEN_AI_RESPONSE_FINISH_REASONS: finishes, sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: ttfc}


@dataclass
class Spans:
    """Collects spans (typed attributes, as the producers set them); :meth:`flush` stores them
    through the receiver's ingest path."""

    rows: list = field(default_factory=list)

    def span(self, trace, span_id, parent, name, kind, start, end, service, attrs, resource=None, status="Ok"):
        resource = {sc.SERVICE_NAME: service, **(resource or {})}
        self.rows.append((hex_id(trace, 16), span_id, parent or "", name, kind, start, end, resource,
                          {k: v for k, v in attrs.items() if v is not None}, status))
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
             gateway_prompt=None, call_index=None, choices=1, client_ttft=None, gateway_ttft=None,
             engine_outputs=None, error_type="stream_broken", upstream_status=200, gateway_extra=None) -> Call:
        """One client attempt with (optionally) its gateway request + attempt and engine request(s),
        each in the shape its real producer emits (docs/telemetry.md):

        * engine: vLLM 0.32's ``llm_request`` (tests/fixtures/vllm-0.32-cpu-captured): tokens and
          latencies only — no model, finish reason or cached count; ``choices`` > 1 = one span per
          choice (same parent and request id, full prompt each, ``output`` tokens each);
        * gateway attempt: what serving.gateway records — usage (prompt, cached when the server
          reports it, output), finish reasons, streamed tokens; on a broken stream the prompt is
          known when a chunk arrived (``continuous_usage_stats``), i.e. ``streamed`` > 0, unless
          ``gateway_prompt`` says otherwise;
        * client attempt: what serving.sdk records.

        ``engine=False`` models a crashed replica or a client abort (vLLM exports no span).
        ``error_type`` / ``upstream_status``: what a failed attempt records (default a stream that broke
        after HTTP 200; ``"http.429"`` / 429 an attempt the replica answered 429, no byte of a
        completion; ``upstream_status=None``: no answer at all, e.g. ``"connection_error"``).
        ``gateway_extra``: more attributes of the gateway attempt (e.g. another usage attribute).
        ``client_ttft`` / ``gateway_ttft``: the TTFT each of them measured (default ``ttft`` plus the
        hops); ``engine_outputs``: per-choice output tokens (default ``output`` each).
        """
        trace = trace or new_id("tr")
        ctx = {sc.TASK_ID: task_id, sc.TASK_TYPE: task_type if task_id else None,
               sc.TENANT_ID: tenant if task_id else None, sc.TASK_STEP: step if task_id else None,
               sc.TASK_ATTEMPT: attempt if task_id else None, sc.TASK_CALL: call_index if task_id else None}
        ids = Call(trace)
        status = "Ok" if ok else "Error"
        outputs = list(engine_outputs) if engine_outputs is not None else [output] * choices
        got = streamed if streamed is not None else sum(outputs)
        client_ttft = ttft + 0.002 if client_ttft is None else client_ttft
        gateway_ttft = ttft + 0.001 if gateway_ttft is None else gateway_ttft
        if gateway_prompt is None:
            gateway_prompt = ok or got > 0
        finishes = [finish] * len(outputs) if ok else None
        baggage = {k: str(v) for k, v in ctx.items() if v is not None}  # the gateway reads task.* from baggage
        if client:
            chat = _chat_attrs(model, prompt if ok else None, cached if ok else None, got if ok else None, finishes,
                               client_ttft if got else None)
            attrs = ctx | chat | {sc.CLIENT_TOKENS_RECEIVED: got, sc.CLIENT_PARTIAL: "true" if partial else "false",
                                  sc.ERROR_TYPE: None if ok else error_type}
            ids.client = self.span(trace, new_id("c"), "", f"chat {model}", "Client", start - 0.002, end + 0.002,
                                   "client", attrs, status=status)
        parent = ids.client
        if gateway:
            ids.request = self.span(trace, new_id("g"), ids.client, "gateway chat", "Server", start - 0.001,
                                    end + 0.001, "gateway", baggage | {sc.GATEWAY_POLICY: "round_robin",
                                                                   sc.GATEWAY_REPLICA: replica,
                                                                   sc.GATEWAY_ADMISSION: "admitted",
                                                                   sc.GATEWAY_RETRIES: 0}, status=status)
            chat = _chat_attrs(model, prompt if gateway_prompt else None, cached if gateway_prompt else None,
                               got if ok else None, finishes, gateway_ttft if got else None)
            attrs = baggage | {sc.GATEWAY_ATTEMPT: 1, sc.GATEWAY_REPLICA: replica, sc.GATEWAY_POLICY: "round_robin",
                               sc.GATEWAY_UPSTREAM_STATUS: upstream_status} | chat | {
                sc.GATEWAY_TOKENS_STREAMED: got, sc.ERROR_TYPE: None if ok else error_type} | (gateway_extra or {})
            ids.attempt = self.span(trace, new_id("a"), ids.request, "gateway.attempt", "Client", start - 0.0005,
                                    end + 0.0005, "gateway", attrs, status=status)
            parent = ids.attempt
        if engine:
            request_id = new_id("chatcmpl-")
            for n, choice_output in enumerate(outputs):
                ids.engine = ids.engine or new_id("e")
                span_id = ids.engine if n == 0 else new_id("e")
                self.span(trace, span_id, parent, "llm_request", "Server", start, end, "vllm", {
                    sc.GEN_AI_LATENCY_TTFT: ttft, sc.GEN_AI_LATENCY_E2E: end - start,
                    sc.GEN_AI_LATENCY_QUEUE: 0.0001, sc.GEN_AI_USAGE_PROMPT_TOKENS: prompt,
                    sc.GEN_AI_USAGE_COMPLETION_TOKENS: choice_output,
                    sc.GEN_AI_LATENCY_PREFILL: ttft, sc.GEN_AI_LATENCY_DECODE: max(end - start - ttft, 0),
                    sc.GEN_AI_LATENCY_INFERENCE: end - start, sc.GEN_AI_REQUEST_ID: request_id,
                    sc.GEN_AI_REQUEST_TOP_P: 1.0, sc.GEN_AI_REQUEST_MAX_TOKENS: 4096, sc.GEN_AI_REQUEST_N: len(outputs),
                }, resource={sc.SERVICE_INSTANCE_ID: replica, sc.GPU_TYPE: "H100", sc.GPU_COUNT: "1",
                             sc.SERVICE_NAME: "vllm", "vllm.process_id": "26381"})
        return ids

    def flush(self, store):
        """Encode the collected spans as one OTLP ExportTraceServiceRequest (a ResourceSpans per
        resource) and store it with ``collectors.ingest.ingest_traces``."""
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        from collectors.ingest import ingest_traces

        if not self.rows:
            return
        request = ExportTraceServiceRequest()
        by_resource: dict = {}
        epoch = datetime(1970, 1, 1)
        for trace, span_id, parent, name, kind, start, end, resource, attrs, status in self.rows:
            key = tuple(sorted(resource.items()))
            if key not in by_resource:
                rs = request.resource_spans.add()
                for k, v in key:
                    _any_value(v, rs.resource.attributes.add(key=k).value)
                by_resource[key] = rs.scope_spans.add()
                by_resource[key].scope.name = "tests"
            sp = by_resource[key].spans.add(
                trace_id=bytes.fromhex(trace), span_id=bytes.fromhex(span_id),
                parent_span_id=bytes.fromhex(parent) if parent else b"", name=name, kind=_KINDS[kind],
                start_time_unix_nano=int(round((at(start) - epoch).total_seconds() * 1e6)) * 1000,
                end_time_unix_nano=int(round((at(end) - epoch).total_seconds() * 1e6)) * 1000)
            sp.status.code = _STATUS[status]
            for k, v in attrs.items():
                _any_value(v, sp.attributes.add(key=k).value)
        result = ingest_traces(store, request)
        assert result.rejected == 0, result.message
        self.rows = []


def metrics_up(store, replica: str, minutes, *, waiting=0.0, running=1.0, kv=0.5, counters=None, series_start=None):
    """One scrape per minute (at +30 s) of the three vLLM gauges for ``replica``; ``counters`` =
    {minute: (prompt_total, generation_total)} adds cumulative vllm:prompt_tokens / generation_tokens
    scraped at +45 s, their series started at ``series_start`` (default T0: the engine started then)."""
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
            sum_rows.append([resource, "vllm", name, {"model_name": "llama"}, series_start or T0, ts, float(value), 2,
                             True])
    cols = ["ResourceAttributes", "ServiceName", "MetricName", "Attributes", "StartTimeUnix", "TimeUnix", "Value"]
    if gauge_rows:
        store.insert("otel_metrics_gauge", gauge_rows, cols, tag="test.gauges")
    if sum_rows:
        store.insert("otel_metrics_sum", sum_rows, cols + ["AggregationTemporality", "IsMonotonic"], tag="test.sums")


def one(df):
    assert len(df) == 1, df
    return df.iloc[0]


# --- a shared store per test module, emptied before each test (migrating costs seconds) ----------

KEPT_TABLES = ("cost_settings", "schema_migrations")  # each test syncs its own fleet (the newest row wins)


def record_statements(store, monkeypatch) -> list[tuple[str, str]]:
    """Record every ``query_df`` statement sent to ``store`` from now on as ``(tag, text)``; the
    statements still run."""
    sent: list[tuple[str, str]] = []
    query_df = store.query_df

    def recording(text, *args, **kwargs):
        sent.append((kwargs.get("tag"), text))
        return query_df(text, *args, **kwargs)

    monkeypatch.setattr(store, "query_df", recording)
    return sent


def reset(store) -> None:
    """Empty every table of the store but :data:`KEPT_TABLES`: the cost engine reads and writes more
    tables with each migration (dedup keys, late minutes, reconciliation runs, ...), and one left
    over would carry a test's data into the next."""
    names = store.query("SELECT name FROM system.tables WHERE database = currentDatabase() "
                        "AND engine NOT IN ('MaterializedView', 'View', 'Null')", tag="test.reset").result_rows
    for (table,) in names:
        if table not in KEPT_TABLES:
            store.command(f"TRUNCATE TABLE IF EXISTS `{table}`", tag="test.reset")


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


def waste_both(store, start, end):
    """``cost.waste_breakdown`` of ``[start, end)``, checked equal (types, rows, order; values to 1e-12
    relative: the sums run in another order) to the cost page's folded read of it,
    ``cost.period_summaries(..., waste=True)["waste"]``: every hand-computed waste figure checks both."""
    import pandas as pd

    from schema.queries import cost

    alone = cost.waste_breakdown(store, start, end)
    folded = cost.period_summaries(store, start, end, ("", "tenant"), previous=True, waste=True)["waste"]
    pd.testing.assert_frame_equal(alone, folded, check_exact=False, rtol=1e-12, atol=1e-15)
    return alone


_REFRESH_EVERY_MINUTE = re.compile(r"REFRESH EVERY 1 MINUTE(?P<rest>(?: DEPENDS ON [\w.]+(?:, [\w.]+)*)?(?: APPEND)?)")


def hold_the_schedule(store) -> None:
    """Move the periodic chain's schedule to the next new year (each view keeps its dependencies and
    APPEND), so that the chain runs only when the test calls ``jobs.refresh``. ``jobs.stop`` is not
    enough for a test that counts runs: a stopped chain keeps the run of a minute that starts meanwhile
    and fires it beside the next refresh."""
    rows = store.query("SELECT name, create_table_query FROM system.tables "
                       "WHERE database = currentDatabase() AND name IN {names:Array(String)}",
                       {"names": list(jobs.REFRESH_VIEWS)}, tag="test").result_rows
    assert len(rows) == len(jobs.REFRESH_VIEWS)
    for name, create in rows:
        rest = _REFRESH_EVERY_MINUTE.search(create).group("rest")
        store.command(f"ALTER TABLE {name} MODIFY REFRESH EVERY 1 YEAR{rest}", tag="test")
