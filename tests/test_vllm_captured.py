"""Issue 13 part 2: the spans and /metrics page of a REAL vLLM 0.32.0 (CPU) server through the product.

Fixtures are the capture itself (tests/vllm_captured.py reads tests/fixtures/vllm-0.32-cpu-captured/
in place), rebuilt as the OTLP request vLLM sent (typed attribute values) and the page it served.
Expected values are copied from the capture, not recomputed by the code under test.
"""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from collectors.ingest import ingest_traces, insert_metric_rows
from collectors.otlp_traces import prepare_traces
from collectors.scraper import ScrapeTarget, parse_metrics_text
from tests.conftest import emptied
from tests.vllm_captured import captured_metrics_text, captured_span_dicts, captured_spans

SCRAPE_NS = 1_796_079_800_000_000_000


@pytest.fixture(scope="module")
def loaded(module_store):
    store = emptied(module_store, "otel_traces", "llm_calls", "otel_metrics_gauge", "otel_metrics_sum",
                    "otel_metrics_histogram")
    result = ingest_traces(store, captured_spans())
    rows = parse_metrics_text(captured_metrics_text(), ScrapeTarget("http://replica-0:8000/metrics", "replica-0",
                                                                    "CPU", 1, "tiny-llama"), SCRAPE_NS)
    insert_metric_rows(store, rows)
    return store, result


def q(store, sql, params=None):
    r = store.query(sql, params or {}, tag="test.captured")
    return [dict(zip(r.column_names, row)) for row in r.result_rows]


def test_every_captured_span_is_accepted(loaded):
    store, result = loaded
    llm, startup = captured_span_dicts()
    assert (result.accepted, result.rejected) == (len(llm) + len(startup), 0)
    assert prepare_traces(captured_spans().SerializeToString()).rejected == 0


def test_llm_request_span_row_keeps_vllm_names_and_values(loaded):
    store, _ = loaded
    (row,) = q(store, "SELECT * FROM otel_traces WHERE SpanId = 'f94a69056befafc0'")
    assert (row["SpanName"], row["SpanKind"], row["ScopeName"], row["ServiceName"], row["StatusCode"]) == \
        ("llm_request", "Server", "vllm.tracing.otel", "vllm", "Unset")
    assert row["ParentSpanId"] == "5df4d610c69dc64c" and row["TraceId"] == "18a6564a8eee6f4976570cf159a0be9a"
    assert row["Duration"] == 1796079007345412864 - 1796079006542173696
    a = row["SpanAttributes"]
    # int_value -> decimal string; double_value -> ClickHouse's shortest round-trip form
    assert (a["gen_ai.usage.prompt_tokens"], a["gen_ai.usage.completion_tokens"], a["gen_ai.request.max_tokens"],
            a["gen_ai.request.n"]) == ("21", "32", "32", "1")
    assert (a["gen_ai.request.top_p"], a["gen_ai.request.temperature"]) == ("1", "1")
    assert float(a["gen_ai.latency.time_to_first_token"]) == 0.04598212242126465
    assert float(a["gen_ai.latency.time_in_queue"]) == 2.2671000124319107e-05
    assert a["gen_ai.request.id"] == "chatcmpl-ev-nonstream_length-0-61ea8d"
    assert not {"gen_ai.response.finish_reasons", "gen_ai.request.model", "gen_ai.operation.name"} & set(a)
    res = row["ResourceAttributes"]
    assert (res["vllm.process_id"], res["vllm.instrumenting_module_name"], res["service.instance.id"],
            res["gpu.type"], res["gpu.count"]) == ("26381", "vllm.llm_engine", "replica-0", "CPU", "1")


def test_temperature_absent_when_the_request_had_none(loaded):
    store, _ = loaded
    (a,) = [r["a"] for r in q(store, "SELECT SpanAttributes AS a FROM otel_traces WHERE SpanId = 'd71bb56fa6475845'")]
    assert "gen_ai.request.temperature" not in a and a["gen_ai.request.top_p"] == "1"


def test_llm_calls_maps_the_engine_spans(loaded):
    store, _ = loaded
    rows = {r["span_id"]: r for r in q(store, "SELECT * FROM llm_calls")}
    assert set(rows) == {"f94a69056befafc0", "fe954e21bcefd579", "0532014924df47ad", "d71bb56fa6475845"}
    r = rows["f94a69056befafc0"]
    assert (r["call_source"], r["replica"], r["gpu_type"], r["request_id"]) == \
        ("engine", "replica-0", "CPU", "chatcmpl-ev-nonstream_length-0-61ea8d")
    assert (r["prompt_tokens"], r["output_tokens"], r["cached_tokens"]) == (21, 32, None)
    assert (r["ttft_s"], r["e2e_s"], r["queue_s"]) == (0.04598212242126465, 0.8025984764099121, 2.2671000124319107e-05)
    assert (r["prefill_s"], r["decode_s"], r["inference_s"]) == \
        (0.02388390199985224, 0.7570004910000989, 0.7808843929999512)
    # vLLM 0.32 carries no finish reason and no model: the engine row alone cannot know them
    # (issue 13 part 3 recovers them from the gateway/client rows of the same call).
    assert {x["finish_reason"] for x in rows.values()} == {""} and {x["model"] for x in rows.values()} == {""}
    assert {x["status"] for x in rows.values()} == {"unset"} and {x["partial"] for x in rows.values()} == {0}
    assert (rows["0532014924df47ad"]["prompt_tokens"], rows["0532014924df47ad"]["output_tokens"]) == (19, 24)


