"""The OTLP/HTTP receiver: ``POST /v1/traces``, ``POST /v1/metrics``, ``GET /health``, ``GET /metrics``.

Position: collectors -> schema. Interface (used by ``infercost collector`` / ``infercost up`` and
by the alerts area):

``ReceiverConfig``
    dataclass of plain values (host, port, ingest_token, max_body_bytes, max_attribute_bytes,
    batch_max_rows, batch_max_seconds, batch_cap_rows, batch_cap_bytes, queue_max_rows, spool_dir,
    spool_max_bytes, retry_after_s, drain_timeout_s, retention_days, max_future_skew_s); every
    field documents its default.
``Receiver(config, store, sink=None)``
    ``.start()`` serves with uvicorn in a background thread and returns once listening
    (``.port`` is the bound port, also when 0 was asked); ``.stop()`` stops accepting, drains
    the writer (up to ``drain_timeout_s``) and is idempotent; ``.stats`` is a
    :class:`~collectors.stats.ReceiverStats` (received, stored, rejected, spooled_bytes,
    queue_rows, newest_row_time_ns, store_available, store_reason, ...); ``.flush()`` waits until
    everything accepted is stored. ``sink`` (default: ``store``) is what the writer inserts through.
``Receiver.metrics_sink(rows)``
    the sink to give :class:`collectors.scraper.Scraper`: scraped rows are spooled and batched too.
``create_app(receiver)``
    the Starlette application, for embedding.

Answers (OTLP specification, "OTLP/HTTP Response"), in the request's encoding (protobuf or JSON):

* 200 ``Export…ServiceResponse`` — only after the accepted rows are written whole and fsync'ed in
  the spool (the writer inserts them within ``batch_max_seconds``, or retries until the store
  takes them); with ``partial_success`` (rejected count and a message naming the problems) when
  some spans / points were invalid, older than the store's retention, dated in the future, or
  truncated;
* 400 ``google.rpc.Status`` for a malformed body (undecodable, wrong JSON types, nested too deep);
  401 without the bearer token when ``ingest_token`` is set; 413 above ``max_body_bytes`` after
  decompression; 415 for other content types or encodings;
* 429 + ``Retry-After`` while ``queue_rows >= queue_max_rows`` (the store is slower than the
  load); 503 + ``Retry-After`` when the spool is full (store down for long) or cannot be written
  (disk full, I/O error) — never a 200 for data that is not on disk.

``GET /health``: 200 ``{"status": "ok" | "degraded", "reasons": [...], ...}`` — degraded while the
store is unavailable (with the reason: out_of_space, read_only, unreachable ...), the spool cannot
be written, the writer is not running, or records wait in quarantine. Full semantics:
docs/reliability.md.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import uvicorn
from google.protobuf import json_format
from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceResponse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from collectors import otlp_common as common
from collectors.otlp_metrics import prepare_metrics
from collectors.otlp_traces import prepare_traces
from collectors.otlp_metrics import MetricRows
from collectors.spool import KIND_METRIC_ROWS, KIND_METRICS, KIND_TRACES, Spool, SpoolFull
from collectors.stats import ReceiverCollector, ReceiverStats
from collectors.writer import BATCH_CAP_BYTES, BatchWriter
from schema.redact import bearer_matches, redact

log = logging.getLogger(__name__)

_GRPC_CODE = {400: code_pb2.INVALID_ARGUMENT, 401: code_pb2.UNAUTHENTICATED, 413: code_pb2.INVALID_ARGUMENT,
              415: code_pb2.INVALID_ARGUMENT, 429: code_pb2.RESOURCE_EXHAUSTED, 503: code_pb2.UNAVAILABLE}


@dataclass
class ReceiverConfig:
    """Receiver settings (plain values; ``infercost.settings`` maps the environment onto them)."""

    host: str = "127.0.0.1"  # loopback by default: expose deliberately
    port: int = 4318  # OTLP/HTTP default port; 0 = any free port
    ingest_token: str = ""  # when set, /v1/* require "Authorization: Bearer <token>"
    max_body_bytes: int = common.MAX_BODY_BYTES  # after decompression (OTLP spec: 64 MiB)
    max_attribute_bytes: int = common.MAX_ATTRIBUTE_VALUE_BYTES  # longer values are truncated
    keep_content: bool = False  # keep prompts and completions on spans (collectors/content.py)
    batch_max_rows: int = 5000  # writer inserts when this many rows wait ...
    batch_max_seconds: float = 1.0  # ... or when the oldest has waited this long
    batch_cap_rows: int = 100_000  # largest single insert under load
    batch_cap_bytes: int = BATCH_CAP_BYTES  # ... and its largest OTLP input, bytes
    inserts_in_flight: int = 1  # inserts run side by side under sustained load (2: both cores, ~+100 MB peak)
    queue_max_rows: int = 500_000  # accepted-not-stored rows beyond which the receiver answers 429
    spool_dir: Path = field(default_factory=lambda: Path(".infercost/spool"))
    spool_max_bytes: int = 1024 * 1024 * 1024  # spool full -> 503
    retry_after_s: int = 2  # Retry-After of 429/503 answers, seconds
    drain_timeout_s: float = 30.0  # how long stop() keeps inserting what is spooled
    retention_days: int | None = None  # None: the TTL of the store's otel_traces (read at start), else 30
    max_future_skew_s: float = 3600.0  # spans / points dated further ahead than this are rejected


class Receiver:
    """The OTLP/HTTP receiver with its spool and batching writer (see module doc)."""

    def __init__(self, config: ReceiverConfig, store, sink=None):
        self.config = config
        self.store = store
        self._stats = ReceiverStats()
        self.spool = Spool(config.spool_dir, config.spool_max_bytes)
        self.writer = BatchWriter(self.spool, sink if sink is not None else store, self._stats,
                                  batch_max_rows=config.batch_max_rows, batch_max_seconds=config.batch_max_seconds,
                                  batch_cap_rows=config.batch_cap_rows, batch_cap_bytes=config.batch_cap_bytes,
                                  inserts_in_flight=config.inserts_in_flight)
        self.health_hooks: list = []  # callables returning '' or a reason /health reports as degraded
        self.on_stop: list = []  # callables run by stop() first (e.g. a disk guard)
        self.retention_days = config.retention_days or 30
        self._retention_known = config.retention_days is not None
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(ReceiverCollector(lambda: self.stats))
        self.app = create_app(self)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._stopped = False
        self.port = config.port

    @property
    def stats(self) -> ReceiverStats:
        """The live stats, gauges refreshed from the spool (a copy: safe to keep)."""
        s = self._stats
        s.queue_rows = self.spool.pending_rows
        s.spooled_bytes = self.spool.pending_bytes
        s.spool_write_errors = self.spool.write_errors
        s.spool_skipped_bytes = self.spool.skipped_bytes
        s.spool_cursor_error = self.spool.cursor_error
        s.writer_alive = self.writer.alive or self._thread is None
        return replace(s, requests=dict(s.requests))

    def bounds(self) -> common.TimeBounds:
        """Span / point times accepted now: the store's retention back, ``max_future_skew_s`` ahead."""
        if not self._retention_known and self._stats.store_available:
            self._learn_retention()
        return common.TimeBounds.around(time.time_ns(), self.retention_days, self.config.max_future_skew_s)

    def _learn_retention(self) -> None:
        """Read the retention from the store's otel_traces TTL (what it would drop at insert); keep the
        default when the store cannot say (down at start: asked again with the next request)."""
        from schema.migrate import table_retention_days
        from schema.store import StoreError

        now = time.monotonic()
        if now < getattr(self, "_retention_retry_at", 0.0):
            return
        self._retention_retry_at = now + 30.0
        try:
            days = table_retention_days(self.store)
        except (StoreError, OSError, AttributeError) as exc:
            log.info("retention not read from the store yet (%s); using %d days", exc, self.retention_days)
            if isinstance(exc, StoreError) and self._stats.inserts == 0:
                # the store cannot answer now: say so from the start, not only after the first insert fails
                self._stats.store_available = False
                self._stats.store_reason = exc.reason or "unknown"
                self._stats.last_error = redact(str(exc))
            return
        if days:
            self.retention_days = days
        self._retention_known = True

    def start(self, timeout_s: float = 15.0) -> "Receiver":
        """Start the writer (which replays anything spooled) and the HTTP server; return once listening.

        Raises RuntimeError if the server does not come up within ``timeout_s`` (e.g. port in use).
        """
        if not self._retention_known:
            self._learn_retention()
        self.writer.start()
        config = uvicorn.Config(self.app, host=self.config.host, port=self.config.port, log_level="warning",
                                access_log=False, lifespan="off", timeout_graceful_shutdown=5)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="infercost-receiver-http", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.writer.stop(0)
                raise RuntimeError(f"OTLP receiver did not start on {self.config.host}:{self.config.port}")
            time.sleep(0.01)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        log.info("OTLP/HTTP receiver listening on http://%s:%d", self.config.host, self.port)
        return self

    @property
    def url(self) -> str:
        return f"http://{self.config.host}:{self.port}"

    def metrics_sink(self, rows: MetricRows) -> None:
        """Sink for :class:`collectors.scraper.Scraper`: scraped rows go through the spool and the writer.

        Raises SpoolFull when the spool is full (the scraper logs it; the next scrape carries the
        cumulative counters again).
        """
        if not len(rows):
            return
        payload = json.dumps({"gauge": rows.gauge, "sum": rows.sum, "histogram": rows.histogram}).encode()
        self.spool.append(KIND_METRIC_ROWS, payload, len(rows), rows.newest_ns)
        self._stats.metric_points_received += len(rows)
        self.writer.notify()

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until everything accepted is in the store; True if so within ``timeout_s``."""
        return self.writer.flush(timeout_s)

    def stop(self) -> None:
        """Stop serving, drain the writer (up to ``drain_timeout_s``), close the spool. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        for hook in self.on_stop:
            try:
                hook()
            except Exception:  # noqa: BLE001 - stopping must go on
                log.exception("stop hook failed")
        if self._server is not None:
            self._server.should_exit = True
            if self._thread is not None:
                self._thread.join(timeout=10)
        self.writer.stop(self.config.drain_timeout_s)
        self.spool.close()

    # --- request handling (called by the Starlette routes) -------------------------------------
    def _backpressure(self) -> tuple[int, str] | None:
        if self._stats.store_available and self.spool.pending_rows >= self.config.queue_max_rows:
            return 429, (f"write queue full: {self.spool.pending_rows} rows waiting for the store "
                         f"(limit {self.config.queue_max_rows}); retry later")
        return None

    def _spool(self, kind: int, payload: bytes, rows: int, newest_ns: int,
               span_ids: bytes | None = None) -> tuple[int, str] | None:
        if self.config.inserts_in_flight < 2:
            span_ids = None  # only the side-by-side split checks them: not kept in memory otherwise
        try:
            self.spool.append(kind, payload, rows, newest_ns, span_ids)
        except SpoolFull as exc:
            why = f"store unavailable ({self._stats.store_reason}) and " if not self._stats.store_available else ""
            return 503, f"{why}spool full ({exc}); retry later"
        except OSError as exc:  # SpoolWriteError or any other disk error: nothing was accepted
            self._stats.spool_last_write_error = f"{exc.strerror or exc}"
            log.error("spool write failed, answering 503: %s", exc)
            return 503, f"spool write failed ({exc.strerror or exc}); retry later"
        if self._stats.spool_last_write_error:
            log.info("spool writable again")
            self._stats.spool_last_write_error = ""
        self.writer.notify()
        return None


