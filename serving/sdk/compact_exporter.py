"""An OTLP/HTTP span exporter that serialises with the serving tier's own encoder
(:func:`serving.otlp_encoding.encode_spans_bytes`: the same bytes as the OTel exporter's, about 4x less
CPU per span). The gateway uses it (``make_tracer_provider(..., compact_encoding=True)``).
"""

from __future__ import annotations

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from serving.otlp_encoding import encode_spans_bytes


class CompactOTLPSpanExporter(OTLPSpanExporter):
    """OTLPSpanExporter (OTLP/HTTP protobuf) that serialises with :func:`encode_spans_bytes`;
    transport, retries and limits are the parent's. Falls back to the parent's export when its
    internals (OTel SDK versions) are not the expected ones."""

    def export(self, spans) -> SpanExportResult:
        client, metrics = getattr(self, "_client", None), getattr(self, "_metrics", None)
        if self._shutdown or client is None or metrics is None or not hasattr(client, "export"):
            return super().export(spans)
        with metrics.export_operation(len(spans)) as result:
            try:
                data = encode_spans_bytes(spans)
            except Exception as error:  # noqa: BLE001 - as the parent: a bad batch is dropped, not raised
                result.error = error
                return SpanExportResult.FAILURE
            if self._max_request_size is not None and len(data) > self._max_request_size:
                return super().export(spans)  # the parent logs and reports the oversized batch
            answer = client.export(data)
            if not answer.success:
                result.error = answer.error
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS
