"""No acknowledged span is ever lost: SIGKILL after 200, the store going away mid-load, back-pressure.

The SIGKILL test runs the receiver in a subprocess with its own embedded store directory (one
chDB engine per process) and reads the result back from a second subprocess, never from this one.
The "store unavailable" test puts a fault injector in front of the real store's connection: while
it is "down" every insert raises ``StoreUnavailable``; the rows checked are read from the real store.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import time
import zlib

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from collectors.receiver import Receiver, ReceiverConfig
from collectors.spool import FILE_MAGIC, HEADER, KIND_TRACES, Spool, SpoolFull, SpoolLocked, encode_record
from conftest import ROOT, emptied
from schema.store import StorePayloadError, StoreUnavailable
from tests.fault_receiver import FaultyInserts

T0 = 1_764_400_000_000_000_000
PB = {"content-type": "application/x-protobuf"}


def _request(first: int, n: int) -> bytes:
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.add(key="service.name").value.string_value = "durable"
    ss = rs.scope_spans.add()
    for i in range(first, first + n):
        ss.spans.append(Span(trace_id=(i + 1).to_bytes(16, "big"), span_id=(i + 1).to_bytes(8, "big"), name="op",
                             start_time_unix_nano=T0 + i, end_time_unix_nano=T0 + i + 1000))
    return req.SerializeToString()


def _span_ids(first: int, n: int) -> list[str]:
    return sorted(format(i + 1, "016x") for i in range(first, first + n))


@pytest.fixture
def store(module_store):
    return emptied(module_store, "otel_traces", "llm_calls", "otel_traces_trace_id_ts")


# --- the spool on its own ----------------------------------------------------------------------------

def test_spool_replays_after_reopen_and_cuts_a_torn_tail(tmp_path):
    spool = Spool(tmp_path, max_bytes=10_000)
    for i in range(3):
        spool.append(KIND_TRACES, bytes([i]) * 100, rows=i + 1, newest_ns=T0 + i)
    spool.close()
    segment = next(tmp_path.glob("*.seg"))
    size = segment.stat().st_size
    assert size == len(FILE_MAGIC) + 3 * (HEADER.size + 100)
    with open(segment, "ab") as f:
        f.write(encode_record(KIND_TRACES, b"t" * 100, 9, 0) + b"torn")  # a crash mid-append (never acknowledged)
    spool = Spool(tmp_path, max_bytes=10_000)
    assert (spool.pending_records, spool.pending_rows, spool.pending_bytes) == (3, 6, 3 * (HEADER.size + 100))
    assert segment.stat().st_size == size
    batch = spool.read(max_rows=3)
    assert [(r.payload[:1], r.rows, r.newest_ns) for r in batch] == [(b"\0", 1, T0), (b"\1", 2, T0 + 1)]
    spool.commit(batch)
    assert (spool.pending_records, spool.pending_rows) == (1, 3)
    spool.close()
    spool = Spool(tmp_path, max_bytes=10_000)  # the cursor survived: only the third record is pending
    assert [r.payload[:1] for r in spool.read(max_rows=100)] == [b"\2"]
    with pytest.raises(SpoolFull, match="limit 10000"):
        spool.append(KIND_TRACES, b"x" * 10_000, rows=1)
    with pytest.raises(SpoolLocked, match="in use by another receiver"):
        Spool(tmp_path, max_bytes=10_000)
    spool.close()
    Spool(tmp_path, max_bytes=10_000).close()  # released on close


def test_a_torn_record_never_hides_the_valid_records_after_it(tmp_path):
    spool = Spool(tmp_path, max_bytes=10**6)
    spool.append(KIND_TRACES, b"a" * 50, rows=1)
    spool.close()
    segment = next(tmp_path.glob("*.seg"))
    with open(segment, "ab") as f:  # half a record (a short write), then two whole ones
        f.write(encode_record(KIND_TRACES, b"h" * 50, 7, 0) + b"h" * 20)
        for payload in (b"b" * 30, b"c" * 40):
            f.write(encode_record(KIND_TRACES, payload, 2, 0) + payload)
        f.write(b"\x00garbage")
    spool = Spool(tmp_path, max_bytes=10**6)
    assert [(r.payload[:1], r.rows) for r in spool.read(100)] == [(b"a", 1), (b"b", 2), (b"c", 2)]
    assert (spool.pending_records, spool.pending_rows) == (3, 5)  # never the torn record's 7 rows
    assert spool.skipped_bytes == HEADER.size + 20 + len(b"\x00garbage")
    spool.close()


def test_spool_of_the_earlier_format_is_converted_without_loss(tmp_path):
    legacy = struct.Struct("<IIBIQ")
    with open(tmp_path / "000000000001.seg", "wb") as f:
        for i, payload in enumerate((b"old-1", b"old-2", b"old-3")):
            f.write(legacy.pack(len(payload), zlib.crc32(payload), KIND_TRACES, i + 1, T0) + payload)
    (tmp_path / "cursor").write_text(f"1 {legacy.size + 5}\n")  # the first record was committed
    spool = Spool(tmp_path, max_bytes=10**6)
    assert [(r.payload, r.rows) for r in spool.read(100)] == [(b"old-2", 2), (b"old-3", 3)]
    spool.close()


# --- SIGKILL right after 200 -------------------------------------------------------------------------

_PROC = """
import json, sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
from collectors.receiver import Receiver, ReceiverConfig
from schema.migrate import migrate
from schema.store import connect

