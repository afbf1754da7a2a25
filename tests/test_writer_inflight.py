"""The batching writer with two inserts in flight keeps the spool's no-loss contract.

Acknowledged data reaches the store once; the spool only drops (commits) what is stored. A batch is
split into parts inserted side by side on two clients; when one part fails and the other succeeds,
the batch is retried as the very same parts under the very same tokens (here and after a restart,
even one with a different ``inserts_in_flight``), so the stored part is not doubled and the failed
one is not lost. Spans are vLLM 0.32's captured ``llm_request`` spans (tests/producers.py), re-issued
with new ids, against the real embedded store.
"""

from __future__ import annotations

import threading
import time

import pytest

from collectors.otlp_traces import prepare_traces
from collectors.spool import KIND_TRACES, Record, Spool
from collectors.stats import ReceiverStats
from collectors.writer import BatchWriter, split_batch
from conftest import emptied
from schema.store_errors import StoreUnavailable
from tests.producers import vllm_llm_request, vllm_request

T0 = time.time_ns() - 3600 * 10**9  # an hour ago: inside the store's retention
RECORDS, SPANS_PER_RECORD = 6, 4


@pytest.fixture
def store(module_store):
    return emptied(module_store, "otel_traces", "llm_calls", "otel_traces_trace_id_ts")


def _payloads() -> tuple[list[bytes], set[str]]:
    """RECORDS requests of SPANS_PER_RECORD vLLM llm_request spans each (new ids); their span ids."""
    payloads, ids = [], set()
    for r in range(RECORDS):
        spans = []
        for s in range(SPANS_PER_RECORD):
            start = T0 + (r * SPANS_PER_RECORD + s) * 10**6
            span = vllm_llm_request("nonstream_length", traceparent=None, start_ns=start, end_ns=start + 8 * 10**8,
                                    prompt=21, completion=32, replica="replica-a")
            spans.append(span)
            ids.add(span["span_id"])
        payloads.append(vllm_request(spans).SerializeToString())
    return payloads, ids


def _cap(payloads: list[bytes]) -> int:
    """A byte cap of three and a half records: the writer reads up to seven (two caps, two clients)
    and splits six or seven records into two parts."""
    return max(len(p) for p in payloads) * 7 // 2 + 8


def _spool_all(spool: Spool, payloads: list[bytes]) -> None:
    """Append as the receiver does: validated by prepare_traces, with the span ids it found."""
    for payload in payloads:
        prepared = prepare_traces(payload)
        assert prepared.accepted == SPANS_PER_RECORD and len(prepared.span_ids) == 8 * SPANS_PER_RECORD
        spool.append(KIND_TRACES, prepared.payload, prepared.accepted, prepared.newest_ns, prepared.span_ids)


class Recording:
    """The real store; logs each trace insert (token, thread, outcome); ``fail`` inserts of this
    client raise StoreUnavailable (the first ones). ``clone()`` gives the writer's extra client, which
    fails ``lane_fail`` times."""

    def __init__(self, store, log: list, fail: int = 0, lane_fail: int = 0):
        self.store, self.log, self.fail, self.lane_fail = store, log, fail, lane_fail
        self.embedded = store.embedded
        self.clones: list = []

    def raw_insert(self, table, data, fmt, *, tag, settings=None):
        token = (settings or {}).get("insert_deduplication_token", "")
        name = threading.current_thread().name
        if self.fail:
            self.fail -= 1
            self.log.append((token, name, "failed"))
            raise StoreUnavailable("injected: connection reset", "test", "unreachable")
        result = self.store.raw_insert(table, data, fmt, tag=tag, settings=settings)
        self.log.append((token, name, "stored"))
        return result

    def clone(self):
        lane = Recording(self.store.clone(), self.log, fail=self.lane_fail)
        self.clones.append(lane)
        return lane

    def close(self):
        self.store.close()


class Sequential(Recording):
    """The same, without ``clone``: a writer given this sink inserts one part at a time."""

    clone = None


def _drain(spool: Spool, sink, stats: ReceiverStats, cap: int) -> None:
    """Run a writer with two inserts in flight until the spool is empty, then close the spool."""
    writer = BatchWriter(spool, sink, stats, batch_max_seconds=0.01, inserts_in_flight=2, batch_cap_bytes=cap)
    writer.start()
    assert writer.flush(30)
    writer.stop(1)
    spool.close()


def _stored(store) -> tuple[int, int, set[str]]:
    ids = {r[0] for r in store.query("SELECT SpanId FROM otel_traces", tag="test").result_rows}
    return (store.scalar("SELECT count() FROM otel_traces", tag="test"),
            store.scalar("SELECT count() FROM llm_calls", tag="test"), ids)


