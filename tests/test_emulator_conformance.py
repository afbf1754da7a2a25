"""Issue 13 part 4: the emulator against real vLLM 0.32 (captured in tests/fixtures/vllm-0.32-cpu-captured/).

The diff is computed, not hand-listed: metric families (names, types, label keys, enum label values,
fixed bucket bounds, order), the ``llm_request`` span (attribute names and OTLP value types, scope,
resource keys, kind) of the live replicas and of the virtual-time simulator. Every difference found
must be listed with its reason in serving/emulator/CONFORMANCE.md, and every entry listed there
must still be a difference (a fixed one is removed from the file).
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from serving.emulator.live import start_replicas
from tests.vllm_captured import captured_metrics_text, captured_span_dicts

ROOT = Path(__file__).resolve().parents[1]
CONFORMANCE_MD = ROOT / "serving" / "emulator" / "CONFORMANCE.md"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
ENUM_LABELS = {"finished_reason", "source", "reason", "sleep_state"}
# Bucket bounds built from max_model_len (1-2-5 up to it): compared with the capture's 1024 context.
CONTEXT = 1024


def declared_differences() -> set[str]:
    """Keys of the table in CONFORMANCE.md: rows ``| `key` | reason |``."""
    keys = set()
    for line in CONFORMANCE_MD.read_text().splitlines():
        m = re.match(r"\|\s*`([^`]+)`\s*\|\s*(\S.*?)\s*\|\s*$", line)
        if m:
            keys.add(m.group(1))
    return keys


def family_shapes(text: str) -> dict:
    """``{family: (type, label keys, {enum label: values}, bucket bounds)}`` of a Prometheus page."""
    out = {}
    for f in text_string_to_metric_families(text):
        keys = frozenset(k for s in f.samples for k in s.labels if k != "le")
        enums = {k: frozenset(s.labels[k] for s in f.samples if k in s.labels) for k in keys & ENUM_LABELS}
        bounds = tuple(s.labels["le"] for s in f.samples if s.name.endswith("_bucket")
                       and all(s.labels.get(k) == v for k, v in f.samples[0].labels.items() if k not in ("le",)))
        out[f.name] = (f.type, keys, enums, bounds)
    return out


def metric_differences(emulated: str, real: str) -> set[str]:
    emu, ref = family_shapes(emulated), family_shapes(real)
    diffs = {f"metric-missing:{n}" for n in ref.keys() - emu.keys()}
    diffs |= {f"metric-extra:{n}" for n in emu.keys() - ref.keys()}
    for name in emu.keys() & ref.keys():
        (et, ek, ee, eb), (rt, rk, re_, rb) = emu[name], ref[name]
        if et != rt:
            diffs.add(f"metric-type:{name}")
        if ek != rk:
            diffs.add(f"metric-labels:{name}")
        if ee != re_:
            diffs.add(f"metric-label-values:{name}")
        if eb != rb:
            diffs.add(f"metric-buckets:{name}")
    order = [n for n in ref if n.startswith("vllm:") and n in emu]
    if order != [n for n in emu if n in order]:
        diffs.add("metric-order:vllm")
    return diffs


def _value_type(v) -> str:
    return {bool: "bool_value", int: "int_value", float: "double_value", str: "string_value"}[type(v)]


def span_differences(name: str, emu_attrs: dict, emu_scope: str, emu_kind: int, emu_resource: dict, real: dict) -> set:
    diffs = set()
    real_types = {k: next(iter(v)) for k, v in real["attributes"].items()}
    emu_types = {k: _value_type(v) for k, v in emu_attrs.items()}
    diffs |= {f"span-missing:{name}:{k}" for k in real_types.keys() - emu_types.keys()}
    diffs |= {f"span-extra:{name}:{k}" for k in emu_types.keys() - real_types.keys()}
    diffs |= {f"span-type:{name}:{k}" for k in real_types.keys() & emu_types.keys() if real_types[k] != emu_types[k]}
    if emu_scope != real["scope"]:
        diffs.add(f"span-scope:{name}")
    if emu_kind != real["kind"]:
        diffs.add(f"span-kind:{name}")
    real_res = {k: next(iter(v)) for k, v in real["resource"].items()}
    emu_res = {k: _value_type(v) for k, v in emu_resource.items()}
    diffs |= {f"resource-missing:{k}" for k in real_res.keys() - emu_res.keys()}
    diffs |= {f"resource-extra:{k}" for k in emu_res.keys() - real_res.keys()}
    diffs |= {f"resource-type:{k}" for k in real_res.keys() & emu_res.keys() if real_res[k] != emu_res[k]}
    return diffs


@pytest.fixture(scope="module")
def live():
    """One live replica at the capture's context length, after the capture's request kinds."""
    exporter = InMemorySpanExporter()
    fleet = start_replicas(1, "h100-llama-3.1-8b", span_exporter_factory=lambda rid: exporter,
                           profile_overrides={"max_model_len": CONTEXT})
    url = fleet[0].url + "/v1/chat/completions"

    def chat(rid, **body):
        r = httpx.post(url, headers={"x-request-id": rid, "traceparent": "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"},
                       json={"model": MODEL, "messages": [{"role": "user", "content": "a b c"}], **body}, timeout=30)
        assert r.status_code == 200, r.text
        return r

    chat("nonstream_length", max_tokens=32, temperature=1.0, ignore_eos=True)
    chat("stream_stop", max_tokens=200, temperature=1.0, top_p=0.9, stream=True, emulator_output_tokens=4)
    chat("n2_stream", max_tokens=24, n=2, stream=True, ignore_eos=True)
    chat("x_request_id_only", max_tokens=4, temperature=0, ignore_eos=True)
    text = httpx.get(fleet[0].url + "/metrics").text
    fleet[0].server.tracer_provider.force_flush()
    spans = exporter.get_finished_spans()
    fleet.stop()
    return text, spans


def test_emulator_matches_real_vllm_or_says_why(live):
    text, spans = live
    found = metric_differences(text, captured_metrics_text())
    real_llm, _startup = captured_span_dicts()
    by_case = {}
    for s in spans:
        case = s.attributes["gen_ai.request.id"].split("-", 1)[1]
        by_case.setdefault(case, s)
    assert set(by_case) == set(real_llm)
    for case, real in real_llm.items():
        s = by_case[case]
        otlp_kind = s.kind.value + 1  # the SDK's SpanKind counts from INTERNAL=0, OTLP's from UNSPECIFIED=0
        found |= span_differences(case, dict(s.attributes), s.instrumentation_scope.name, otlp_kind,
                                  dict(s.resource.attributes), real)
    found.add("startup-spans")  # the emulator has no process start-up to trace (checked below)
    assert not [s for s in spans if s.name != "llm_request"]
    declared = declared_differences()
    assert found - declared == set(), "undeclared differences from real vLLM 0.32: add them to CONFORMANCE.md"
    assert declared - found == set(), "CONFORMANCE.md lists differences that are gone: remove them"


def test_n2_spans_share_request_id_and_parent(live):
    _, spans = live
    n2 = [s for s in spans if s.attributes["gen_ai.request.id"] == "chatcmpl-n2_stream"]
    assert len(n2) == 2 and len({s.parent.span_id for s in n2}) == 1
    assert all(s.attributes["gen_ai.request.n"] == 1 and s.attributes["gen_ai.usage.completion_tokens"] == 24
               for s in n2)


def test_virtual_time_engine_spans_have_the_live_shape():
    from serving.emulator.fleet_sim import ReplicaSpec, simulate
    from serving.emulator.otlp import MemorySink, span_attrs
    from serving.plans import CallPlan, StepPlan, TaskPlan

    plan = TaskPlan("t1", "chat", "acme", 0.0, (StepPlan("s", (CallPlan(100, 8, max_tokens=8),)),))
    sink = MemorySink()
    simulate([plan], [ReplicaSpec("r0")], sink=sink, start_time_ns=1_796_000_000_000_000_000)
    ((res, span),) = [(r, s) for r, s in sink.spans() if s.name == "llm_request"]
    scope = next(ss.scope.name for req in sink.traces for rs in req.resource_spans for ss in rs.scope_spans
                 if any(x.name == "llm_request" for x in ss.spans))
    real = captured_span_dicts()[0]["nonstream_length"]
    diffs = span_differences("virtual", span_attrs(span), scope, span.kind, res, real)
    # the same differences as the live replicas' spans, no others
    live_declared = {d.replace(":nonstream_length", ":virtual") for d in declared_differences()
                     if d.startswith("resource-") or d.endswith(":nonstream_length")}
    assert diffs == live_declared