mode, store_dir, spool_dir, port_file = sys.argv[1:5]
store = connect(f"chdb://{{store_dir}}", "infercost")
migrate(store, retention_days=3650)
if mode == "serve":
    # the writer never runs before the kill: acknowledged spans exist only in the spool
    r = Receiver(ReceiverConfig(port=0, spool_dir=Path(spool_dir), batch_max_rows=10**9,
                                batch_max_seconds=3600), store).start()
    Path(port_file).write_text(str(r.port))
    while True:
        time.sleep(1)
else:
    r = Receiver(ReceiverConfig(port=0, spool_dir=Path(spool_dir), batch_max_seconds=0.05), store).start()
    flushed = r.flush(60)
    rows = store.query("SELECT SpanId FROM otel_traces ORDER BY SpanId", tag="test").result_rows
    r.stop()
    print(json.dumps({{"flushed": flushed, "span_ids": [row[0] for row in rows]}}))
"""


def test_sigkill_after_200_loses_nothing(tmp_path):
    script = tmp_path / "proc.py"
    script.write_text(_PROC.format(root=str(ROOT)))
    args = [str(tmp_path / "store"), str(tmp_path / "spool"), str(tmp_path / "port")]
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    proc = subprocess.Popen([sys.executable, str(script), "serve", *args], cwd=tmp_path, env=env)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "port").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "receiver subprocess did not start"
            time.sleep(0.05)
        url = f"http://127.0.0.1:{(tmp_path / 'port').read_text()}/v1/traces"
        with httpx.Client(timeout=30) as client:
            for k in range(5):
                assert client.post(url, content=_request(k * 40, 40), headers=PB).status_code == 200
    finally:
        proc.send_signal(signal.SIGKILL)  # right after the last 200
        proc.wait(30)
    out = subprocess.run([sys.executable, str(script), "replay", *args], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["flushed"] is True
    assert result["span_ids"] == _span_ids(0, 200)


# --- the store going away mid-load -------------------------------------------------------------------

class FaultyConnection(FaultyInserts):
    """The real store behind a switch: while ``down``, every insert raises StoreUnavailable."""

    def __init__(self, store):
        super().__init__(store)
        self.embedded = store.embedded
        self.down = False
        self.refused = 0

    def _check(self):
        if self.down:
            self.refused += 1
            raise StoreUnavailable("injected fault: connection refused", "test")


def _wait(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def test_store_unavailable_mid_load_gets_every_accepted_span(store, tmp_path):
    conn = FaultyConnection(store)
    r = Receiver(ReceiverConfig(port=0, spool_dir=tmp_path / "spool", batch_max_seconds=0.05), store, sink=conn).start()
    try:
        with httpx.Client(timeout=30) as client:
            url = f"{r.url}/v1/traces"
            for k in range(4):
                assert client.post(url, content=_request(k * 50, 50), headers=PB).status_code == 200
            assert r.flush(20)
            conn.down = True
            for k in range(4, 12):
                assert client.post(url, content=_request(k * 50, 50), headers=PB).status_code == 200
            _wait(lambda: conn.refused >= 2 and not r.stats.store_available)
            stats = r.stats
            assert stats.queue_rows == 400 and stats.spooled_bytes > 400 * 30 and stats.stored == 200
            assert client.get(f"{r.url}/health").json()["status"] == "degraded"
            assert "infercost_receiver_store_available 0.0" in client.get(f"{r.url}/metrics").text
            conn.down = False
            assert r.flush(30)
        ids = [row[0] for row in store.query("SELECT SpanId FROM otel_traces ORDER BY SpanId", tag="test").result_rows]
        assert ids == _span_ids(0, 600)  # every span once
        stats = r.stats
        assert (stats.stored, stats.queue_rows, stats.spooled_bytes, stats.store_available) == (600, 0, 0, True)
    finally:
        r.stop()


def test_backpressure_429_when_queue_full_503_when_spool_full(store, tmp_path):
    conn = FaultyConnection(store)
    r = Receiver(ReceiverConfig(port=0, spool_dir=tmp_path / "spool", batch_max_rows=10**9, batch_max_seconds=3600,
                                queue_max_rows=100, spool_max_bytes=64 * 1024, retry_after_s=3), store, sink=conn).start()
    try:
        with httpx.Client(timeout=30) as client:
            url = f"{r.url}/v1/traces"
            assert client.post(url, content=_request(0, 100), headers=PB).status_code == 200
            resp = client.post(url, content=_request(100, 10), headers=PB)
            assert resp.status_code == 429 and resp.headers["retry-after"] == "3"
            # store down: the spool absorbs beyond queue_max_rows until its byte limit, then 503
            r._stats.store_available = False
            statuses = [client.post(url, content=_request(1000 + k * 100, 100), headers=PB).status_code
                        for k in range(40)]
            assert statuses.count(200) >= 1 and statuses[-1] == 503
            accepted = 100 + 100 * statuses.count(200)
            assert r.stats.queue_rows == accepted and r.stats.throttled == 10 + 100 * statuses.count(503)
            resp = client.post(url, content=_request(99_000, 100), headers=PB)
            assert resp.status_code == 503 and resp.headers["retry-after"] == "3"
            assert "spool full" in resp.text
        assert r.flush(30)  # stop() drains; flush wakes the writer regardless of the batch timer
        assert store.scalar("SELECT count() FROM otel_traces", tag="test") == accepted
    finally:
        r.stop()


class RefusingConnection(FaultyConnection):
    """The real store, except that it refuses (StoreQueryError) any insert holding span id 0x..2a."""

    def raw_insert(self, table, data, fmt, **kwargs):
        body = data if isinstance(data, (bytes, bytearray)) else b"".join(data)  # bytes or the parts
        if (42).to_bytes(8, "big") in body:
            raise StorePayloadError("injected: Cannot parse input", "test")
        return self.store.raw_insert(table, data, fmt, **kwargs)


def test_data_the_store_refuses_is_quarantined_not_dropped(store, tmp_path):
    conn = RefusingConnection(store)
    r = Receiver(ReceiverConfig(port=0, spool_dir=tmp_path / "spool", batch_max_seconds=3600), store, sink=conn).start()
    try:
        with httpx.Client(timeout=30) as client:
            for k in range(3):  # span ids 1..10, 11..20 (holds no 42), 41..50 (holds 42)
                first = (0, 10, 40)[k]
                assert client.post(f"{r.url}/v1/traces", content=_request(first, 10), headers=PB).status_code == 200
        assert r.flush(20)
        stats = r.stats
        assert (stats.stored, stats.quarantined_rows, stats.queue_rows) == (20, 10, 0)
    finally:
        r.stop()
    assert store.scalar("SELECT count() FROM otel_traces", tag="test") == 20
    (bin_file,) = (tmp_path / "spool" / "quarantine").glob("*.bin")
    assert ExportTraceServiceRequest.FromString(bin_file.read_bytes()).resource_spans[0].scope_spans[0].spans[1].span_id \
        == (42).to_bytes(8, "big")
    assert "injected: Cannot parse input" in bin_file.with_suffix(".json").read_text()
