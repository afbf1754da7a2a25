"""The spool's on-disk format: segment files of checksummed, length-prefixed records.

Position: collectors (used by :mod:`collectors.spool`). A segment file starts with the 8-byte magic
``ICSPOOL2``; a record is a 25-byte header ``<4sIIBIQ`` — magic ``\\xa5IC2``, payload length,
CRC-32 (of the other header fields and the payload), kind, rows, newest timestamp (ns) — then the
payload. A record is valid only if its magic, length and CRC all check; :class:`SegmentReader`
yields the valid records of a byte range and skips anything else by searching for the next valid
record, so a torn record never hides the records after it. Segments written before the magic
existed (``<IIBIQ`` headers) are rewritten by :func:`convert_legacy`.
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

MAGIC = b"\xa5IC2"
HEADER = struct.Struct("<4sIIBIQ")  # magic, payload length, crc32, kind, rows, newest_ns
FIELDS = struct.Struct("<IBIQ")  # the header fields the CRC covers (with the payload)
LEGACY_HEADER = struct.Struct("<IIBIQ")  # before the magic: length, crc32(payload), kind, rows, newest
FILE_MAGIC = b"ICSPOOL2"
MAX_RECORD_BYTES = 1 << 30  # a length beyond this is garbage, not a record
KIND_TRACES = 1  # payload: ExportTraceServiceRequest protobuf
KIND_METRICS = 2  # payload: ExportMetricsServiceRequest protobuf
KIND_METRIC_ROWS = 3  # payload: JSON {"gauge": [...], "sum": [...], "histogram": [...]} (scraped rows)
KINDS = (KIND_TRACES, KIND_METRICS, KIND_METRIC_ROWS)


@dataclass(frozen=True)
class Record:
    """One spooled request: ``kind`` (KIND_*), payload, rows, newest time (ns).

    ``segment`` / ``start`` / ``end`` locate it (``end`` is what :meth:`Spool.commit` advances to).
    """

    kind: int
    payload: bytes
    rows: int
    newest_ns: int
    segment: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return HEADER.size + len(self.payload)


def encode_record(kind: int, payload: bytes, rows: int, newest_ns: int) -> bytes:
    """The header of a record (see module doc); the payload follows it."""
    crc = zlib.crc32(payload, zlib.crc32(FIELDS.pack(len(payload), kind, rows, newest_ns)))
    return HEADER.pack(MAGIC, len(payload), crc, kind, rows, newest_ns)


def write_all(fd: int, header: bytes, payload: bytes) -> None:
    """Write header + payload completely (loops over short writes); OSError on failure."""
    view = memoryview(payload)
    pending = [header, view] if payload else [header]
    while pending:
        written = os.writev(fd, pending)
        if written <= 0:
            raise OSError(28, "short write (0 bytes)")
        while pending and written >= len(pending[0]):
            written -= len(pending[0])
            pending.pop(0)
        if pending and written:
            pending[0] = memoryview(pending[0])[written:]


class SegmentReader:
    """Valid records of one segment file between two offsets, skipping invalid bytes (resync)."""

    def __init__(self, path: Path, segment: int, start: int, end: int):
        self.path, self.segment, self.start, self.end = path, segment, start, end
        self.skipped = 0  # invalid bytes passed over
        self.last_good = start  # end of the last valid record

    def __iter__(self):
        with open(self.path, "rb") as f:
            offset = self.start
            while offset + HEADER.size <= self.end:
                record = self._record_at(f, offset)
                if record is None:
                    nxt = self._resync(f, offset + 1)
                    if nxt is None:
                        self.skipped += self.end - offset
                        return
                    self.skipped += nxt - offset
                    offset = nxt
                    continue
                offset = record.end
                self.last_good = offset
                yield record
            if offset < self.end:
                self.skipped += self.end - offset

    def _record_at(self, f, offset: int) -> Record | None:
        f.seek(offset)
        header = f.read(HEADER.size)
        if len(header) < HEADER.size:
            return None
        magic, length, crc, kind, rows, newest = HEADER.unpack(header)
        if magic != MAGIC or length > MAX_RECORD_BYTES or offset + HEADER.size + length > self.end \
                or kind not in KINDS:
            return None
        payload = f.read(length)
        if len(payload) < length or zlib.crc32(payload, zlib.crc32(FIELDS.pack(length, kind, rows, newest))) != crc:
            return None
        return Record(kind, payload, rows, newest, self.segment, offset, offset + HEADER.size + length)

    def _resync(self, f, offset: int) -> int | None:
        """Offset of the next valid record at or after ``offset``, or None."""
        window = 1 << 20
        while offset + HEADER.size <= self.end:
            f.seek(offset)
            chunk = f.read(min(window, self.end - offset))
            at = chunk.find(MAGIC)
            while at >= 0:
                if self._record_at(f, offset + at) is not None:
                    return offset + at
                at = chunk.find(MAGIC, at + 1)
            if len(chunk) < window:
                return None
            offset += len(chunk) - len(MAGIC) + 1
        return None


def convert_legacy(path: Path, start: int) -> None:
    """Rewrite a segment of the earlier record format (no magic) from ``start`` in the current one
    (written to a temporary file, fsync'ed, renamed over the original)."""
    data = path.read_bytes()
    out = [FILE_MAGIC]
    offset = start
    while offset + LEGACY_HEADER.size <= len(data):
        length, crc, kind, rows, newest = LEGACY_HEADER.unpack_from(data, offset)
        payload = data[offset + LEGACY_HEADER.size: offset + LEGACY_HEADER.size + length]
        if len(payload) < length or zlib.crc32(payload) != crc:
            break
        out += [encode_record(kind, payload, rows, newest), payload]
        offset += LEGACY_HEADER.size + length
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(b"".join(out))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