def _media(request: Request) -> str:
    return common.media_type(request.headers.get("content-type"))


def _status_response(status: int, message: str, media: str, retry_after: int | None = None) -> Response:
    body = status_pb2.Status(code=_GRPC_CODE.get(status, code_pb2.UNKNOWN), message=message)
    headers = {"Retry-After": str(retry_after)} if retry_after else None
    if media == common.PROTOBUF:
        return Response(body.SerializeToString(), status_code=status, media_type=common.PROTOBUF, headers=headers)
    return JSONResponse(json_format.MessageToDict(body), status_code=status, headers=headers)


def _ok_response(response, media: str) -> Response:
    if media == common.PROTOBUF:
        return Response(response.SerializeToString(), status_code=200, media_type=common.PROTOBUF)
    return JSONResponse(json_format.MessageToDict(response), status_code=200)


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise common.BodyTooLarge(f"request body of {declared} bytes exceeds the limit of {limit} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise common.BodyTooLarge(f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def create_app(receiver: Receiver) -> Starlette:
    """The Starlette app serving ``receiver`` (routes in the module doc)."""
    config = receiver.config
    stats = receiver._stats

    async def export(request: Request, signal: str) -> Response:
        path = request.url.path
        media = common.JSON if "json" in (request.headers.get("content-type") or "") else common.PROTOBUF
        try:
            if config.ingest_token:
                if not bearer_matches(request.headers.get("authorization"), config.ingest_token):
                    stats.count_request(path, 401)
                    return _status_response(401, "missing or wrong bearer token (Authorization: Bearer <token>)", media)
            media = _media(request)
            raw = await _read_body(request, config.max_body_bytes)
            encoding = request.headers.get("content-encoding")
            if signal == "traces":
                prepared = await run_in_threadpool(_prepare, prepare_traces, raw, encoding, media, receiver)
            else:
                prepared = await run_in_threadpool(_prepare, prepare_metrics, raw, encoding, media, receiver)
        except common.OTLPRequestError as exc:
            stats.count_request(path, exc.status)
            return _status_response(exc.status, str(exc), media)
        except ClientDisconnect:
            stats.count_request(path, 499)  # the client left mid-body: nothing accepted, nobody to answer
            return Response(status_code=400)
        except Exception as exc:  # noqa: BLE001 - a body our decoder chokes on is still the body's problem
            log.exception("unexpected error decoding a %s request; answered 400", signal)
            stats.count_request(path, 400)
            return _status_response(400, f"malformed OTLP {signal} request ({type(exc).__name__}: {exc})"[:1000], media)
        if prepared.accepted:
            refused = receiver._backpressure()
            if refused is None:
                kind = KIND_TRACES if signal == "traces" else KIND_METRICS
                refused = await run_in_threadpool(receiver._spool, kind, prepared.payload, prepared.accepted,
                                                  prepared.newest_ns, getattr(prepared, "span_ids", None))
            if refused is not None:
                status, message = refused
                if signal == "traces":
                    stats.throttled += prepared.accepted
                stats.count_request(path, status)
                return _status_response(status, message, media, retry_after=config.retry_after_s)
        # counted once the request is answered 200 (a throttled request is counted when retried)
        if signal == "traces":
            stats.received += prepared.accepted + prepared.rejected
            stats.rejected += prepared.rejected
            stats.truncated_attributes += prepared.truncated
            stats.content_dropped += prepared.content_dropped
        else:
            stats.metric_points_received += prepared.accepted + prepared.rejected
            stats.metric_points_rejected += prepared.rejected
        if signal == "traces":
            response = ExportTraceServiceResponse()
            if prepared.rejected or prepared.message:
                response.partial_success.rejected_spans = prepared.rejected
                response.partial_success.error_message = prepared.message
        else:
            response = ExportMetricsServiceResponse()
            if prepared.rejected or prepared.message:
                response.partial_success.rejected_data_points = prepared.rejected
                response.partial_success.error_message = prepared.message
        stats.count_request(path, 200)
        return _ok_response(response, media)

    async def traces(request: Request) -> Response:
        return await export(request, "traces")

    async def metrics_export(request: Request) -> Response:
        return await export(request, "metrics")

    async def health(request: Request) -> Response:
        s = receiver.stats
        status, reasons = s.health()
        extra = [r for r in (hook() for hook in receiver.health_hooks) if r]
        if extra:
            status, reasons = "degraded", reasons + extra
        return JSONResponse({"status": status, "reasons": [redact(r) for r in reasons],
                             "store_available": s.store_available, "store_reason": s.store_reason,
                             "last_error": redact(s.last_error), "queue_rows": s.queue_rows,
                             "spool_bytes": s.spooled_bytes, "stored": s.stored,
                             "quarantine_rows": s.quarantine_rows, "writer_restarts": s.writer_restarts,
                             "retention_days": receiver.retention_days,
                             "newest_row_lag_seconds": round(s.newest_row_lag_seconds(), 3)})

    async def prometheus(request: Request) -> Response:
        return Response(generate_latest(receiver.registry), media_type=CONTENT_TYPE_LATEST)

    routes = [
        Route("/v1/traces", traces, methods=["POST"]),
        Route("/v1/metrics", metrics_export, methods=["POST"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", prometheus, methods=["GET"]),
    ]
    return Starlette(routes=routes)


def _prepare(prepare_fn, raw: bytes, encoding: str | None, media: str, receiver: Receiver):
    config = receiver.config
    body = common.decompress(raw, encoding, config.max_body_bytes)
    if prepare_fn is prepare_traces:
        return prepare_traces(body, media, config.max_attribute_bytes, receiver.bounds(), config.keep_content)
    return prepare_fn(body, media, receiver.bounds())