def test_split_batch_keeps_order_and_balances_bytes():
    records = [Record(KIND_TRACES, b"x" * size, 1, 0, 1, offset, offset + size)
               for offset, size in zip((8, 108, 208, 508, 608), (100, 100, 300, 100, 100))]
    assert split_batch(records, 10**6, 700) == [records]  # within the caps: one insert
    # 700 bytes, cap 400: two parts; a record goes to the next part when more than half of it lies
    # past the part's share (350); the third record (200..500) has its middle at 350, so it stays
    assert split_batch(records, 10**6, 400) == [records[:3], records[3:]]
    # cap 300: three parts, shares 233 and 467: the third record's middle (350) is past 233, the
    # fourth's (550) past 467
    assert split_batch(records, 10**6, 300) == [records[:2], records[2:3], records[3:]]
    assert split_batch(records, 10**6, 1) == [[r] for r in records]  # never an empty part
    assert split_batch(records, 2, 10**6) == [records[:2], records[2:3], records[3:]]  # 5 rows, 2 a part
    assert split_batch(records[:1], 10**6, 1) == [records[:1]]


def test_one_part_fails_while_the_other_is_stored_and_every_span_lands_once(store, tmp_path):
    payloads, ids = _payloads()
    spool = Spool(tmp_path / "spool", max_bytes=10**7)
    _spool_all(spool, payloads)
    log: list = []
    sink = Recording(store, log, lane_fail=1)
    stats = ReceiverStats()
    _drain(spool, sink, stats, _cap(payloads))

    main = [(t, o) for t, n, o in log if n == "infercost-writer"]
    lane = [(t, o) for t, n, o in log if n.startswith("infercost-writer-lane")]
    # part 0 stored on the first try and again on the retry (same token: the store keeps it once);
    # part 1 failed on the extra client, then stored under its same token
    assert [o for _, o in main] == ["stored", "stored"] and len({t for t, _ in main}) == 1
    assert [o for _, o in lane] == ["failed", "stored"] and len({t for t, _ in lane}) == 1
    assert main[0][0] != lane[0][0]
    assert (stats.stored, stats.inserts, stats.store_available) == (RECORDS * SPANS_PER_RECORD, 2, True)
    assert spool.pending_records == 0
    assert _stored(store) == (RECORDS * SPANS_PER_RECORD, RECORDS * SPANS_PER_RECORD, ids)


def test_a_restart_replays_the_interrupted_parts_under_their_tokens(store, tmp_path):
    """Crash while part 1 keeps failing (part 0 stored): nothing is committed; the next writer — one
    insert at a time now — replays the same two parts with the same tokens; every span once."""
    payloads, ids = _payloads()
    spool = Spool(tmp_path / "spool", max_bytes=10**7)
    _spool_all(spool, payloads)
    first: list = []
    writer = BatchWriter(spool, Recording(store, first, lane_fail=10**6), ReceiverStats(), batch_max_seconds=0.01,
                         inserts_in_flight=2, batch_cap_bytes=_cap(payloads))
    writer.start()
    deadline = time.monotonic() + 30
    while not any(o == "stored" for *_, o in first) or not any(o == "failed" for *_, o in first):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    writer.stop(0)  # gives up at once, like a crash: the batch stays spooled, marked in flight
    spool.close()
    tokens = sorted({t for t, *_ in first})
    assert len(tokens) == 2
    assert _stored(store)[0] == 12  # part 0 (three records) is in the store, part 1 is not

    spool = Spool(tmp_path / "spool", max_bytes=10**7)
    assert spool.pending_records == RECORDS  # nothing was committed
    second: list = []
    stats = ReceiverStats()
    _drain(spool, Sequential(store, second), stats, _cap(payloads))
    assert sorted(t for t, *_ in second) == tokens and {o for *_, o in second} == {"stored"}
    assert stats.stored == RECORDS * SPANS_PER_RECORD
    assert _stored(store) == (RECORDS * SPANS_PER_RECORD, RECORDS * SPANS_PER_RECORD, ids)


def test_a_span_resent_into_both_parts_makes_them_run_one_after_the_other(store, tmp_path):
    """An exporter retry spooled the same request twice, so the two parts of the batch share its
    spans: inserted side by side, neither insert would see the other's span keys and those spans
    would be stored twice. The parts run one after the other on the writer's own client instead."""
    payloads, ids = _payloads()
    spool = Spool(tmp_path / "spool", max_bytes=10**7)
    _spool_all(spool, payloads + [payloads[0]])  # record 0 again: parts [0..3] and [4, 5, 0]
    log: list = []
    stats = ReceiverStats()
    _drain(spool, Recording(store, log), stats, _cap(payloads))
    assert [(n, o) for _, n, o in log] == [("infercost-writer", "stored")] * 2  # two parts, one client
    assert len({t for t, *_ in log}) == 2
    assert stats.stored == (RECORDS + 1) * SPANS_PER_RECORD  # rows the writer delivered (the store drops 4)
    assert _stored(store) == (RECORDS * SPANS_PER_RECORD, RECORDS * SPANS_PER_RECORD, ids)


def test_prepare_traces_hands_over_the_ids_of_the_accepted_spans_only():
    start = T0
    good = vllm_llm_request("nonstream_length", traceparent=None, start_ns=start, end_ns=start + 10**9,
                            prompt=21, completion=32, replica="replica-a")
    bad = vllm_llm_request("nonstream_length", traceparent=None, start_ns=start, end_ns=start - 1,  # ends first
                           prompt=21, completion=32, replica="replica-a")
    prepared = prepare_traces(vllm_request([bad, good]).SerializeToString())
    assert (prepared.accepted, prepared.rejected, prepared.span_ids) == (1, 1, bytes.fromhex(good["span_id"]))
