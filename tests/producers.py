"""Telemetry from the real producers, landed through the public path (tests import these; no tests here).

* :class:`Rig`: the OTLP/HTTP receiver (port 0) writing into a store, scripted upstreams
  (:mod:`serving.gateway.stub`), the real gateway and the real task SDK exporting to that receiver.
* :func:`ingest_sdk_spans`: spans made with the OpenTelemetry SDK, encoded by its own OTLP encoder
  and stored by :func:`collectors.ingest.ingest_traces` (the receiver's insert path).
"""

from __future__ import annotations

import socket
import time
import uuid

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
