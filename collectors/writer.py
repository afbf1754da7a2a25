"""The batching writer: spool -> store, one insert per >= ``batch_max_rows`` rows or per <= ``batch_max_seconds``.

Position: collectors -> schema. One named worker thread (``infercost-writer``) wakes when the
spool holds ``batch_max_rows`` rows or its oldest record has waited ``batch_max_seconds``, reads
up to ``batch_cap_rows`` rows of one kind, inserts them in one statement
(:func:`collectors.ingest.insert_trace_payloads` / :func:`~collectors.ingest.insert_metric_rows`)
and commits the spool cursor. Under load the batches grow towards the cap, which amortises the
store's fixed per-insert cost (part creation, view planning).

Failures:

* ``StoreUnavailable``: ``stats.store_available`` turns False; the batch stays in the spool and
  is retried with back-off (0.25 s doubling to 5 s) until the store returns; the receiver keeps
  accepting into the spool meanwhile.
* ``StoreQueryError`` (the store refuses the data itself — not expected after validation): the
  batch is retried record by record; a record that still fails is written to
  ``<spool>/quarantine/`` with the error, counted in ``stats.quarantined_rows`` and logged,
  never silently dropped.

The sink is any object with the store's ``raw_insert`` / ``insert`` methods, so a test can inject
connection faults in front of a real store.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path

from google.protobuf.message import DecodeError

from collectors.ingest import insert_metric_rows, insert_trace_payloads
from collectors.otlp_metrics import MetricRows, metric_rows
from collectors.spool import KIND_METRIC_ROWS, KIND_METRICS, KIND_TRACES, Record, Spool
from collectors.stats import ReceiverStats
from schema.store import StoreQueryError, StoreUnavailable

log = logging.getLogger(__name__)

# Errors that mean "this data cannot be stored", as opposed to "the store cannot be reached".
_POISON = (StoreQueryError, ValueError, DecodeError)


class BatchWriter:
    """Moves spooled records into the store (see module doc). ``start``/``stop`` are idempotent."""

    def __init__(self, spool: Spool, sink, stats: ReceiverStats, *, batch_max_rows: int = 5000,
                 batch_max_seconds: float = 1.0, batch_cap_rows: int = 100_000):
        self.spool = spool
        self.sink = sink
        self.stats = stats
        self.batch_max_rows = batch_max_rows
        self.batch_max_seconds = batch_max_seconds
        self.batch_cap_rows = max(batch_cap_rows, batch_max_rows)
        self._wake = threading.Condition()
        self._stopping = False
        self._drain_deadline = 0.0
        self._thread: threading.Thread | None = None
        self._backoff = 0.0
        self._batch_quarantined = 0
        self._flush_requested = False

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="infercost-writer", daemon=True)
            self._thread.start()

    def notify(self) -> None:
        """Tell the writer that records were appended (wakes it early when a batch is full)."""
        if self.spool.pending_rows >= self.batch_max_rows:
            with self._wake:
                self._wake.notify()

    def stop(self, drain_timeout_s: float = 30.0) -> None:
        """Insert what is pending (for at most ``drain_timeout_s``), then stop. What is left stays spooled."""
        if self._thread is None:
            return
        with self._wake:
            self._stopping = True
            self._drain_deadline = time.monotonic() + drain_timeout_s
            self._wake.notify()
        self._thread.join()
        self._thread = None

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until the spool is empty (everything stored); True if it emptied in time."""
        deadline = time.monotonic() + timeout_s
        self._flush_requested = True  # insert now, whatever the batch timer says
        try:
            while self.spool.pending_records and time.monotonic() < deadline:
                with self._wake:
                    self._wake.notify()
                time.sleep(0.01)
        finally:
            self._flush_requested = False
        return not self.spool.pending_records

    # --- the worker ---------------------------------------------------------------------------
    def _due(self) -> bool:
        pending = self.spool.pending_records
        if not pending:
            return False
        if self._stopping or self._flush_requested or self.spool.pending_rows >= self.batch_max_rows:
            return True
        return time.monotonic() - self.spool.pending_since >= self.batch_max_seconds

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._due():
                    if self._stopping:
                        return
                    if self.spool.pending_records:
                        wait = self.batch_max_seconds - (time.monotonic() - self.spool.pending_since)
                    else:
                        wait = self.batch_max_seconds
                    self._wake.wait(max(0.005, wait))
            if self._stopping and time.monotonic() > self._drain_deadline:
                log.warning("writer stopping with %d rows still spooled (kept for the next start)",
                            self.spool.pending_rows)
                return
            try:
                batch = self.spool.read(self.batch_cap_rows)
            except OSError:
                log.exception("cannot read the spool; retrying")
                time.sleep(1.0)
                continue
            if not batch:
                time.sleep(0.01)
                continue
            if self._write(batch):
                self._account(batch)  # before the commit, so flush() never sees an empty spool early
                self.spool.commit(batch)
                self._backoff = 0.0
            else:
                self._backoff = min(5.0, max(0.25, self._backoff * 2))
                with self._wake:
                    wait = self._backoff
                    if self._stopping:
                        wait = min(wait, self._drain_deadline - time.monotonic())
                        if wait <= 0:
                            log.warning("store still unavailable at shutdown; %d rows stay spooled for the next start",
                                        self.spool.pending_rows)
                            return
                    self._wake.wait(wait)

    def _insert(self, batch: list[Record]) -> None:
        if batch[0].kind == KIND_TRACES:
            insert_trace_payloads(self.sink, [r.payload for r in batch], tag="writer.traces")
        elif batch[0].kind == KIND_METRICS:
            rows = MetricRows()
            for record in batch:
                rows.extend(metric_rows(record.payload))
            insert_metric_rows(self.sink, rows, tag="writer.metrics")
        elif batch[0].kind == KIND_METRIC_ROWS:
            rows = MetricRows()
            for record in batch:
                doc = json.loads(record.payload)
                rows.extend(MetricRows(gauge=doc["gauge"], sum=doc["sum"], histogram=doc["histogram"]))
            insert_metric_rows(self.sink, rows, tag="writer.scraped")
        else:
            raise StoreQueryError(f"unknown spool record kind {batch[0].kind}", "writer")

    def _write(self, batch: list[Record]) -> bool:
        """Insert a batch; True when it is stored (or quarantined), False to retry later."""
        start = time.perf_counter()
        self._batch_quarantined = 0
        try:
            self._insert(batch)
        except StoreUnavailable as exc:
            if self.stats.store_available:
                log.warning("store unavailable, spooling: %s", exc)
            self.stats.store_available = False
            self.stats.last_error = str(exc)
            return False
        except Exception as exc:  # noqa: BLE001 - anything else: keep the data, keep the thread, retry later
            if not isinstance(exc, _POISON):
                log.exception("unexpected error inserting a batch; it stays spooled and is retried")
                self.stats.store_available = False
                self.stats.last_error = f"{type(exc).__name__}: {exc}"
                return False
            # the store refused the data itself, or a payload no longer decodes: isolate the culprit
            log.error("store refused a batch of %d records (%s); retrying one by one", len(batch), exc)
            for record in batch:
                try:
                    self._insert([record])
                except StoreUnavailable as exc2:
                    self.stats.store_available = False
                    self.stats.last_error = str(exc2)
                    return False  # partly inserted: at-least-once, the rest is retried later
                except _POISON as exc2:
                    self._quarantine(record, str(exc2))
        else:
            if not self.stats.store_available:
                log.info("store is back; spool draining")
            self.stats.store_available = True
        self.stats.inserts += 1
        self.stats.insert_seconds += time.perf_counter() - start
        return True

    def _quarantine(self, record: Record, error: str) -> None:
        folder = Path(self.spool.directory) / "quarantine"
        folder.mkdir(parents=True, exist_ok=True)
        stem = folder / f"{time.time_ns()}-{record.kind}"
        stem.with_suffix(".bin").write_bytes(record.payload)
        stem.with_suffix(".txt").write_text(error + "\n")
        self.stats.quarantined_rows += record.rows
        self._batch_quarantined += record.rows
        log.error("quarantined %d rows to %s: %s", record.rows, stem, error)

    def _account(self, batch: list[Record]) -> None:
        rows = sum(r.rows for r in batch) - self._batch_quarantined
        newest = max(r.newest_ns for r in batch)
        if batch[0].kind == KIND_TRACES:
            self.stats.stored += rows
        else:
            self.stats.metric_points_stored += rows
        if newest > self.stats.newest_row_time_ns:
            self.stats.newest_row_time_ns = newest
