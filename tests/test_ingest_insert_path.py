"""The span insert path without the client library's temp-file copy, and skip
indexes built at merge instead of at insert, give the same ``llm_calls`` rows as before.

"Before" is the path that shipped: the client library's ``raw_insert`` (it copies the body into a
temporary file and reads it with ``FROM INFILE``) with the insert settings of that time
(skip indexes built at insert). "After" is :func:`collectors.ingest.insert_trace_payloads` as it
is now (``Store.raw_insert`` writes the chunks into an in-memory file; skip indexes at merge).
The spans: the captured real vLLM 0.32 request (tests/fixtures/vllm-0.32-cpu-captured, typed
values as vLLM sent them) and a gateway attempt and an SDK client call carrying every numeric
attribute ``llm_calls`` parses, as int, double, string and bool values. Expected values are
written by hand from the span fields below.
"""

from __future__ import annotations

import math

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from collectors import ingest
from collectors.ingest import insert_trace_payloads
from tests.conftest import drop_store, new_store
from tests.vllm_captured import captured_spans

T0 = 1_796_079_100_000_000_000
TRACE = bytes.fromhex("5a" * 16)


def _shaped_spans() -> ExportTraceServiceRequest:
    """A gateway attempt (service infercost-gateway) and an SDK client call, typed values."""
    req = ExportTraceServiceRequest()
    for service, spans in (("infercost-gateway", [_gateway_span]), ("task-sdk", [_client_span])):
        rs = req.resource_spans.add()
        rs.resource.attributes.add(key="service.name").value.string_value = service
        ss = rs.scope_spans.add()
        ss.scope.name = service
        for build in spans:
            build(ss.spans.add())
    return req


def _attrs(span, values: dict) -> None:
    for key, value in values.items():
        kind = {str: "string_value", bool: "bool_value", int: "int_value", float: "double_value"}[type(value)]
        span.attributes.add(key=key, value=AnyValue(**{kind: value}))


def _gateway_span(span) -> None:
    span.trace_id, span.span_id, span.parent_span_id = TRACE, bytes.fromhex("0a" * 8), bytes.fromhex("0b" * 8)
    span.name, span.kind = "POST /v1/chat/completions", 3  # CLIENT
    span.start_time_unix_nano, span.end_time_unix_nano = T0, T0 + 1_250_000_000
    span.status.code = 2  # ERROR
    _attrs(span, {"gateway.attempt": 2, "gateway.replica": "replica-3", "gateway.retries": 1,
                  "gateway.upstream.status_code": 503, "gateway.tokens_streamed": 17, "gateway.policy": "least_loaded",
                  "gen_ai.request.model": "tiny-llama", "gen_ai.response.id": "chatcmpl-gw",
                  "gen_ai.usage.input_tokens": 40, "gen_ai.usage.cache_read.input_tokens": 8,
                  "gen_ai.response.time_to_first_chunk": 0.125, "task.id": "task-1", "task.type": "rag",
                  "task.step": "answer", "task.attempt": "2", "task.call": 3, "tenant.id": "acme",
                  "tenant.priority": "interactive", "error.type": "http.503",
                  "gen_ai.response.finish_reasons": '["length"]'})


def _client_span(span) -> None:
    span.trace_id, span.span_id, span.parent_span_id = TRACE, bytes.fromhex("0c" * 8), b""
    span.name, span.kind = "chat tiny-llama", 3
    span.start_time_unix_nano, span.end_time_unix_nano = T0 - 5_000_000, T0 + 2_000_000_000
    _attrs(span, {"gen_ai.operation.name": "chat", "gen_ai.response.model": "tiny-llama-v2",
                  "gen_ai.request.id": "req-9", "gen_ai.usage.prompt_tokens": 4294967296,  # > UInt32: NULL
                  "gen_ai.usage.input_tokens": 41.0,  # a double count: ClickHouse prints "41", which parses
                  "gen_ai.client.tokens_received": "12", "gen_ai.client.partial": True,
                  "gen_ai.usage.cached_tokens": -1,  # negative: NULL
                  "task.attempt": 70000,  # > UInt16: NULL
                  "gen_ai.response.finish_reasons": "stop"})


