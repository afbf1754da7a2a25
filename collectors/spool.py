"""The receiver's on-disk spool: an fsync'ed write-ahead log of accepted requests.

Position: collectors. Every request the receiver acknowledges is first appended here and
fsync'ed (:meth:`Spool.append` returns only after ``fdatasync``); the batching writer reads
records from the spool, inserts them, then advances a cursor (:meth:`Spool.commit`). Records
not yet committed are replayed after a restart and whenever the store comes back, so an
acknowledged span is never lost. Delivery is at-least-once: a crash between an insert and the
cursor update re-inserts that batch after restart.

Layout: ``<dir>/<000000000001>.seg`` segment files of records, rotated past ``segment_bytes``,
deleted once fully committed; ``<dir>/cursor`` holds ``<segment> <offset>`` of the first
uncommitted record. A record is a 21-byte header ``<IIBIQ`` (payload length, CRC-32 of the
payload, kind, rows, newest timestamp ns) followed by the payload. A torn record at the tail of
the last segment (crash mid-write, never acknowledged) is cut off when the spool is opened.

Concurrent appends share one ``fdatasync`` (group commit): a caller whose record was covered by
another caller's sync returns without syncing again.
"""

from __future__ import annotations

import fcntl
import logging
import os
import struct
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

HEADER = struct.Struct("<IIBIQ")
KIND_TRACES = 1  # payload: ExportTraceServiceRequest protobuf
KIND_METRICS = 2  # payload: ExportMetricsServiceRequest protobuf
KIND_METRIC_ROWS = 3  # payload: JSON {"gauge": [...], "sum": [...], "histogram": [...]} (scraped rows)
_SEGMENT_SUFFIX = ".seg"


@dataclass(frozen=True)
class Record:
    """One spooled request: ``kind`` (KIND_TRACES / KIND_METRICS), payload, rows, newest time (ns).

    ``segment`` / ``end`` locate the byte after the record (what :meth:`Spool.commit` takes).
    """

    kind: int
    payload: bytes
    rows: int
    newest_ns: int
    segment: int
    end: int


class SpoolFull(Exception):
    """Appending would take the spool past its byte limit."""


class SpoolLocked(RuntimeError):
    """Another process (or receiver) already uses this spool directory."""


