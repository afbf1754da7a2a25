"""Records the store refused as unparseable, set aside under the spool, and their way back.

Position: collectors. The batching writer moves a spool record that the store refuses with a
payload error (:class:`schema.store.StorePayloadError`) here instead of retrying it forever:

* ``<spool>/quarantine/<ns>-<kind>.bin`` — the record's payload, byte for byte;
* ``<spool>/quarantine/<ns>-<kind>.json`` — ``{"kind", "rows", "newest_ns", "error", "quarantined_at"}``.

``infercost spool replay`` moves files to ``<spool>/requeue/``; the writer appends them to the spool
again (:meth:`Quarantine.drain_requeue`, every few seconds), so they are inserted like any other
record once whatever refused them is fixed (a schema upgrade, a server setting). Nothing here
deletes a record without putting it somewhere else first.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from collectors.spool import KIND_METRIC_ROWS, KIND_METRICS, KIND_TRACES, Record, Spool, SpoolFull

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Entry:
    """One quarantined record: its files, kind, rows, newest time (ns) and the store's error."""

    payload_path: Path
    kind: int
    rows: int
    newest_ns: int
    error: str

    @property
    def meta_path(self) -> Path:
        return self.payload_path.with_suffix(".json")


def _rows_of(kind: int, payload: bytes) -> int:
    """Rows in a payload (spans, metric points) when no metadata says so (files of older versions)."""
    try:
        if kind == KIND_TRACES:
            from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

            req = ExportTraceServiceRequest.FromString(payload)
            return sum(len(ss.spans) for rs in req.resource_spans for ss in rs.scope_spans)
        if kind == KIND_METRICS:
            from collectors.otlp_metrics import metric_rows

            return len(metric_rows(payload))
        if kind == KIND_METRIC_ROWS:
            doc = json.loads(payload)
            return sum(len(doc.get(k) or []) for k in ("gauge", "sum", "histogram"))
    except Exception:  # noqa: BLE001 - a payload the store refused may well not decode: count it as 0
        return 0
    return 0


class Quarantine:
    """The ``quarantine/`` and ``requeue/`` folders of one spool directory."""

    def __init__(self, spool_dir: Path):
        self.folder = Path(spool_dir) / "quarantine"
        self.requeue_folder = Path(spool_dir) / "requeue"

    def put(self, record: Record, error: str) -> Path:
        """Write ``record`` and its error here (payload first, then metadata); returns the payload path.

        Raises OSError when it cannot be written (the caller keeps the record in the spool)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        stem = self.folder / f"{time.time_ns()}-{record.kind}"
        meta = {"kind": record.kind, "rows": record.rows, "newest_ns": record.newest_ns, "error": error,
                "quarantined_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        _write_durably(stem.with_suffix(".bin"), record.payload)
        _write_durably(stem.with_suffix(".json"), json.dumps(meta).encode())
        return stem.with_suffix(".bin")

    def entries(self, folder: Path | None = None) -> list[Entry]:
        """The records in ``folder`` (default: the quarantine), oldest first."""
        folder = folder or self.folder
        out = []
        for path in sorted(folder.glob("*.bin")) if folder.is_dir() else []:
            kind = int(path.stem.rsplit("-", 1)[-1]) if "-" in path.stem else KIND_TRACES
            meta_path = path.with_suffix(".json")
            try:
                meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
            except (OSError, ValueError):
                meta = {}
            if not meta:  # an older version wrote the error as .txt, without the row count
                txt = path.with_suffix(".txt")
                error = txt.read_text().strip() if txt.exists() else ""
                meta = {"kind": kind, "rows": _rows_of(kind, path.read_bytes()), "newest_ns": 0, "error": error}
            out.append(Entry(path, int(meta.get("kind", kind)), int(meta.get("rows", 0)),
                             int(meta.get("newest_ns", 0)), str(meta.get("error", ""))))
        return out

    def count(self) -> tuple[int, int]:
        """(rows, records) in quarantine now."""
        entries = self.entries()
        return sum(e.rows for e in entries), len(entries)

    def requeue(self) -> int:
        """Move every quarantined record to ``requeue/`` (a running writer appends it to the spool
        within seconds); returns how many."""
        self.requeue_folder.mkdir(parents=True, exist_ok=True)
        moved = 0
        for entry in self.entries():
            target = self.requeue_folder / entry.payload_path.name
            os.replace(entry.payload_path, target)
            meta = json.dumps({"kind": entry.kind, "rows": entry.rows, "newest_ns": entry.newest_ns,
                               "error": entry.error}).encode()
            _write_durably(target.with_suffix(".json"), meta)
            for suffix in (".json", ".txt"):
                entry.payload_path.with_suffix(suffix).unlink(missing_ok=True)
            moved += 1
        return moved

    def drain_requeue(self, spool: Spool) -> int:
        """Append every record in ``requeue/`` to ``spool``, deleting each file only after its record is
        durable; returns how many. Stops quietly when the spool is full or fails (the rest stays for
        the next call)."""
        moved = 0
        for entry in self.entries(self.requeue_folder):
            try:
                spool.append(entry.kind, entry.payload_path.read_bytes(), entry.rows, entry.newest_ns)
            except (SpoolFull, OSError) as exc:
                log.warning("re-queue paused: %s", exc)
                break
            entry.payload_path.unlink(missing_ok=True)
            entry.meta_path.unlink(missing_ok=True)
            moved += 1
        return moved


def _write_durably(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
