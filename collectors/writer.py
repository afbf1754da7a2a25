"""The batching writer: spool -> store, one insert per >= ``batch_max_rows`` rows or per <= ``batch_max_seconds``.

Position: collectors -> schema. One named worker thread (``infercost-writer``) wakes when the
spool holds ``batch_max_rows`` rows or its oldest record has waited ``batch_max_seconds``, reads
up to ``batch_cap_rows`` rows and ``batch_cap_bytes`` bytes of payload (OTLP protobuf) of one kind
(at least one record), inserts them in one statement
(:func:`collectors.ingest.insert_trace_payloads` / :func:`~collectors.ingest.insert_metric_rows`)
and commits the spool cursor. Under load the batches grow towards the caps, which amortises the
store's fixed per-insert cost (part creation, view planning); the byte cap bounds the embedded
store's memory for one insert, which grows with the bytes it parses (README: ingest figures).

Inserts in flight (``inserts_in_flight``, default 1, ``INFERCOST_INSERTS_IN_FLIGHT``): ClickHouse parses one
insert on one core, so with N > 1 the writer reads up to N times the caps and, when that is more
than one insert's caps (the spool has filled while the last insert ran: sustained load), splits the
batch into consecutive parts of about equal bytes, each within the caps, inserted side by side
through N clients (``sink.clone()`` for the extra ones; a sink without ``clone`` inserts the parts
one after the other) — both cores busy. A batch within the caps stays one insert: splitting it
would only add the store's fixed per-insert cost (~0.1-0.15 CPU-s on the embedded store, 2026-12).
Parts run side by side only when no span id is in two of them (the receiver hands each record's span
ids to the spool, in memory): concurrent inserts do not see each other's span keys, so a span
re-sent into two parts would be stored twice; otherwise — a span in two parts, or a record whose ids
are unknown (replayed after a restart) — the parts run one after the other, and each part's
once-only step sees the keys the previous part stored.

Every insert carries an ``insert_deduplication_token`` naming its part's spool range
(:meth:`collectors.spool.Spool.token_for`), and the batch and its split are remembered in the
spool's in-flight marker first. The batch is committed (the spool cursor moves past it) only when
every part is stored. A batch with a failed part is retried as the very same batch, split the same
way, with the same tokens — in this process, or first thing after a restart — so a part already
stored is skipped table by table and a half-done one completed without doubling anything
(migration 1000; docs/reliability.md).

Failures (classified by :mod:`schema.store_errors`):

* anything but a payload error (unreachable, timeout, out of space, read-only, permission,
  too many parts, memory limit, missing table, an unexpected exception): ``stats.store_available``
  turns False with ``stats.store_reason``; the batch stays in the spool and is retried with
  back-off (0.25 s doubling to 5 s); the receiver keeps accepting into the spool until it is full
  (then 503);
* ``StorePayloadError`` (the store says the data itself does not parse) or a payload that no longer
  decodes here: the batch is retried record by record; a record that fails alone with a payload
  error is moved to ``<spool>/quarantine/`` (``.bin`` payload + ``.json`` kind, rows, error),
  counted (``stats.quarantined_rows``, ``stats.quarantine_rows``) and logged, never dropped.
  ``infercost spool replay`` puts quarantined records back (``<spool>/requeue/``, picked up here).

The worker is supervised: an unexpected exception restarts the loop after a second
(``stats.writer_restarts``, ``stats.writer_last_error``); the spool keeps every record meanwhile.
The sink is any object with the store's ``raw_insert`` / ``insert`` methods, so a test can inject
connection faults in front of a real store.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from google.protobuf.message import DecodeError

from collectors.ingest import insert_metric_rows, insert_trace_payloads
from collectors.otlp_metrics import MetricRows, metric_rows
from collectors.quarantine import Quarantine
from collectors.spool import KIND_METRIC_ROWS, KIND_METRICS, KIND_TRACES, Record, Spool
from collectors.stats import ReceiverStats
from schema.redact import redact
from schema.store import StorePayloadError

log = logging.getLogger(__name__)

# Errors that mean "this data cannot be stored, ever" (as opposed to "not now").
_POISON = (StorePayloadError, ValueError, DecodeError)
_REQUEUE_EVERY_S = 2.0
# default byte cap of one insert: ~26k vLLM spans (644 B each); sustained load peaks <= 700 MB (README)
BATCH_CAP_BYTES = 16 * 1024 * 1024


class BatchWriter:
    """Moves spooled records into the store (see module doc). ``start``/``stop`` are idempotent."""

    def __init__(self, spool: Spool, sink, stats: ReceiverStats, *, batch_max_rows: int = 5000,
                 batch_max_seconds: float = 1.0, batch_cap_rows: int = 100_000,
                 batch_cap_bytes: int = BATCH_CAP_BYTES, inserts_in_flight: int = 1):
        self.spool = spool
        self.sink = sink
        self.stats = stats
        self.batch_max_rows = batch_max_rows
        self.batch_max_seconds = batch_max_seconds
        self.batch_cap_rows = max(batch_cap_rows, batch_max_rows)
        self.batch_cap_bytes = batch_cap_bytes
        if not 1 <= inserts_in_flight <= 4:
            raise ValueError(f"inserts_in_flight must be 1..4, got {inserts_in_flight}")
        self.inserts_in_flight = inserts_in_flight
        self._lanes: list = []  # the extra clients (sink.clone()), opened by start()
        self._pool: ThreadPoolExecutor | None = None
        self.quarantine = Quarantine(Path(spool.directory))
        self._wake = threading.Condition()
        self._stats_lock = threading.Lock()  # quarantine counters, updated from the parts' threads
        self._stopping = False
        self._drain_deadline = 0.0
        self._thread: threading.Thread | None = None
        self._backoff = 0.0
        self._flush_requested = False
        self._retry: list[list[Record]] | None = None  # a batch (its parts) whose insert failed: retried as is
        self._next_requeue = 0.0

    def start(self) -> None:
        if self._thread is None:
            self.stats.quarantine_rows, self.stats.quarantine_records = self.quarantine.count()
            inflight = self.spool.inflight()
            if inflight is not None:
                batch = self.spool.read(self.batch_cap_rows * 4, max(self.batch_cap_bytes * 4, 256 * 1024 * 1024),
                                        until=inflight[1])
                if batch and batch[-1].end == inflight[1][1] and batch[-1].segment == inflight[1][0]:
                    # the batch a crash interrupted: same range, same parts, same tokens
                    self._retry = _split_at(batch, self.spool.inflight_splits())
                    log.info("replaying the interrupted batch of %d records (%d parts) first", len(batch),
                             len(self._retry))
            self._open_lanes()
            self._stopping = False
            self._thread = threading.Thread(target=self._supervise, name="infercost-writer", daemon=True)
            self._thread.start()

    @property
    def alive(self) -> bool:
        """True while the worker thread runs."""
        return self._thread is not None and self._thread.is_alive()

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
        self._close_lanes()

    def _open_lanes(self) -> None:
        """Open the extra clients for parts run side by side; any that cannot open now are tried again
        at the next batch (meanwhile the parts run one after the other). Only a sink whose class
        defines ``clone`` gets them (a wrapper forwarding attributes would hand out unwrapped clients)."""
        if not callable(getattr(type(self.sink), "clone", None)):
            return
        while len(self._lanes) < self.inserts_in_flight - 1:
            try:
                self._lanes.append(self.sink.clone())
            except Exception as exc:  # noqa: BLE001 - the store may be down: insert with fewer clients
                log.info("writer: extra store client not opened (%s); inserting one part at a time", redact(exc))
                return
        if self._lanes and self._pool is None:
            self._pool = ThreadPoolExecutor(self.inserts_in_flight - 1, thread_name_prefix="infercost-writer-lane")

    def _close_lanes(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        for lane in self._lanes:
            try:
                lane.close()
            except Exception:  # noqa: BLE001 - closing must not raise during shutdown
                log.debug("writer: closing an extra client failed", exc_info=True)
        self._lanes = []

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
    def _supervise(self) -> None:
        while True:
            try:
                self._run()
                return
            except Exception as exc:  # noqa: BLE001 - the loop must survive anything; the spool keeps the data
                self.stats.writer_restarts += 1
                self.stats.writer_last_error = redact(f"{type(exc).__name__}: {exc}")
                log.exception("writer loop failed; restarting it in 1 s (records stay spooled)")
                if self._stopping and time.monotonic() > self._drain_deadline:
                    return
                time.sleep(1.0)

    def _due(self) -> bool:
        pending = self.spool.pending_records
        if not pending:
            return False
        if self._stopping or self._flush_requested or self.spool.pending_rows >= self.batch_max_rows:
            return True
        return time.monotonic() - self.spool.pending_since >= self.batch_max_seconds

    def _requeue(self) -> None:
        """Append records ``infercost spool replay`` put in ``<spool>/requeue/`` (every few seconds)."""
        now = time.monotonic()
        if now < self._next_requeue:
            return
        self._next_requeue = now + _REQUEUE_EVERY_S
        moved = self.quarantine.drain_requeue(self.spool)
        if moved:
            self.stats.quarantine_rows, self.stats.quarantine_records = self.quarantine.count()
            log.info("re-queued %d quarantined record(s) for insertion", moved)

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._due() and self._retry is None:
                    if self._stopping:
                        return
                    self._requeue()
                    if self.spool.pending_records:
                        wait = self.batch_max_seconds - (time.monotonic() - self.spool.pending_since)
                    else:
                        wait = min(self.batch_max_seconds, _REQUEUE_EVERY_S)
                    self._wake.wait(max(0.005, wait))
            if self._stopping and time.monotonic() > self._drain_deadline:
                log.warning("writer stopping with %d rows still spooled (kept for the next start)",
                            self.spool.pending_rows)
                return
            parts = self._retry
            if parts is None:
                if len(self._lanes) < self.inserts_in_flight - 1:
                    self._open_lanes()
                lanes = 1 + len(self._lanes)
                try:
                    batch = self.spool.read(self.batch_cap_rows * lanes, self.batch_cap_bytes * lanes)
                except OSError:
                    log.exception("cannot read the spool; retrying")
                    time.sleep(1.0)
                    continue
                if not batch:
                    time.sleep(0.01)
                    continue
                parts = split_batch(batch, self.batch_cap_rows, self.batch_cap_bytes)
                self.spool.mark_inflight(batch, parts)
            batch = [record for part in parts for record in part]
            stored, quarantined = self._write_parts(parts)
            if stored:
                self._retry = None
                self._account(batch, quarantined)  # before the commit, so flush() never sees an empty spool early
                self.spool.commit(batch)
                self._backoff = 0.0
            else:
                self._retry = parts  # the same records, split the same way, under the same tokens next time
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

    def _insert(self, batch: list[Record], token: str, sink) -> None:
        settings = {"insert_deduplication_token": token, "deduplicate_blocks_in_dependent_materialized_views": 1}
        if batch[0].kind == KIND_TRACES:
            insert_trace_payloads(sink, [r.payload for r in batch], tag="writer.traces", settings=settings)
        elif batch[0].kind == KIND_METRICS:
            rows = MetricRows()
            for record in batch:
                rows.extend(metric_rows(record.payload))
            insert_metric_rows(sink, rows, tag="writer.metrics", settings=settings)
        elif batch[0].kind == KIND_METRIC_ROWS:
            rows = MetricRows()
            for record in batch:
                doc = json.loads(record.payload)
                rows.extend(MetricRows(gauge=doc["gauge"], sum=doc["sum"], histogram=doc["histogram"]))
            insert_metric_rows(sink, rows, tag="writer.scraped", settings=settings)
        else:
            raise ValueError(f"unknown spool record kind {batch[0].kind}")

    def _unavailable(self, exc: BaseException) -> None:
        reason = getattr(exc, "reason", "") or type(exc).__name__
        message = redact(str(exc))
        if self.stats.store_available or self.stats.store_reason != reason:
            log.warning("store unavailable (%s), spooling and retrying: %s", reason, message)
        self.stats.store_available = False
        self.stats.store_reason = reason
        self.stats.last_error = message

    def _write_parts(self, parts: list[list[Record]]) -> tuple[bool, int]:
        """Insert the parts of a batch side by side (part 0 in this thread, the others on the extra
        clients; one after the other when there are none). Returns (every part stored or its bad
        records quarantined, rows quarantined); (False, _) to retry the whole batch later."""
        start = time.perf_counter()
        # side by side only when no span can be in two parts: concurrent inserts do not see each
        # other's span keys, so a span in both would be stored twice (migration 1000's once-only step)
        sinks = [self.sink, *self._lanes][:len(parts)] if self._disjoint(parts) else [self.sink]
        if len(parts) > 1:
            log.debug("inserting %d parts (%s bytes) %s", len(parts), [sum(len(r.payload) for r in p) for p in parts],
                      "side by side" if len(sinks) > 1 else "one after the other")

        def run(lane: int) -> list[tuple[bool, int]]:  # one client's parts, one after the other
            return [self._write(part, sinks[lane]) for part in parts[lane::len(sinks)]]

        futures = [self._pool.submit(run, lane) for lane in range(1, len(sinks))]
        results = run(0) + [result for future in futures for result in future.result()]  # _write never raises
        stored = all(ok for ok, _ in results)
        if stored:
            if not self.stats.store_available:
                log.info("store is back; spool draining")
            self.stats.store_available = True
            self.stats.store_reason = ""
            self.stats.inserts += len(parts)
            self.stats.insert_seconds += time.perf_counter() - start
        return stored, sum(q for _, q in results)

    def _disjoint(self, parts: list[list[Record]]) -> bool:
        """True when every record's span ids are known (:meth:`Spool.span_ids`) and no span id is
        in two parts; False for one part, a record replayed after a restart, or metrics."""
        if len(parts) < 2 or not self._lanes:
            return False
        per_part = []
        for part in parts:
            ids = [self.spool.span_ids(record) for record in part]
            if any(x is None for x in ids):
                return False
            per_part.append(np.unique(np.frombuffer(b"".join(ids), dtype=np.uint64)))
        every = np.concatenate(per_part)
        return len(np.unique(every)) == len(every)

    def _write(self, part: list[Record], sink) -> tuple[bool, int]:
        """Insert one part through ``sink``: (True, rows quarantined) when it is stored (its bad records
        quarantined), (False, _) to retry later. Never raises."""
        token = self.spool.token_for(part)
        quarantined = 0
        try:
            self._insert(part, token, sink)
        except _POISON as exc:
            # the store refused the data itself, or a payload no longer decodes: isolate the culprit
            log.error("store refused a batch of %d records (%s); retrying one by one", len(part), redact(exc))
            for index, record in enumerate(part):
                try:
                    self._insert([record], f"{token}/{index}", sink)
                except _POISON as exc2:
                    try:
                        self._quarantine(record, redact(str(exc2)))
                        quarantined += record.rows
                    except OSError as exc3:  # cannot set it aside (disk full): keep the batch spooled
                        self._unavailable(exc3)
                        return False, quarantined
                except Exception as exc2:  # noqa: BLE001 - not the record's fault: retry the batch later
                    self._unavailable(exc2)
                    return False, quarantined  # partly inserted: the store drops what it already holds on the retry
        except Exception as exc:  # noqa: BLE001 - any other failure: keep the data, retry later
            self._unavailable(exc)
            return False, quarantined
        return True, quarantined

    def _quarantine(self, record: Record, error: str) -> None:
        path = self.quarantine.put(record, error)
        with self._stats_lock:
            self.stats.quarantined_rows += record.rows
            self.stats.quarantine_rows += record.rows
            self.stats.quarantine_records += 1
        log.error("quarantined %d rows to %s: %s (replay with `infercost spool replay`)", record.rows, path, error)

    def _account(self, batch: list[Record], quarantined: int) -> None:
        rows = sum(r.rows for r in batch) - quarantined
        newest = max(r.newest_ns for r in batch)
        if batch[0].kind == KIND_TRACES:
            self.stats.stored += rows
        else:
            self.stats.metric_points_stored += rows
        if newest > self.stats.newest_row_time_ns:
            self.stats.newest_row_time_ns = newest


def split_batch(batch: list[Record], cap_rows: int, cap_bytes: int) -> list[list[Record]]:
    """Split ``batch`` into as few consecutive slices as keep each within about ``cap_rows`` rows and
    ``cap_bytes`` payload bytes, of about equal bytes (a record goes to the next slice when more than
    half of it lies past its slice's share). A batch within the caps stays whole: a smaller insert
    would only add the store's fixed per-insert cost. Every record is in exactly one slice, in order."""
    total = sum(len(r.payload) for r in batch)
    rows = sum(r.rows for r in batch)
    n = min(max(-(-total // max(cap_bytes, 1)), -(-rows // max(cap_rows, 1)), 1), len(batch))
    if n <= 1:
        return [batch]
    out: list[list[Record]] = [[]]
    done = 0
    for index, record in enumerate(batch):
        size = len(record.payload)
        left = len(batch) - index  # records not yet placed, this one included
        if out[-1] and len(out) < n and (done + size / 2 > total * len(out) / n or left <= n - len(out)):
            out.append([])
        out[-1].append(record)
        done += size
    return out


def _split_at(batch: list[Record], starts: list[tuple[int, int]]) -> list[list[Record]]:
    """``batch`` cut before each record starting at one of ``starts`` ((segment, offset) pairs)."""
    cuts = set(starts)
    out: list[list[Record]] = [[]]
    for record in batch:
        if out[-1] and (record.segment, record.start) in cuts:
            out.append([])
        out[-1].append(record)
    return out