class Spool:
    """A bounded, fsync'ed append-only log of records (see module doc).

    Args:
        directory: where the segment files live (created if missing).
        max_bytes: bytes of uncommitted records beyond which :meth:`append` raises SpoolFull.
        segment_bytes: a segment is closed and a new one started past this size.
    """

    def __init__(self, directory: Path | str, max_bytes: int, segment_bytes: int = 16 * 1024 * 1024):
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.segment_bytes = segment_bytes
        self._lock = threading.Lock()
        self._sync_lock = threading.Lock()
        self._seq = 0
        self._synced_seq = 0
        self.pending_rows = 0
        self.pending_bytes = 0
        self.pending_records = 0
        self.pending_since = 0.0  # monotonic time the oldest pending record was appended (0: none)
        self._ends: dict[int, int] = {}  # segment -> bytes of complete records
        self._cursor = (0, 0)
        self._file = None
        self._segment = 0
        self._open()

    # --- opening and replay ------------------------------------------------------------------
    def _segments(self) -> list[int]:
        return sorted(int(p.stem) for p in self.directory.glob(f"*{_SEGMENT_SUFFIX}") if p.stem.isdigit())

    def _path(self, segment: int) -> Path:
        return self.directory / f"{segment:012d}{_SEGMENT_SUFFIX}"

    def _open(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        # Two receivers appending to one spool would interleave records: refuse the second.
        self._lock_file = open(self.directory / "lock", "a+")
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._lock_file.close()
            raise SpoolLocked(f"spool directory {self.directory} is in use by another receiver; "
                              f"give each receiver its own spool_dir") from None
        cursor_seg, cursor_off = 0, 0
        cursor_file = self.directory / "cursor"
        if cursor_file.exists():
            try:
                cursor_seg, cursor_off = (int(x) for x in cursor_file.read_text().split())
            except ValueError:
                log.error("spool cursor %s unreadable; replaying every segment", cursor_file)
        segments = self._segments()
        for segment in segments:
            if segment < cursor_seg:
                self._path(segment).unlink(missing_ok=True)  # fully committed before the restart
        segments = [s for s in segments if s >= cursor_seg]
        if segments and segments[0] > cursor_seg:
            cursor_seg, cursor_off = segments[0], 0
        for index, segment in enumerate(segments):
            start = cursor_off if segment == cursor_seg else 0
            good_end, rows, records = self._scan(segment, start)
            size = self._path(segment).stat().st_size
            if good_end < size:
                if index == len(segments) - 1:
                    log.warning("spool segment %d: cutting %d bytes of a torn record", segment, size - good_end)
                    with open(self._path(segment), "r+b") as f:
                        f.truncate(good_end)
                else:
                    log.error("spool segment %d: %d corrupt bytes after offset %d skipped", segment, size - good_end,
                              good_end)
            self._ends[segment] = good_end
            self.pending_rows += rows
            self.pending_records += records
            self.pending_bytes += good_end - start
        self._cursor = (segments[0], cursor_off) if segments else (cursor_seg, cursor_off)
        if self.pending_records:
            self.pending_since = time.monotonic()
            log.info("spool %s: replaying %d records (%d rows) not yet in the store", self.directory,
                     self.pending_records, self.pending_rows)
        self._segment = (segments[-1] + 1) if segments else max(cursor_seg, 1)
        self._start_segment()

    def _scan(self, segment: int, offset: int) -> tuple[int, int, int]:
        """(end of the last complete record, rows, records) from ``offset`` in ``segment``."""
        rows = records = 0
        with open(self._path(segment), "rb") as f:
            f.seek(offset)
            while True:
                header = f.read(HEADER.size)
                if len(header) < HEADER.size:
                    break
                length, crc, _kind, n, _newest = HEADER.unpack(header)
                payload = f.read(length)
                if len(payload) < length or zlib.crc32(payload) != crc:
                    break
                offset += HEADER.size + length
                rows += n
                records += 1
        return offset, rows, records

    def _start_segment(self) -> None:
        path = self._path(self._segment)
        self._file = open(path, "ab", buffering=0)
        self._ends.setdefault(self._segment, path.stat().st_size)
        self._sync_dir()

    def _sync_dir(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    # --- writing -------------------------------------------------------------------------------
    def append(self, kind: int, payload: bytes, rows: int, newest_ns: int = 0) -> None:
        """Append one record and return after it is on disk (fdatasync).

        Raises SpoolFull when the uncommitted bytes would exceed ``max_bytes``; OSError on disk errors.
        """
        record = HEADER.pack(len(payload), zlib.crc32(payload), kind, rows, newest_ns) + payload
        with self._lock:
            if self.pending_bytes + len(record) > self.max_bytes:
                raise SpoolFull(f"spool holds {self.pending_bytes} bytes; limit {self.max_bytes}")
            if self._ends[self._segment] >= self.segment_bytes:
                os.fdatasync(self._file.fileno())  # everything in the old segment is durable
                self._file.close()
                self._segment += 1
                self._start_segment()
            self._file.write(record)
            self._ends[self._segment] += len(record)
            if not self.pending_records:
                self.pending_since = time.monotonic()
            self.pending_rows += rows
            self.pending_bytes += len(record)
            self.pending_records += 1
            self._seq += 1
            seq = self._seq
        self._sync(seq)

    def _sync(self, seq: int) -> None:
        with self._sync_lock:
            if self._synced_seq >= seq:
                return  # another caller's fdatasync covered this record
            with self._lock:
                target, fileno = self._seq, self._file.fileno()
            os.fdatasync(fileno)
            self._synced_seq = target

    # --- reading and committing ---------------------------------------------------------------
    def read(self, max_rows: int, max_bytes: int = 256 * 1024 * 1024) -> list[Record]:
        """Uncommitted records from the cursor on, all of one kind, up to ``max_rows`` rows
        (at least one record) and ``max_bytes``. Does not advance the cursor."""
        out: list[Record] = []
        rows = size = 0
        segment, offset = self._cursor
        with self._lock:
            ends = dict(self._ends)
        if segment not in ends:
            later = [s for s in ends if s > segment]
            if not later:
                return out
            segment, offset = min(later), 0
        while segment in ends:
            end = ends[segment]
            if offset < end:
                with open(self._path(segment), "rb") as f:
                    f.seek(offset)
                    while offset < end:
                        length, crc, kind, n, newest = HEADER.unpack(f.read(HEADER.size))
                        if out and (kind != out[0].kind or rows + n > max_rows or size + length > max_bytes):
                            return out
                        payload = f.read(length)
                        offset += HEADER.size + length
                        out.append(Record(kind, payload, n, newest, segment, offset))
                        rows += n
                        size += length
            later = [s for s in ends if s > segment]
            if not later:
                break
            segment, offset = min(later), 0
        return out

    def commit(self, batch: list[Record]) -> None:
        """Mark ``batch`` (a list returned by :meth:`read`, now stored) as done; drop finished segments."""
        if not batch:
            return
        last = batch[-1]
        with self._lock:
            self.pending_rows -= sum(r.rows for r in batch)
            self.pending_records -= len(batch)
            self.pending_bytes -= sum(HEADER.size + len(r.payload) for r in batch)
            self._cursor = (last.segment, last.end)
            finished = [s for s in self._ends if s < last.segment]
            self.pending_since = time.monotonic() if self.pending_records else 0.0
        self._write_cursor()
        for s in finished:
            with self._lock:
                self._ends.pop(s, None)
            self._path(s).unlink(missing_ok=True)

    def _write_cursor(self) -> None:
        tmp = self.directory / "cursor.tmp"
        segment, offset = self._cursor
        with open(tmp, "w") as f:
            f.write(f"{segment} {offset}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.directory / "cursor")

    def close(self) -> None:
        """Sync and close the current segment, release the directory (idempotent)."""
        with self._lock:
            if self._file is not None and not self._file.closed:
                os.fdatasync(self._file.fileno())
                self._file.close()
            if not self._lock_file.closed:
                self._lock_file.close()  # releases the flock