COLUMNS = ("span_id, call_source, replica, model, model_scraped, request_id, task_id, task_type, task_step, "
           "task_attempt, task_call, tenant_id, tenant_priority, prompt_tokens, cached_tokens, output_tokens, ttft_s, "
           "e2e_s, queue_s, prefill_s, decode_s, inference_s, finish_reason, status, error_type, error_class, partial, "
           "gateway_retries, upstream_status, policy, start_time, end_time, trace_id, parent_span_id, service_name, "
           "span_name, gpu_type")


def _rows(store) -> dict:
    result = store.query(f"SELECT {COLUMNS} FROM llm_calls ORDER BY span_id", tag="test.ingest_path")
    return {row[0]: dict(zip(result.column_names, row)) for row in result.result_rows}


def _payloads() -> list[bytes]:
    return [captured_spans().SerializeToString(), _shaped_spans().SerializeToString()]


@pytest.fixture(scope="module")
def before_after():
    """llm_calls of the same spans stored the shipped way (before) and the current way (after)."""
    before, after = new_store(), new_store()
    try:
        # before: the client library's raw_insert (temp file), skip indexes built at insert
        settings = {**ingest._protobuf_settings(True), "materialize_skip_indexes_on_insert": 1}
        data = b"".join(ingest._VarintBytes(len(p)) + p for p in _payloads())
        before._call("test.before", before.client.raw_insert, ingest.TRACES_INPUT_TABLE, None, data,
                     fmt="Protobuf", settings=settings)
        assert insert_trace_payloads(after, _payloads()) == 2
        yield _rows(before), _rows(after), after
    finally:
        drop_store(before)
        drop_store(after)


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b and type(a) is type(b)


def test_every_llm_calls_column_is_the_same_before_and_after(before_after):
    before, after, _ = before_after
    assert set(before) == set(after) == {"f94a69056befafc0", "fe954e21bcefd579", "0532014924df47ad",
                                         "d71bb56fa6475845", "0a" * 8, "0c" * 8}
    for span_id, row in before.items():
        differing = {k: (v, after[span_id][k]) for k, v in row.items() if not _same(v, after[span_id][k])}
        assert not differing, f"{span_id}: {differing}"


def test_captured_vllm_row_keeps_its_exact_values(before_after):
    _, after, _ = before_after
    r = after["f94a69056befafc0"]
    assert (r["call_source"], r["replica"], r["gpu_type"], r["request_id"], r["status"], r["partial"]) == \
        ("engine", "replica-0", "CPU", "chatcmpl-ev-nonstream_length-0-61ea8d", "unset", 0)
    assert (r["prompt_tokens"], r["output_tokens"], r["cached_tokens"]) == (21, 32, None)
    assert (r["ttft_s"], r["e2e_s"], r["queue_s"]) == (0.04598212242126465, 0.8025984764099121, 2.2671000124319107e-05)
    assert (r["prefill_s"], r["decode_s"], r["inference_s"]) == \
        (0.02388390199985224, 0.7570004910000989, 0.7808843929999512)


def test_gateway_row_typed_values(before_after):
    _, after, _ = before_after
    r = after["0a" * 8]
    assert (r["call_source"], r["replica"], r["model"], r["model_scraped"], r["request_id"]) == \
        ("gateway", "replica-3", "tiny-llama", 0, "chatcmpl-gw")
    assert (r["task_id"], r["task_type"], r["task_step"], r["task_attempt"], r["task_call"]) == \
        ("task-1", "rag", "answer", 2, 3)
    assert (r["tenant_id"], r["tenant_priority"], r["policy"]) == ("acme", "interactive", "least_loaded")
    assert (r["prompt_tokens"], r["cached_tokens"], r["output_tokens"]) == (40, 8, 17)
    assert (r["ttft_s"], r["e2e_s"], r["queue_s"]) == (0.125, 1.25, None)
    assert (r["gateway_retries"], r["upstream_status"]) == (1, 503)
    assert (r["finish_reason"], r["status"], r["error_type"], r["error_class"], r["partial"]) == \
        ("length", "error", "http.503", "upstream_error", 1)
    assert (r["trace_id"], r["parent_span_id"], r["service_name"]) == ("5a" * 16, "0b" * 8, "infercost-gateway")