def test_startup_spans_are_stored_but_are_not_calls(loaded):
    store, _ = loaded
    rows = q(store, """SELECT SpanName, SpanKind, ScopeName, ResourceAttributes['vllm.process_kind'] AS kind,
                              ResourceAttributes['vllm.process_id'] AS pid
                       FROM otel_traces WHERE SpanName != 'llm_request' ORDER BY SpanName""")
    assert [r["SpanName"] for r in rows] == ["Executor init", "Initialize model", "Worker init"]
    assert {r["SpanKind"] for r in rows} == {"Internal"}
    assert {(r["kind"], r["pid"]) for r in rows} == {("engine_core", "26783"), ("worker", "26937")}
    assert q(store, "SELECT count() AS n FROM llm_calls WHERE span_name != 'llm_request'") == [{"n": 0}]


def _families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text) if f.name.startswith("vllm:")
            and not f.name.endswith("_created")}


def test_every_metric_family_lands_in_its_table(loaded):
    store, _ = loaded
    fams = _families(captured_metrics_text())
    table = {"gauge": "otel_metrics_gauge", "counter": "otel_metrics_sum", "histogram": "otel_metrics_histogram"}
    for name, f in fams.items():
        got = q(store, f"SELECT count() AS n, groupUniqArray(arraySort(mapKeys(Attributes))) AS keys "
                       f"FROM {table[f.type]} WHERE MetricName = {{m:String}}", {"m": name})[0]
        series = {tuple(sorted((k, v) for k, v in s.labels.items() if k != "le")) for s in f.samples}
        assert got["n"] == len(series), name
        want = {tuple(sorted(k for k in s.labels if k != "le")) for s in f.samples}
        assert {tuple(k) for k in got["keys"]} == want, name
    assert len(fams) == 39


def test_counter_values_start_times_and_labels(loaded):
    store, _ = loaded
    rows = {r["reason"]: r for r in q(store, """
        SELECT Attributes['finished_reason'] AS reason, Value, StartTimeUnix, IsMonotonic, AggregationTemporality
        FROM otel_metrics_sum WHERE MetricName = 'vllm:request_success'""")}
    assert {k: v["Value"] for k, v in rows.items()} == {"stop": 15.0, "length": 136.0, "abort": 0.0, "error": 0.0,
                                                       "repetition": 0.0}
    assert rows["stop"]["IsMonotonic"] and rows["stop"]["AggregationTemporality"] == 2
    assert abs(rows["stop"]["StartTimeUnix"].timestamp() - 1796079705.588596) < 1e-3  # from the _created sample
    adm = q(store, """SELECT Attributes AS a, Value FROM otel_metrics_sum WHERE MetricName = 'vllm:admission_rejections'
                      ORDER BY Attributes['reason']""")
    assert [r["a"] for r in adm] == [{"model_name": "tiny-llama", "reason": "max_num_queued_reqs"},
                                     {"model_name": "tiny-llama", "reason": "max_num_queued_tokens"}]  # no engine
    cached = q(store, "SELECT Value FROM otel_metrics_sum WHERE MetricName = 'vllm:prompt_tokens_cached'")
    hits = q(store, "SELECT Value FROM otel_metrics_sum WHERE MetricName = 'vllm:prefix_cache_hits'")
    assert cached == hits == [{"Value": 2688.0}]
    by_source = {r["s"]: r["Value"] for r in q(store, """SELECT Attributes['source'] AS s, Value FROM otel_metrics_sum
                                                       WHERE MetricName = 'vllm:prompt_tokens_by_source'""")}
    prompt = q(store, "SELECT Value FROM otel_metrics_sum WHERE MetricName = 'vllm:prompt_tokens'")[0]["Value"]
    assert by_source["local_compute"] + by_source["local_cache_hit"] == prompt == 7513.0
    waiting = q(store, """SELECT Attributes['reason'] AS r FROM otel_metrics_gauge
                         WHERE MetricName = 'vllm:num_requests_waiting_by_reason' ORDER BY r""")
    assert [w["r"] for w in waiting] == ["capacity", "deferred"]


def test_histogram_buckets_of_the_newer_families(loaded):
    store, _ = loaded
    rows = {r["MetricName"]: r for r in q(store, """
        SELECT MetricName, Count, Sum, BucketCounts, ExplicitBounds FROM otel_metrics_histogram
        WHERE MetricName IN ('vllm:request_num_preemptions', 'vllm:request_prefill_kv_computed_tokens',
                             'vllm:request_max_num_generation_tokens')""")}
    assert rows["vllm:request_num_preemptions"]["ExplicitBounds"] == [1, 2, 3, 4, 5, 10, 20]
    assert (rows["vllm:request_num_preemptions"]["Count"], rows["vllm:request_num_preemptions"]["Sum"]) == (151, 0.0)
    kv = rows["vllm:request_prefill_kv_computed_tokens"]
    assert kv["ExplicitBounds"] == [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]
    assert (kv["Count"], kv["Sum"], sum(kv["BucketCounts"])) == (151, 4677.0, 151)
    assert rows["vllm:request_max_num_generation_tokens"]["Count"] == 147  # once per client request (n=2: once)
