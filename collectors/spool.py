"""The receiver's on-disk spool: an fsync'ed, checksummed write-ahead log of accepted requests.

Position: collectors. Every request the receiver acknowledges is first appended here and made
durable (:meth:`Spool.append` returns only after the whole record is written and ``fdatasync``
succeeded; any error raises, and the receiver answers 503 instead of 200). The batching writer
reads records, inserts them, then advances a cursor (:meth:`Spool.commit`). Records not yet
committed are replayed after a restart and whenever the store comes back. Delivery into the store
is at-least-once; the store drops what it already holds (migration 1000, docs/reliability.md).

Layout of ``<dir>``:

* ``<000000000001>.seg`` segment files: an 8-byte file magic ``ICSPOOL2`` then records, rotated
  past ``segment_bytes`` and after any write error; deleted once fully committed;
* ``cursor``: ``<segment> <offset>`` of the first uncommitted record (written atomically; if it
  cannot be written — disk full — the cursor stays in memory and is written with the next commit,
  and a restart in between replays a little more, which the store de-duplicates);
* ``id``: this spool's random id (part of the writer's insert-deduplication tokens);
* ``inflight``: a fixed-size, pre-allocated marker of the batch being inserted and of where the
  writer split it into inserts run side by side (rewritten in place, so it never needs new disk
  space) — after a crash the writer replays exactly that batch, split the same way, with the same
  tokens first;
* ``lock``: flock'ed while a receiver owns the directory.

A record is a 25-byte header ``<4sIIBIQ`` — magic ``\\xa5IC2``, payload length, CRC-32 (of the
other header fields and the payload), kind, rows, newest timestamp (ns) — then the payload. A
record is valid only if its magic, length and CRC all check. Opening the spool scans every
uncommitted byte: invalid bytes (a torn write from a crash, a short write on a full disk) are
skipped by searching for the next valid record, so a torn record never hides the records after
it; torn bytes at the very end of the last segment are cut off.

A write that fails half way (ENOSPC, EIO) is truncated back to the record's start; if even that
fails the segment is closed at its last good record and the next append starts a new segment.
Concurrent appends share one ``fdatasync`` (group commit); if it fails, every record it covered
fails (no later sync is trusted to have written them: after an fsync error Linux may drop dirty
pages and report success next time).

Spools written by earlier versions (records without magic) are converted on open.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
import uuid
import zlib
from pathlib import Path

from collectors.spool_format import (FILE_MAGIC, HEADER, KIND_METRIC_ROWS, KIND_METRICS, KIND_TRACES,  # noqa: F401
                                     KINDS, Record, SegmentReader, convert_legacy, encode_record)
from collectors.spool_format import write_all as _write_all  # module-level: the fault suite replaces it

log = logging.getLogger(__name__)

_SEGMENT_SUFFIX = ".seg"
_INFLIGHT_BYTES = 256


class SpoolFull(Exception):
    """Appending would take the spool past its byte limit."""


class SpoolWriteError(OSError):
    """A record could not be made durable (disk full, I/O error): it was not accepted."""


class SpoolLocked(RuntimeError):
    """Another process (or receiver) already uses this spool directory."""


class Spool:
    """A bounded, fsync'ed, checksummed append-only log of records (see module doc).

    Args:
        directory: where the segment files live (created if missing).
        max_bytes: bytes of uncommitted records beyond which :meth:`append` raises SpoolFull.
        segment_bytes: a segment is closed and a new one started past this size.

    Raises SpoolLocked when another receiver holds ``directory``; OSError when it cannot be used.
    """

    def __init__(self, directory: Path | str, max_bytes: int, segment_bytes: int = 16 * 1024 * 1024):
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.segment_bytes = segment_bytes
        self._lock = threading.Lock()
        self._sync_lock = threading.Lock()
        self._seq = 0
        self._synced_seq = 0
        self._failed_upto = 0  # records up to this seq were covered by a failed fdatasync
        self.pending_rows = 0
        self.pending_bytes = 0
        self.pending_records = 0
        self.pending_since = 0.0  # monotonic time the oldest pending record was appended (0: none)
        self.skipped_bytes = 0  # invalid bytes found (and passed over) when opening
        self.write_errors = 0  # appends that failed (disk full, I/O error)
        self.last_write_error = ""
        self.cursor_error = ""  # why the cursor could not be written ('' when it is on disk)
        self._ends: dict[int, int] = {}  # segment -> end of its last valid record
        self._cursor = (0, 0)
        self._fd: int | None = None
        self._segment = 0
        self._rotate = False
        self.id = ""
        self._inflight_fd: int | None = None
        self._keys: dict[tuple[int, int], bytes] = {}  # (segment, start) -> span ids (in memory only)
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
        self.id = self._spool_id()
        cursor_seg, cursor_off = self._read_cursor()
        segments = self._segments()
        for segment in segments:
            if segment < cursor_seg:
                self._path(segment).unlink(missing_ok=True)  # fully committed before the restart
        segments = [s for s in segments if s >= cursor_seg]
        if segments and segments[0] > cursor_seg:
            cursor_seg, cursor_off = segments[0], 0
        for index, segment in enumerate(segments):
            start = cursor_off if segment == cursor_seg else 0
            if not self._is_current_format(segment):
                start = self._convert_legacy(segment, start)
                if segment == cursor_seg:
                    cursor_off = start
            start = max(start, len(FILE_MAGIC))
            if segment == cursor_seg:
                cursor_off = start
            size = self._path(segment).stat().st_size
            reader = SegmentReader(self._path(segment), segment, start, size)
            for record in reader:
                self.pending_rows += record.rows
                self.pending_records += 1
                self.pending_bytes += record.size
            if reader.skipped:
                self.skipped_bytes += reader.skipped
                log.error("spool segment %d: %d invalid bytes (torn or short writes) skipped; the valid records "
                          "around them are kept", segment, reader.skipped)
            if reader.last_good < size and index == len(segments) - 1:
                log.warning("spool segment %d: cutting %d bytes after the last valid record", segment,
                            size - reader.last_good)
                with open(self._path(segment), "r+b") as f:
                    f.truncate(reader.last_good)
            self._ends[segment] = size if reader.last_good < size and index < len(segments) - 1 else reader.last_good
        self._cursor = (segments[0], cursor_off) if segments else (cursor_seg, cursor_off)
        if self.pending_records:
            self.pending_since = time.monotonic()
            log.info("spool %s: replaying %d records (%d rows) not yet in the store", self.directory,
                     self.pending_records, self.pending_rows)
        self._segment = (segments[-1] + 1) if segments else max(cursor_seg + 1, 1)
        self._open_inflight()
        try:
            self._start_segment()
        except OSError as exc:  # disk full at start: appends fail (503) until a segment can be created
            self._note_write_error(exc)
            self._rotate = True

    def _spool_id(self) -> str:
        path = self.directory / "id"
        try:
            value = path.read_text().strip()
            if value:
                return value
        except FileNotFoundError:
            pass
        value = uuid.uuid4().hex[:16]
        try:
            tmp = self.directory / "id.tmp"
            tmp.write_text(value + "\n")
            os.replace(tmp, path)
        except OSError as exc:  # the id only has to be stable while this process runs
            log.warning("cannot write the spool id file: %s", exc)
        return value

    def _read_cursor(self) -> tuple[int, int]:
        cursor_file = self.directory / "cursor"
        if cursor_file.exists():
            try:
                segment, offset = (int(x) for x in cursor_file.read_text().split())
                return segment, offset
            except ValueError:
                log.error("spool cursor %s unreadable; replaying every segment", cursor_file)
        return 0, 0

    def _is_current_format(self, segment: int) -> bool:
        with open(self._path(segment), "rb") as f:
            head = f.read(len(FILE_MAGIC))
        return head == FILE_MAGIC or len(head) == 0

    def _convert_legacy(self, segment: int, start: int) -> int:
        """Rewrite a segment of the earlier record format from ``start``; returns the new start offset."""
        convert_legacy(self._path(segment), start)
        self._sync_dir()
        log.info("spool segment %d converted to the checksummed record format", segment)
        return len(FILE_MAGIC)

    def _start_segment(self) -> None:
        path = self._path(self._segment)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size == 0:
                _write_all(fd, FILE_MAGIC, b"")
                size = len(FILE_MAGIC)
            self._sync_dir()
        except OSError:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        self._fd = fd
        self._ends[self._segment] = size
        self._rotate = False

    def _sync_dir(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _open_inflight(self) -> None:
        path = self.directory / "inflight"
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            if os.fstat(fd).st_size < _INFLIGHT_BYTES:
                os.pwrite(fd, b" " * _INFLIGHT_BYTES, 0)  # allocate once; later writes reuse the blocks
            self._inflight_fd = fd
        except OSError as exc:
            log.warning("spool in-flight marker unavailable (%s): a crash during a failing insert may "
                        "replay it under a new token", exc)

    # --- writing -------------------------------------------------------------------------------
    def _note_write_error(self, exc: OSError) -> None:
        self.write_errors += 1
        self.last_write_error = f"{exc.strerror or exc}"

    def _rollover(self) -> None:
        """Close the current segment (sync it) and start the next one (under ``_lock``). Raises OSError."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.fdatasync(fd)  # everything kept in the old segment is durable ...
            except OSError as exc:
                self._failed_upto = self._seq  # ... or nothing appended to it so far may be acknowledged
                self._note_write_error(exc)
            finally:
                os.close(fd)
        if self._path(self._segment).exists():
            self._segment += 1  # never append after bytes a failed write may have left
        self._start_segment()

    def append(self, kind: int, payload: bytes, rows: int, newest_ns: int = 0, span_ids: bytes | None = None) -> None:
        """Append one record and return after it is on disk (written whole and fdatasync'ed).

        ``span_ids``: the record's 8-byte span ids, concatenated, kept in memory only until the record
        is committed (:meth:`span_ids`; not persisted: a record replayed after a restart has none).

        Raises SpoolFull when the uncommitted bytes would exceed ``max_bytes``; SpoolWriteError when
        the record could not be made durable (nothing of it counts as accepted).
        """
        header = encode_record(kind, payload, rows, newest_ns)
        size = len(header) + len(payload)
        with self._lock:
            if self.pending_bytes + size > self.max_bytes:
                raise SpoolFull(f"spool holds {self.pending_bytes} bytes; limit {self.max_bytes}")
            try:
                if self._rotate or self._fd is None or self._ends[self._segment] >= self.segment_bytes:
                    self._rollover()
            except OSError as exc:
                self._note_write_error(exc)
                self._rotate = True
                raise SpoolWriteError(exc.errno, f"cannot start a spool segment: {exc.strerror or exc}") from exc
            start = self._ends[self._segment]
            try:
                _write_all(self._fd, header, payload)
            except OSError as exc:
                self._note_write_error(exc)
                self._undo(start)
                raise SpoolWriteError(exc.errno, f"spool write failed: {exc.strerror or exc}") from exc
            self._ends[self._segment] = start + size
            if span_ids is not None:
                self._keys[(self._segment, start)] = span_ids
            if not self.pending_records:
                self.pending_since = time.monotonic()
            self.pending_rows += rows
            self.pending_bytes += size
            self.pending_records += 1
            self._seq += 1
            seq = self._seq
        self._sync(seq)

    def _undo(self, start: int) -> None:
        """Cut a half-written record off (under ``_lock``); if that fails, leave the segment."""
        try:
            os.ftruncate(self._fd, start)
        except OSError as exc:
            log.error("spool: cannot cut a failed write back (%s); starting a new segment", exc)
            self._rotate = True

    def _sync(self, seq: int) -> None:
        with self._sync_lock:
            if seq <= self._failed_upto:
                raise SpoolWriteError(5, "spool fdatasync failed for this record")
            if self._synced_seq >= seq:
                return  # another caller's fdatasync covered this record
            with self._lock:
                target, fd = self._seq, self._fd
            try:
                if fd is None:
                    raise OSError(5, "spool segment closed")
                os.fdatasync(fd)
            except OSError as exc:
                self._failed_upto = target
                with self._lock:
                    self._note_write_error(exc)
                    self._rotate = True  # never trust this file descriptor's later syncs
                raise SpoolWriteError(exc.errno, f"spool fdatasync failed: {exc.strerror or exc}") from exc
            self._synced_seq = target

    # --- reading and committing ---------------------------------------------------------------
    def read(self, max_rows: int, max_bytes: int = 256 * 1024 * 1024, until: tuple[int, int] | None = None) -> list[Record]:
        """Uncommitted records from the cursor on, all of one kind, up to ``max_rows`` rows (at least
        one record), ``max_bytes`` and (if given) the position ``until`` = (segment, end). Does not
        advance the cursor."""
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
            if until is not None and segment == until[0]:
                end = min(end, until[1])
            start = max(offset, len(FILE_MAGIC))
            if start < end:
                for record in SegmentReader(self._path(segment), segment, start, end):
                    if out and (record.kind != out[0].kind or rows + record.rows > max_rows
                                or size + len(record.payload) > max_bytes):
                        return out
                    out.append(record)
                    rows += record.rows
                    size += len(record.payload)
            if until is not None and segment >= until[0]:
                break
            later = [s for s in ends if s > segment]
            if not later:
                break
            segment, offset = min(later), 0
        return out

    def span_ids(self, record: Record) -> bytes | None:
        """The span ids given to :meth:`append` for ``record`` (None when unknown: replayed, metrics)."""
        return self._keys.get((record.segment, record.start))

    def commit(self, batch: list[Record]) -> None:
        """Mark ``batch`` (a list returned by :meth:`read`, now stored) as done; drop finished segments.

        Never raises for a cursor that cannot be written (disk full): it stays in memory
        (``cursor_error`` says why) and is written with a later commit.
        """
        if not batch:
            return
        last = batch[-1]
        with self._lock:
            self.pending_rows -= sum(r.rows for r in batch)
            self.pending_records -= len(batch)
            self.pending_bytes -= sum(r.size for r in batch)
            if self.pending_records <= 0:
                self.pending_rows = self.pending_records = self.pending_bytes = 0
            self._cursor = (last.segment, last.end)
            for record in batch:
                self._keys.pop((record.segment, record.start), None)
            finished = [s for s in self._ends if s < last.segment]
            self.pending_since = time.monotonic() if self.pending_records else 0.0
        self._write_cursor()
        for s in finished:
            with self._lock:
                self._ends.pop(s, None)
            try:
                self._path(s).unlink(missing_ok=True)
            except OSError as exc:
                log.warning("cannot delete committed spool segment %d: %s", s, exc)

    def _write_cursor(self) -> None:
        tmp = self.directory / "cursor.tmp"
        segment, offset = self._cursor
        try:
            with open(tmp, "w") as f:
                f.write(f"{segment} {offset}\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.directory / "cursor")
        except OSError as exc:
            if not self.cursor_error:
                log.warning("spool cursor not written (%s): kept in memory; a restart now would replay "
                            "already stored records, which the store drops as duplicates", exc)
            self.cursor_error = f"{exc.strerror or exc}"
            return
        if self.cursor_error:
            log.info("spool cursor written again")
        self.cursor_error = ""

    # --- the in-flight batch marker ------------------------------------------------------------
    def token_for(self, batch: list[Record]) -> str:
        """The insert-deduplication token of a batch: this spool's id and the batch's byte range."""
        first, last = batch[0], batch[-1]
        return f"infercost:{self.id}:{first.segment}:{first.start}-{last.segment}:{last.end}"

    def mark_inflight(self, batch: list[Record], parts: list[list[Record]] | None = None) -> None:
        """Remember ``batch`` (its range) as being inserted, before the insert (best effort, no fsync:
        a process crash keeps the page; only a power loss can lose it). ``parts``: how the writer
        split the batch into inserts run side by side (consecutive slices of ``batch``); their
        starts are kept too, so a replay after a crash repeats the very same inserts (same tokens)."""
        if self._inflight_fd is None or not batch:
            return
        first, last = batch[0], batch[-1]
        body = f"{first.segment} {first.start} {last.segment} {last.end}"
        for part in (parts or [])[1:]:
            body += f" {part[0].segment} {part[0].start}"
        line = f"{body} {zlib.crc32(body.encode())}\n".encode()
        if len(line) > _INFLIGHT_BYTES:
            raise ValueError(f"in-flight marker of {len(line)} bytes exceeds {_INFLIGHT_BYTES}: too many parts")
        try:
            os.pwrite(self._inflight_fd, line.ljust(_INFLIGHT_BYTES, b" "), 0)
        except OSError as exc:
            log.debug("in-flight marker not written: %s", exc)

    def _marker(self) -> tuple[tuple[int, int], tuple[int, int], list[tuple[int, int]]] | None:
        if self._inflight_fd is None:
            return None
        try:
            numbers = [int(x) for x in os.pread(self._inflight_fd, _INFLIGHT_BYTES, 0).decode().split()]
        except (OSError, ValueError, UnicodeDecodeError):
            return None
        body, crc = numbers[:-1], numbers[-1] if numbers else None
        if len(body) < 4 or len(body) % 2 or zlib.crc32(" ".join(map(str, body)).encode()) != crc:
            return None
        splits = [(body[i], body[i + 1]) for i in range(4, len(body), 2)]
        return (body[0], body[1]), (body[2], body[3]), splits

    def inflight(self) -> tuple[tuple[int, int], tuple[int, int]] | None:
        """((segment, start), (segment, end)) of the batch marked in flight, if it starts at the
        cursor (i.e. it was not committed), else None."""
        marker = self._marker()
        if marker is None:
            return None
        cursor = self._cursor if self._cursor[1] >= len(FILE_MAGIC) else (self._cursor[0], len(FILE_MAGIC))
        if marker[0] != cursor:
            return None
        return marker[0], marker[1]

    def inflight_splits(self) -> list[tuple[int, int]]:
        """(segment, start) of each part but the first of the batch marked in flight (see
        :meth:`mark_inflight`); [] when it was inserted as one part or no marker is readable."""
        marker = self._marker()
        return marker[2] if marker is not None else []

    def close(self) -> None:
        """Sync and close the current segment, release the directory (idempotent)."""
        with self._lock:
            if self._fd is not None:
                try:
                    os.fdatasync(self._fd)
                except OSError as exc:
                    log.error("spool fdatasync at close failed: %s", exc)
                os.close(self._fd)
                self._fd = None
            if self._inflight_fd is not None:
                os.close(self._inflight_fd)
                self._inflight_fd = None
            if not self._lock_file.closed:
                self._lock_file.close()  # releases the flock
