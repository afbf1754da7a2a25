"""collectors: telemetry in, rows out. Position: serving -> **collectors** -> schema -> app/alerts.

Modules (each documents its interface):

* ``receiver``  — OTLP/HTTP receiver (``POST /v1/traces``, ``/v1/metrics``, ``GET /health``,
  ``/metrics``): ``ReceiverConfig``, ``Receiver(config, store)``, ``create_app``.
* ``ingest``    — synchronous in-process ingest (``ingest_traces``, ``ingest_metrics``) and the
  insert functions the writer uses.
* ``scraper``   — vLLM ``/metrics`` scraper: ``ScrapeTarget``, ``Scraper``, ``parse_metrics_text``.
* ``otlp_traces`` / ``otlp_metrics`` / ``otlp_common`` / ``lenient`` — decoding and validation.
* ``spool`` / ``writer`` / ``quarantine`` — fsync'ed, checksummed write-ahead spool, the
  supervised batching writer, and records set aside as unparseable (replayable).
* ``stats``     — ``ReceiverStats`` and its one mapping to Prometheus metrics.
* ``otlp_clickhouse.proto`` — the schema ClickHouse decodes OTLP trace requests with
  (``schema/migrations/1000_baseline_spans.sql``).

Data path of a span: HTTP body -> decompress (capped) -> decode + validate (invalid spans named in
``partial_success``) -> spool (fsync) -> 200 -> writer batch -> one INSERT of protobuf bytes into
the Null table ``otlp_traces_in`` (with a deduplication token) -> decode view -> ``otlp_spans_in``
-> dedup view (drops spans already stored) -> ``otel_traces`` (-> ``llm_calls`` ...).
Reliability contract (what 200 means, each fault): ``docs/reliability.md``.
"""
