"""The spool, the writer and the store's error classification under injected faults (in process).

Faults are injected at the operating-system boundary (``os.writev`` / ``os.fdatasync`` returning
ENOSPC or EIO, a cursor file that cannot be written) and at the store boundary (the real embedded
store behind a wrapper raising the errors ClickHouse raises); the data checked is read back from the
spool files and the real store. The file-system faults for real (tmpfs, chmod, kill -9) are in
tests/test_faults.py.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clickhouse_connect.driver.exceptions import DatabaseError, OperationalError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

import collectors.spool as spool_mod
from collectors.spool import KIND_TRACES, Spool, SpoolWriteError
from collectors.stats import ReceiverStats
from collectors.writer import BatchWriter
from conftest import emptied
from schema.store_errors import StorePayloadError, StoreQueryError, StoreUnavailable, classify_error

T0 = time.time_ns() - 3600 * 10**9  # an hour ago: inside any retention (the CLI's store keeps 30 days)


def _request(first: int, n: int) -> bytes:
    req = ExportTraceServiceRequest()
    ss = req.resource_spans.add().scope_spans.add()
    for i in range(first, first + n):
        ss.spans.append(Span(trace_id=(i + 1).to_bytes(16, "big"), span_id=(i + 1).to_bytes(8, "big"), name="op",
                             start_time_unix_nano=T0 + i, end_time_unix_nano=T0 + i + 1000))
    return req.SerializeToString()


@pytest.fixture
def store(module_store):
    return emptied(module_store, "otel_traces", "llm_calls", "otel_traces_trace_id_ts")


@pytest.mark.parametrize("message, kind, reason", [
    ("Code: 243. DB::Exception: Cannot reserve 1.00 MiB, not enough space. (NOT_ENOUGH_SPACE)", StoreUnavailable, "out_of_space"),
    ("Code: 1001. DB::Exception: filesystem error: in create_directories: Permission denied [/x]", StoreUnavailable,
     "permission_denied"),
    ("Code: 76. Cannot open file /x, errno: 30, strerror: Read-only file system", StoreUnavailable, "read_only"),
    ("Code: 242. DB::Exception: Table is in readonly mode. (TABLE_IS_READ_ONLY)", StoreUnavailable, "read_only"),
    ("Code: 252. DB::Exception: Too many parts (300). (TOO_MANY_PARTS)", StoreUnavailable, "too_many_parts"),
    ("Code: 241. DB::Exception: Memory limit (total) exceeded. (MEMORY_LIMIT_EXCEEDED)", StoreUnavailable, "memory_limit"),
    ("Code: 159. DB::Exception: Timeout exceeded. (TIMEOUT_EXCEEDED)", StoreUnavailable, "timeout"),
    ("Code: 60. DB::Exception: Table x doesn't exist. (UNKNOWN_TABLE)", StoreQueryError, "schema_missing"),
    ("Code: 117. DB::Exception: Unexpected data in protobuf. (INCORRECT_DATA)", StorePayloadError, "payload"),
    ("Code: 33. DB::Exception: Cannot read all data. (CANNOT_READ_ALL_DATA)", StorePayloadError, "payload"),
    ("Code: 62. DB::Exception: Syntax error. (SYNTAX_ERROR)", StoreQueryError, "query"),
])
def test_store_errors_are_classified(message, kind, reason):
    assert classify_error(DatabaseError(message)) == (kind, reason)


def test_network_errors_are_unavailable():
    assert classify_error(OperationalError("HTTPConnectionPool: Max retries exceeded (Connection refused)")) == \
        (StoreUnavailable, "unreachable")
    assert classify_error(ConnectionRefusedError(111, "Connection refused")) == (StoreUnavailable, "unreachable")


def test_a_short_write_is_cut_back_and_never_counted(tmp_path, monkeypatch):
    spool = Spool(tmp_path, max_bytes=10**7)
    spool.append(KIND_TRACES, b"a" * 100, rows=1)
    real = os.writev

    def half_then_enospc(fd, buffers):
        data = b"".join(bytes(b) for b in buffers)
        os.write(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(spool_mod.os, "writev", half_then_enospc)
    with pytest.raises(SpoolWriteError, match="No space left"):
        spool.append(KIND_TRACES, b"b" * 1000, rows=50)
    monkeypatch.setattr(spool_mod.os, "writev", real)
    assert (spool.pending_records, spool.pending_rows, spool.write_errors) == (1, 1, 1)
    spool.append(KIND_TRACES, b"c" * 100, rows=2)
    assert [(r.payload[:1], r.rows) for r in spool.read(100)] == [(b"a", 1), (b"c", 2)]
    spool.close()
    reopened = Spool(tmp_path, max_bytes=10**7)
    assert (reopened.pending_records, reopened.pending_rows, reopened.skipped_bytes) == (2, 3, 0)
    reopened.close()


def test_a_failed_fdatasync_fails_the_record_and_the_segment_is_left(tmp_path, monkeypatch):
    spool = Spool(tmp_path, max_bytes=10**7)

    def eio(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(spool_mod.os, "fdatasync", eio)
    with pytest.raises(SpoolWriteError, match="fdatasync failed"):
        spool.append(KIND_TRACES, b"x" * 10, rows=1)
    monkeypatch.undo()
    spool.append(KIND_TRACES, b"y" * 10, rows=1)  # a new segment: nothing after the failed sync is trusted to it
    assert len(list(tmp_path.glob("*.seg"))) == 2
    spool.close()


def test_a_cursor_that_cannot_be_written_keeps_the_writer_going(tmp_path, monkeypatch):
    spool = Spool(tmp_path, max_bytes=10**7)
    for i in range(3):
        spool.append(KIND_TRACES, bytes([i]) * 10, rows=1)
    real_open = open

    def full_disk_open(path, *args, **kwargs):
        if str(path).endswith("cursor.tmp"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", full_disk_open)
    batch = spool.read(1)
    spool.commit(batch)  # does not raise
    assert spool.cursor_error == "No space left on device" and spool.pending_records == 2
    monkeypatch.undo()
    spool.commit(spool.read(1))
    assert spool.cursor_error == "" and (tmp_path / "cursor").read_text().split()[1] == str(spool.read(1)[0].start)
    spool.close()


class FlakyStore:
    """The real store; the first ``fail`` inserts raise ``error`` (as ClickHouse would) before inserting."""

    def __init__(self, store, error, fail=1):
        self.store, self.error, self.fail, self.embedded = store, error, fail, store.embedded

    def raw_insert(self, *args, **kwargs):
        if self.fail:
            self.fail -= 1
            raise self.error
        return self.store.raw_insert(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.store, name)


@pytest.mark.parametrize("error", [
    StoreUnavailable("Code: 243. Cannot reserve 1.00 MiB, not enough space", "writer", "out_of_space"),
    StoreUnavailable("Code: 1001. Permission denied", "writer", "permission_denied"),
    StoreQueryError("Code: 60. Table doesn't exist", "writer", "schema_missing"),
    RuntimeError("something unexpected"),
])
def test_retryable_errors_keep_data_spooled_never_quarantined(store, tmp_path, error):
    spool = Spool(tmp_path / "spool", max_bytes=10**7)
    spool.append(KIND_TRACES, _request(0, 10), rows=10)
    stats = ReceiverStats()
    writer = BatchWriter(spool, FlakyStore(store, error, fail=2), stats, batch_max_seconds=0.01)
    writer.start()
    assert writer.flush(20)
    writer.stop(1)
    spool.close()
    assert (stats.stored, stats.quarantined_rows, stats.store_available) == (10, 0, True)
    assert not (tmp_path / "spool" / "quarantine").exists()
    assert store.scalar("SELECT count() FROM otel_traces", tag="test") == 10


def test_the_writer_loop_is_restarted_after_a_crash(store, tmp_path, monkeypatch):
    spool = Spool(tmp_path / "spool", max_bytes=10**7)
    spool.append(KIND_TRACES, _request(0, 5), rows=5)
    stats = ReceiverStats()
    writer = BatchWriter(spool, store, stats, batch_max_seconds=0.01)
    real_read = spool.read
    calls = {"n": 0}

    def read_once_broken(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("injected: the loop itself fails")
        return real_read(*args, **kwargs)

    monkeypatch.setattr(spool, "read", read_once_broken)
    writer.start()
    assert writer.flush(20)
    writer.stop(1)
    spool.close()
    assert (stats.writer_restarts, stats.stored) == (1, 5) and "injected" in stats.writer_last_error


def test_spool_replay_command_reinserts_quarantined_records(store, tmp_path):
    """`infercost spool replay` with no collector running: quarantined records go back through the
    spool into the store (here: a record refused once by a wrongly configured store, then fixed)."""
    spool_dir = tmp_path / "spool"
    spool = Spool(spool_dir, max_bytes=10**7)
    spool.append(KIND_TRACES, _request(100, 7), rows=7)
    stats = ReceiverStats()
    writer = BatchWriter(spool, FlakyStore(store, StorePayloadError("Code: 117. INCORRECT_DATA", "w", "payload"),
                                           fail=2), stats, batch_max_seconds=0.01)
    writer.start()
    assert writer.flush(20)
    writer.stop(1)
    spool.close()
    assert (stats.quarantined_rows, stats.quarantine_rows, stats.stored) == (7, 7, 0)
    meta = json.loads(next((spool_dir / "quarantine").glob("*.json")).read_text())
    assert (meta["kind"], meta["rows"]) == (KIND_TRACES, 7) and "INCORRECT_DATA" in meta["error"]

    # the CLI needs its own store process (one chDB engine per process): an on-disk store
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env.update(INFERCOST_DATA_DIR=str(data))
    infercost = str(Path(sys.executable).with_name("infercost"))
    status = subprocess.run([infercost, "spool", "status", "--spool-dir", str(spool_dir)], capture_output=True,
                            text=True, env=env, timeout=60)
    assert "quarantine: 1 record(s), 7 row(s)" in status.stdout and "INCORRECT_DATA" in status.stdout
    done = subprocess.run([infercost, "spool", "replay", "--spool-dir", str(spool_dir)], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "stored 7 span(s)" in done.stdout and "0 row(s) refused again" in done.stdout
    assert not list((spool_dir / "quarantine").glob("*.bin"))
    count = subprocess.run([sys.executable, str(Path(__file__).with_name("fault_receiver.py")), "count",
                            str(data / "clickhouse")], capture_output=True, text=True, env=env, timeout=120)
    assert json.loads(count.stdout.strip().splitlines()[-1])["distinct"] == 7


def test_disk_guard_pauses_the_cost_jobs_on_a_nearly_full_disk(module_store, tmp_path, monkeypatch):
    from collections import namedtuple

    import schema.disk_guard as guard_mod
    from schema import jobs

    usage = namedtuple("usage", "total used free")
    free = {"bytes": 100 << 20}
    monkeypatch.setattr(guard_mod.shutil, "disk_usage", lambda path: usage(1 << 30, 0, free["bytes"]))
    guard = guard_mod.DiskGuard(module_store, tmp_path, min_free_bytes=64 << 20)

    def states(want_disabled: bool):
        # the scheduler applies STOP / START VIEW asynchronously: wait for it to settle (at most 5 s)
        deadline = time.monotonic() + 5
        while True:
            found = set(jobs.status(module_store)["status"])
            if (found == {"Disabled"}) == want_disabled or time.monotonic() > deadline:
                return found == {"Disabled"}
            time.sleep(0.05)

    guard.check()
    assert not guard.low and not states(want_disabled=False)
    free["bytes"] = 10 << 20
    guard.check()
    assert guard.low and states(want_disabled=True)
    jobs.start(module_store)  # someone starts the jobs while the disk is still nearly full ...
    free["bytes"] = 100 << 20  # ... and space comes back, but not twice the floor yet
    guard.check()
    assert guard.low and states(want_disabled=True)  # overruled: still paused
    free["bytes"] = 200 << 20
    guard.check()
    assert not guard.low and not states(want_disabled=False)


def test_the_writer_caps_each_insert_at_batch_cap_bytes_of_input(store, tmp_path):
    """Seven spooled records of 10 spans (equal payload sizes); a byte cap of two and a half records
    gives inserts of 2, 2, 2 and 1 records, every span stored once; a cap below one record still
    inserts that record alone (a batch holds at least one)."""
    spool = Spool(tmp_path / "spool", max_bytes=10**7)
    payloads = [_request(100 + 10 * k, 10) for k in range(7)]
    assert len({len(p) for p in payloads}) == 1
    for payload in payloads:
        spool.append(KIND_TRACES, payload, rows=10)
    sizes = []

    class Counting:
        def raw_insert(self, table, data, fmt, **kwargs):
            sizes.append(len(data) // 2)  # (varint length, payload) pairs: records in this insert
            return store.raw_insert(table, data, fmt, **kwargs)

    stats = ReceiverStats()
    writer = BatchWriter(spool, Counting(), stats, batch_max_seconds=0.01, batch_cap_bytes=len(payloads[0]) * 5 // 2)
    writer.start()
    assert writer.flush(20)
    writer.stop(1)
    assert (sizes, stats.inserts, stats.stored) == ([2, 2, 2, 1], 4, 70)
    assert store.scalar("SELECT count() FROM otel_traces", tag="test") == 70

    spool.append(KIND_TRACES, _request(200, 10), rows=10)
    spool.append(KIND_TRACES, _request(210, 10), rows=10)
    sizes.clear()
    writer = BatchWriter(spool, Counting(), stats, batch_max_seconds=0.01, batch_cap_bytes=1)
    writer.start()
    assert writer.flush(20)
    writer.stop(1)
    spool.close()
    assert (sizes, stats.stored) == ([1, 1], 90)
    assert store.scalar("SELECT count() FROM otel_traces", tag="test") == 90