def test_client_row_out_of_range_and_double_counts(before_after):
    _, after, _ = before_after
    r = after["0c" * 8]
    assert (r["call_source"], r["replica"], r["model"], r["request_id"], r["parent_span_id"]) == \
        ("client", "", "tiny-llama-v2", "req-9", "")
    # prompt_tokens: 4294967296 does not fit UInt32 -> NULL, so input_tokens (the double 41.0) is used
    assert (r["prompt_tokens"], r["cached_tokens"], r["output_tokens"], r["task_attempt"]) == (41, None, 12, None)
    assert (r["e2e_s"], r["ttft_s"]) == (2.005, None)
    assert (r["finish_reason"], r["status"], r["partial"], r["error_class"]) == ("stop", "unset", 1, "")


def test_skip_indexes_are_built_at_merge_not_at_insert(before_after):
    _, _, store = before_after
    parts = "SELECT sum(secondary_indices_compressed_bytes) FROM system.parts " \
            "WHERE database = currentDatabase() AND table = 'otel_traces' AND active"
    assert store.scalar(parts, tag="test.parts") == 0
    insert_trace_payloads(store, [_shaped_spans().SerializeToString().replace(b"\x5a" * 16, b"\x5b" * 16)])
    store.command("OPTIMIZE TABLE otel_traces FINAL", tag="test.optimize")
    assert store.scalar(parts, tag="test.parts") > 0
    assert store.scalar("SELECT count() FROM otel_traces WHERE TraceId = {t:String}", {"t": "5b" * 16},
                        tag="test.lookup") == 2


def test_raw_insert_takes_chunks_and_bytes_alike(store):
    store.command("CREATE TABLE t (a UInt32, b String) ENGINE = MergeTree ORDER BY a", tag="test.t")
    store.raw_insert("t", [b"1\tone\n", memoryview(b"2\ttw"), bytearray(b"o\n")], "TabSeparated", tag="test.t")
    store.raw_insert("t", b"3\tthree\n", "TabSeparated", tag="test.t")
    assert store.query("SELECT a, b FROM t ORDER BY a", tag="test.t").result_rows == \
        [(1, "one"), (2, "two"), (3, "three")]
    with pytest.raises(ValueError):
        store.raw_insert("t", b"", "TabSeparated; DROP TABLE t", tag="test.t")


def _big_spans(n: int, trace: bytes) -> bytes:
    """``n`` spans, each carrying one 60,000-byte attribute (under the 64 KiB truncation limit)."""
    req = ExportTraceServiceRequest()
    ss = req.resource_spans.add().scope_spans.add()
    for i in range(n):
        span = ss.spans.add(trace_id=trace, span_id=(i + 1).to_bytes(8, "big"), name="big", kind=1,
                            start_time_unix_nano=T0 + i, end_time_unix_nano=T0 + i + 1)
        span.attributes.add(key="blob", value=AnyValue(string_value=chr(ord("a") + i % 26) * 60_000))
    return req.SerializeToString()


def test_otel_traces_insert_parts_are_compact_up_to_32_mib(store):
    """Migration 1000: a part of 200 x 60 kB (12 MB, above ClickHouse's default 10 MiB for Wide)
    is Compact; one of 600 x 60 kB (36 MB, above 32 MiB) is Wide."""
    store.command("SYSTEM STOP MERGES otel_traces", tag="test.parts")
    insert_trace_payloads(store, [_big_spans(200, b"\x01" * 16)])
    insert_trace_payloads(store, [_big_spans(600, b"\x02" * 16)])
    parts = store.query("SELECT rows, part_type, data_uncompressed_bytes FROM system.parts WHERE database = "
                        "currentDatabase() AND table = 'otel_traces' AND active ORDER BY rows", tag="test.parts").result_rows
    assert [(rows, kind) for rows, kind, _ in parts] == [(200, "Compact"), (600, "Wide")]
    assert 10 * 2**20 < parts[0][2] < 32 * 2**20 < parts[1][2]
    assert store.scalar("SELECT sum(length(SpanAttributes['blob'])) FROM otel_traces", tag="test.parts") == 800 * 60_000
