"""OTLP span ingest throughput into the embedded store (chDB on a temporary directory).

Run: ``.venv/bin/python benchmarks/bench_ingest.py [--spans 102400] [--naive-spans 20480] [--clients 2]``
(``--e2e-only``: the end-to-end rounds alone: receiver CPU and memory).

Measured in one run, on the same engine, each into a freshly migrated database:

1. **end to end**: client processes POST pre-encoded OTLP/HTTP protobuf requests (512 vLLM-shaped
   ``llm_request`` spans each, the SDK's default batch size) with several requests in flight to
   ``infercost collector`` running in a process of its own on a fresh embedded store (as deployed:
   migrated, cost jobs scheduled); timed from the first request until its ``/health`` says every
   span is stored (so it includes validation, the fsync'ed spool, the batching writer and
   ClickHouse decoding + the materialized views: ``llm_calls`` and the others on ``otel_traces``).
   Its CPU-seconds and resident memory are read from ``/proc/<pid>``: RSS idle (migrated, before
   the load), peak under load (sampled every 20 ms) and 5 s after; its CPU is also split by thread
   name (``/proc/<pid>/task``): ClickHouse's pools (``ThreadPool`` runs the insert and its views,
   ``MergeMutate`` the merges) apart from the Python threads (``python``: HTTP, validation, spool,
   writer);
2. **decode + insert**: :func:`collectors.otlp_traces.prepare_traces` on every request, then
   :func:`collectors.ingest.insert_trace_payloads` in batches of up to 100,000 spans (the writer's
   ``batch_cap_rows``; the receiver's writer also caps an insert at ``batch_cap_bytes``, 16 MiB:
   under load its batches grow to the caps, amortising the store's fixed per-insert cost of
   ~0.1-0.2 CPU-s: part creation, planning five materialized views);
3. **naive baseline**: a per-span Python loop over the parsed spans building exporter rows
   (hex ids, stringified attributes) and inserting them with ``Store.insert`` in batches of
   10,240 rows;
4. **duplicates**: after (2), the same spans delivered again, batched differently (a quarter of the
   batch size, in reverse order), as exporter retries and spool replays do; the store must drop
   every one (migration 1000: ``otel_traces`` keeps its count) — timed like (2).

5. **ClickHouse's own limit** (parse + flatten): the same request bodies, in the same batches as
   (2), inserted into ``otlp_traces_in`` of a database whose span chain is cut right after the
   decoder view (``otlp_traces_decode_mv`` writes exporter rows into the Null table
   ``otlp_spans_in`` and nothing reads them): protobuf parse + flatten to one row per span, no
   dedup, no table write, no chained views; and **parse** alone (the decoder view dropped too).
   Ingest cannot be faster than this on the same engine, so (1) and (2) are printed as a ratio to it.

``--rounds N`` (default 3) repeats (5), (2) and (1) alternately N times and prints medians (a shared
machine's drift hits each the same way); CPU-seconds per 100k spans are of the process that runs
the embedded engine (merges included): this one for (2)-(5), the collector's for (1); wall spans/s
over the timed part.

``--prepare [--rounds 9]``: the receiver's Python validation alone against protobuf's parse of the same bodies (:func:`bench_prepare`).

``--breakdown [--reps 5]`` prices parts of the insert: 102,400-span inserts alternated over databases
of one engine (jobs stopped) that differ in one thing each: as migrated; without ``llm_calls_mv``;
with ``llm_calls_mv`` writing into a Null table (its expressions without the ``llm_calls`` write
and the rollups chained on it); with the decoder view writing int and double attribute values as
'' instead of their decimal text (what turning numbers into strings costs). Prints median CPU-s
per insert of each and the difference to the first.

``--chain 512,5120,25600 [--reps 9]``: the fixed and per-span cost of one insert along the span chain
(as migrated, without the views on ``otel_traces``, the limit, parse alone) at each insert size
(:func:`bench_chain`).

The once-only step's own cost (dedup before ``otel_traces``) was measured against the schema without it
(benchmarks/README.md); that schema is no longer in the tree.

Prints spans/s (wall clock) for each and the ratio of (1) and (2) to (3), and spans per CPU-second
of the process running the embedded ClickHouse (the HTTP clients' CPU is excluded and shown apart),
which is less distorted than wall time when other work shares the machine's cores; and the
collector's resident memory (idle, peak under load, after; goal: peak <= 700 MB).
Set ``JE_MALLOC_CONF`` (e.g. empty: ClickHouse's allocator default) to compare the embedded
engine's allocator settings (:data:`schema.store.EMBEDDED_MALLOC_CONF`); ``--batch-cap-rows`` /
``--batch-cap-bytes`` set the collector's largest insert (``INFERCOST_BATCH_CAP_ROWS`` / ``_BYTES``);
``--inserts-in-flight 1,2`` runs the end-to-end round once per value (``INFERCOST_INSERTS_IN_FLIGHT``:
inserts the writer runs side by side), alternating their order from round to round;
``--drain [--inserts-in-flight 1,2]`` times the batching writer alone emptying a spool that holds
every body (sustained load: every batch at the caps) — :func:`bench_drain`.
Sustained load (the writer's batches reach the caps, more parts to merge):
``--e2e-only --spans 409600 --rounds 1`` (800 requests, ~260 MB of OTLP).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SPANS_PER_REQUEST = 512
T0 = 1_764_400_000_000_000_000


def make_requests(n_requests: int, seed: int = 0) -> list[bytes]:
    """``n_requests`` ExportTraceServiceRequest bodies of vLLM ``llm_request`` spans (14 attributes each)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue

    from schema import semconv as sc

    bodies = []
    for r in range(n_requests):
        req = ExportTraceServiceRequest()
        rs = req.resource_spans.add()
        for key, value in [(sc.SERVICE_NAME, "vllm"), (sc.SERVICE_INSTANCE_ID, f"replica-{r % 4}"),
                           (sc.GPU_TYPE, "H100"), (sc.GPU_COUNT, "1"), ("telemetry.sdk.language", "python")]:
            rs.resource.attributes.add(key=key).value.string_value = value
        ss = rs.scope_spans.add()
        ss.scope.name = "vllm.tracing"
        for i in range(SPANS_PER_REQUEST):
            n = (seed * n_requests + r) * SPANS_PER_REQUEST + i + 1
            start = T0 + n * 1_000_000
            span = ss.spans.add(trace_id=n.to_bytes(16, "big"), span_id=n.to_bytes(8, "big"),
                                parent_span_id=(n + 1).to_bytes(8, "big"), name=sc.VLLM_SPAN_NAME, kind=2,
                                start_time_unix_nano=start, end_time_unix_nano=start + 2_500_000_000)
            a = span.attributes
            a.add(key=sc.GEN_AI_REQUEST_ID, value=AnyValue(string_value=f"chatcmpl-{n}"))
            a.add(key=sc.GEN_AI_USAGE_PROMPT_TOKENS, value=AnyValue(int_value=200 + n % 3000))
            a.add(key=sc.GEN_AI_USAGE_COMPLETION_TOKENS, value=AnyValue(int_value=50 + n % 500))
            for key in (sc.GEN_AI_LATENCY_TTFT, sc.GEN_AI_LATENCY_E2E, sc.GEN_AI_LATENCY_QUEUE,
                        sc.GEN_AI_LATENCY_PREFILL, sc.GEN_AI_LATENCY_DECODE, sc.GEN_AI_LATENCY_INFERENCE):
                a.add(key=key, value=AnyValue(double_value=0.001 * (n % 2000) + 0.0123))
            a.add(key=sc.GEN_AI_RESPONSE_FINISH_REASONS, value=AnyValue(string_value='["stop"]'))
            a.add(key=sc.GEN_AI_REQUEST_MAX_TOKENS, value=AnyValue(int_value=1024))
            a.add(key=sc.GEN_AI_REQUEST_TEMPERATURE, value=AnyValue(double_value=0.7))
            a.add(key=sc.GEN_AI_REQUEST_TOP_P, value=AnyValue(double_value=0.95))
            a.add(key=sc.GEN_AI_REQUEST_N, value=AnyValue(int_value=1))
        bodies.append(req.SerializeToString())
    return bodies


def _client(url: str, bodies: list[bytes], in_flight: int, out) -> None:
    """A client process: POST every body with ``in_flight`` threads; report (ok, non-200 statuses)."""
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    client = httpx.Client(timeout=120, trust_env=False, limits=httpx.Limits(max_connections=in_flight))
    statuses = []

    def post(body):
        while True:
            resp = client.post(url, content=body, headers={"content-type": "application/x-protobuf"})
            if resp.status_code in (429, 503):  # back-pressure: honour Retry-After (as OTLP exporters do)
                statuses.append(resp.status_code)
                time.sleep(float(resp.headers.get("retry-after", "1")))
                continue
            return resp.status_code

    with ThreadPoolExecutor(in_flight) as pool:
        codes = list(pool.map(post, bodies))
    out.put((codes.count(200), statuses + [c for c in codes if c != 200]))


def fresh_store(engine_dir: str, name: str):
    from schema.migrate import migrate
    from schema.store import connect

    store = connect(f"chdb://{engine_dir}", name)
    migrate(store, retention_days=3650)
    return store


class ReceiverProcess:
    """``infercost collector`` in a process of its own, on a fresh embedded store under ``data_dir``.

    As deployed: the CLI migrates the store (retention 3650 days, so the bench's 2025 timestamps
    are kept), runs the receiver, its spool and writer, and the cost jobs' refreshable views. A
    thread samples the process's resident memory (``/proc/<pid>/status`` ``VmRSS``, bytes) every
    ``interval_s``; ``cpu()`` is its user + system CPU-seconds (``/proc/<pid>/stat``).
    """

    def __init__(self, data_dir: str, interval_s: float = 0.02, env: dict | None = None):
        import subprocess

        env = dict(os.environ, INFERCOST_DATA_DIR=data_dir, INFERCOST_RETENTION_DAYS="3650",
                   PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env or {}))
        self.proc = subprocess.Popen([sys.executable, "-m", "infercost.cli", "collector", "--port", "0"],
                                     cwd=data_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True)
        self.url = ""
        for line in self.proc.stdout:
            if line.startswith("OTLP/HTTP receiver on "):
                self.url = line.split()[3]
                break
        assert self.url, f"collector did not start (exit {self.proc.poll()})"
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, args=(interval_s,), daemon=True)
        self._thread.start()

    def _status(self, field: str) -> int:
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
        return 0

    def _sample(self, interval_s: float) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append((time.perf_counter(), self._status("VmRSS")))
            except (OSError, ValueError):
                return
            self._stop.wait(interval_s)

    def rss(self) -> int:
        """Resident memory now, bytes."""
        return self._status("VmRSS")

    def hwm(self) -> int:
        """Peak resident memory since the process started (``VmHWM``), bytes."""
        return self._status("VmHWM")

    def peak(self, since: float) -> int:
        """Largest sampled resident memory since ``since`` (``time.perf_counter()``), bytes."""
        return max((rss for t, rss in self.samples if t >= since), default=0)

    def threads_cpu(self) -> dict[tuple[str, str], float]:
        """CPU-seconds so far of each live thread, keyed by (thread id, name from ``/proc/<pid>/task/*/comm``):
        ClickHouse names its pools (``ThreadPool``, ``MergeMutate``, ...); Python's threads are ``python``."""
        out = {}
        for tid in os.listdir(f"/proc/{self.proc.pid}/task"):
            try:
                with open(f"/proc/{self.proc.pid}/task/{tid}/comm") as f:
                    name = f.read().strip()
                with open(f"/proc/{self.proc.pid}/task/{tid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:  # the thread ended meanwhile
                continue
            out[(tid, name)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return out

    def cpu(self) -> float:
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def health(self) -> dict:
        import httpx

        return httpx.get(f"{self.url}/health", timeout=30, trust_env=False).json()

    def inserts(self) -> int:
        """The writer's batched inserts so far (its ``/metrics`` counter)."""
        import httpx

        text = httpx.get(f"{self.url}/metrics", timeout=30, trust_env=False).text
        return int(float(next(line.split()[1] for line in text.splitlines() if line.startswith("infercost_receiver_inserts_total"))))

    def stop(self) -> str:
        """SIGINT (the CLI drains and stops); returns its last line ('stopped: N spans stored ...')."""
        import signal

        self._stop.set()
        self.proc.send_signal(signal.SIGINT)
        out, _ = self.proc.communicate(timeout=120)
        return out.strip().splitlines()[-1] if out.strip() else ""


MB = 1_000_000


def bench_end_to_end(engine_dir: str, bodies: list[bytes], clients: int, in_flight: int,
                     env: dict | None = None) -> tuple[float, ...]:
    """(1): returns (spans/s wall, receiver CPU-s per 100k spans, RSS idle, peak under load, after; bytes).

    The receiver is ``infercost collector`` in its own process (:class:`ReceiverProcess`); its CPU
    and memory are read from ``/proc``. Idle: 2 s after it listens (migrated, nothing received).
    Peak: the largest sample from the first request until everything is stored. After: 5 s later.
    """
    data_dir = tempfile.mkdtemp(prefix="bench-collector-", dir=engine_dir)
    receiver = ReceiverProcess(data_dir, env=env)
    time.sleep(2.0)
    idle = receiver.rss()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    shares = [bodies[i::clients] for i in range(clients)]
    procs = [ctx.Process(target=_client, args=(f"{receiver.url}/v1/traces", share, in_flight, out)) for share in shares]
    expected = len(bodies) * SPANS_PER_REQUEST
    cpu0, threads0 = receiver.cpu(), receiver.threads_cpu()
    started = time.perf_counter()
    for p in procs:
        p.start()
    results = [out.get() for _ in procs]
    for p in procs:
        p.join()
    deadline = time.monotonic() + 600
    while True:
        health = receiver.health()
        if (health["stored"] >= expected and health["queue_rows"] == 0) or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    elapsed = time.perf_counter() - started
    cpu = receiver.cpu() - cpu0
    by_name: dict[str, float] = {}
    for key, seconds in receiver.threads_cpu().items():  # threads that ended during the load are not counted
        by_name[key[1]] = by_name.get(key[1], 0.0) + seconds - threads0.get(key, 0.0)
    peak = receiver.peak(started)
    inserts = receiver.inserts()
    time.sleep(5.0)
    after = receiver.rss()
    hwm = receiver.hwm()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    last = receiver.stop()
    ok = sum(r[0] for r in results)
    other = [c for r in results for c in r[1]]
    assert ok == len(bodies) and health["stored"] == expected, f"{ok} requests ok, {health['stored']} stored, expected {expected}"
    assert last.startswith(f"stopped: {expected} spans stored"), last
    print(f"  end to end: {expected} spans in {elapsed:.2f} s wall, {cpu:.2f} CPU-s in the receiver process "
          f"({expected / cpu:,.0f} spans/CPU-s); clients {children.ru_utime + children.ru_stime:.2f} CPU-s (cumulative); "
          f"{inserts} inserts; {len(other)} back-pressure answers retried; receiver RSS idle {idle / MB:,.0f} MB, peak under load "
          f"{peak / MB:,.0f} MB (VmHWM {hwm / MB:,.0f} MB), 5 s after {after / MB:,.0f} MB")
    print("    receiver CPU-s by thread name: " + ", ".join(
        f"{name} {seconds:.2f}" for name, seconds in sorted(by_name.items(), key=lambda kv: -kv[1]) if seconds >= 0.01))
    return expected / elapsed, cpu * 100_000 / expected, idle, peak, after


def bench_decode_insert(engine_dir: str, bodies: list[bytes], duplicates: bool = True) -> tuple[float, float]:
    """(2) and, with ``duplicates``, (4): returns (spans/s wall, CPU-s per 100k spans) of (2)."""
    from collectors.ingest import insert_trace_payloads
    from collectors.otlp_traces import prepare_traces

    store = fresh_store(engine_dir, "bench_direct")
    cpu0 = time.process_time()
    started = time.perf_counter()
    payloads = [prepare_traces(b).payload for b in bodies]
    decoded = time.perf_counter()
    per_insert = max(1, 100_000 // SPANS_PER_REQUEST)
    for i in range(0, len(payloads), per_insert):
        insert_trace_payloads(store, payloads[i:i + per_insert])
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu0
    total = store.scalar("SELECT count() FROM otel_traces", tag="bench.count")
    assert total == len(bodies) * SPANS_PER_REQUEST
    print(f"  decode + insert: {total} spans in {elapsed:.2f} s wall (validation {decoded - started:.2f} s), "
          f"{cpu:.2f} CPU-s ({total / cpu:,.0f} spans/CPU-s)")
    has_dedup = store.scalar("SELECT count() FROM system.tables WHERE database = currentDatabase() "
                             "AND name = 'otel_span_keys'", tag="bench.count")
    if has_dedup and duplicates:
        cpu0 = time.process_time()
        started = time.perf_counter()
        again = list(reversed(payloads))
        for i in range(0, len(again), max(1, per_insert // 4)):
            insert_trace_payloads(store, again[i:i + max(1, per_insert // 4)])
        dup_elapsed, dup_cpu = time.perf_counter() - started, time.process_time() - cpu0
        after = store.scalar("SELECT count() FROM otel_traces", tag="bench.count")
        calls = store.scalar("SELECT count() FROM llm_calls", tag="bench.count")
        assert after == total and calls == total, f"duplicates stored: {after} spans, {calls} calls for {total}"
        print(f"  duplicates: {total} spans re-sent in smaller batches, all dropped (otel_traces {after}, "
              f"llm_calls {calls}) in {dup_elapsed:.2f} s wall, {dup_cpu:.2f} CPU-s")
    store.command("DROP DATABASE bench_direct SYNC", tag="bench.drop")
    return total / elapsed, cpu * 100_000 / total


def bench_limit(engine_dir: str, bodies: list[bytes], flatten: bool = True) -> tuple[float, float]:
    """(5): ClickHouse's parse (+ flatten) of the same bodies in the same batches as (2).

    Returns (spans/s wall, CPU-s per 100k spans). ``flatten=False``: parse alone.
    """
    from collectors.ingest import insert_trace_payloads

    store = fresh_store(engine_dir, "bench_limit")
    store.command("DROP VIEW otlp_spans_dedup_mv", tag="bench.limit")  # the chain ends at the decoder
    if not flatten:
        store.command("DROP VIEW otlp_traces_decode_mv", tag="bench.limit")
    per_insert = max(1, 100_000 // SPANS_PER_REQUEST)
    cpu0 = time.process_time()
    started = time.perf_counter()
    for i in range(0, len(bodies), per_insert):
        insert_trace_payloads(store, bodies[i:i + per_insert])
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu0
    total = len(bodies) * SPANS_PER_REQUEST
    assert store.scalar("SELECT count() FROM otel_traces", tag="bench.count") == 0
    print(f"  {'parse + flatten' if flatten else 'parse only'}: {total} spans in {elapsed:.2f} s wall, "
          f"{cpu:.2f} CPU-s ({total / cpu:,.0f} spans/CPU-s)")
    store.command("DROP DATABASE bench_limit SYNC", tag="bench.drop")
    return total / elapsed, cpu * 100_000 / total


def bench_naive(engine_dir: str, bodies: list[bytes]) -> float:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from collectors.otlp_common import attributes_to_map

    kinds = ["Unspecified", "Internal", "Server", "Client", "Producer", "Consumer"]
    codes = ["Unset", "Ok", "Error"]
    columns = ["Timestamp", "TraceId", "SpanId", "ParentSpanId", "TraceState", "SpanName", "SpanKind", "ServiceName",
               "ResourceAttributes", "ScopeName", "ScopeVersion", "SpanAttributes", "Duration", "StatusCode",
               "StatusMessage"]
    store = fresh_store(engine_dir, "bench_naive")
    cpu0 = time.process_time()
    started = time.perf_counter()
    rows = []
    total = 0
    for body in bodies:
        req = ExportTraceServiceRequest.FromString(body)
        for rs in req.resource_spans:
            resource = attributes_to_map(rs.resource.attributes)
            for ss in rs.scope_spans:
                for sp in ss.spans:  # the per-span Python loop
                    rows.append([sp.start_time_unix_nano, sp.trace_id.hex(), sp.span_id.hex(), sp.parent_span_id.hex(),
                                 sp.trace_state, sp.name, kinds[sp.kind], resource.get("service.name", ""), resource,
                                 ss.scope.name, ss.scope.version, attributes_to_map(sp.attributes),
                                 sp.end_time_unix_nano - sp.start_time_unix_nano, codes[sp.status.code],
                                 sp.status.message])
        if len(rows) >= 10_240:
            store.insert("otel_traces", rows, columns, tag="bench.naive")
            total += len(rows)
            rows = []
    if rows:
        store.insert("otel_traces", rows, columns, tag="bench.naive")
        total += len(rows)
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu0
    assert store.scalar("SELECT count() FROM otel_traces", tag="bench.count") == total
    print(f"  naive per-span loop: {total} spans in {elapsed:.2f} s wall, {cpu:.2f} CPU-s "
          f"({total / cpu:,.0f} spans/CPU-s)")
    store.command("DROP DATABASE bench_naive SYNC", tag="bench.drop")
    return total / elapsed


def bench_drain(engine_dir: str, bodies: list[bytes], in_flight: list[str], rounds: int) -> None:
    """``--drain``: the batching writer alone, emptying a spool that holds every body (a backlog after
    a store outage, or sustained load: every batch reaches the caps). Per round and per value of
    ``inserts_in_flight`` (order alternated): a fresh database on this engine, cost jobs stopped, the
    bodies spooled as the receiver spools them (validated, span ids kept), then timed from the
    writer's start until the spool is empty. Prints wall spans/s, CPU-s per 100k spans of this process
    (the embedded engine included, merges too) and its peak RSS growth during the drain (sampled
    every 20 ms); medians over rounds. A value ``N@M`` runs N inserts in flight with a byte cap of M MiB
    per insert (default: the writer's 16 MiB), e.g. ``2@8`` keeps the bytes in flight of ``1``."""
    from collectors.otlp_traces import prepare_traces
    from collectors.spool import KIND_TRACES, Spool
    from collectors.stats import ReceiverStats
    from collectors.writer import BATCH_CAP_BYTES, BatchWriter
    from schema import jobs

    prepared = [prepare_traces(b) for b in bodies]
    spans = sum(p.accepted for p in prepared)
    results: dict[str, list[tuple[float, float, float]]] = {n: [] for n in in_flight}

    def rss() -> int:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))

    for rnd in range(rounds):
        for key in (in_flight if rnd % 2 == 0 else list(reversed(in_flight))):
            n, _, cap_mib = key.partition("@")
            n, cap = int(n), int(float(cap_mib) * 1024 * 1024) if cap_mib else BATCH_CAP_BYTES
            store = fresh_store(engine_dir, f"bench_drain_{rnd}_{n}")
            jobs.stop(store)
            spool = Spool(tempfile.mkdtemp(prefix="spool-", dir=engine_dir), max_bytes=4 << 30)
            for p in prepared:
                spool.append(KIND_TRACES, p.payload, p.accepted, p.newest_ns, p.span_ids)
            stats = ReceiverStats()
            writer = BatchWriter(spool, store, stats, batch_max_seconds=0.01, inserts_in_flight=n, batch_cap_bytes=cap)
            base, peak, stop = rss(), [0], threading.Event()

            def sample():
                while not stop.is_set():
                    peak[0] = max(peak[0], rss())
                    stop.wait(0.02)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            cpu0, started = time.process_time(), time.perf_counter()
            writer.start()
            assert writer.flush(600)
            elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu0
            stop.set()
            sampler.join()
            writer.stop(1)
            spool.close()
            stored = store.scalar("SELECT count() FROM otel_traces", tag="bench.count")
            assert stored == spans == stats.stored, (stored, spans, stats.stored)
            store.command(f"DROP DATABASE bench_drain_{rnd}_{n} SYNC", tag="bench.drop")
            store.close()
            results[key].append((spans / elapsed, cpu * 100_000 / spans, (peak[0] - base) / MB))
            print(f"  drain, {n} insert(s) in flight, cap {cap / 2**20:g} MiB: {spans} spans in {elapsed:.2f} s wall, {cpu:.2f} CPU-s, "
                  f"{stats.inserts} inserts, RSS +{(peak[0] - base) / MB:,.0f} MB at peak", flush=True)
    print(f"medians of {rounds} rounds; load average now {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    first = sorted(r[0] for r in results[in_flight[0]])[rounds // 2]
    for n, rows in results.items():
        rate, cpu, grow = (sorted(r[k] for r in rows)[rounds // 2] for k in range(3))
        print(f"  {n} in flight (N@MiB): {rate:,.0f} spans/s ({rate / first:.2f}x of {in_flight[0]}), "
              f"{cpu:.2f} CPU-s per 100k spans, RSS +{grow:,.0f} MB at peak")


def bench_prepare(bodies: list[bytes], rounds: int) -> None:
    """The receiver's Python validation alone: :func:`collectors.otlp_traces.prepare_traces` on every
    body (as the receiver calls it: with time bounds), ``rounds`` times, alternated with the baseline
    it cannot go below, protobuf's own parse of the same bodies; median CPU-s per 100k spans of each
    and their ratio."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from collectors import otlp_common as common
    from collectors import otlp_traces

    bounds = common.TimeBounds.around(time.time_ns(), 3650, 300.0)
    spans = len(bodies) * SPANS_PER_REQUEST
    runs = {"protobuf parse": lambda body: ExportTraceServiceRequest.FromString(body),
            "prepare_traces": lambda body: otlp_traces.prepare_traces(body, common.PROTOBUF, bounds=bounds)}
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    for rnd in range(rounds):
        for name in (list(runs) if rnd % 2 == 0 else list(runs)[::-1]):
            run = runs[name]
            c0 = time.process_time()
            for body in bodies:
                run(body)
            cpu[name].append((time.process_time() - c0) / spans * 1e5)
    print(f"{spans} spans, medians of {rounds} alternating rounds "
          f"(load average now {' '.join(f'{x:.2f}' for x in os.getloadavg())}):")
    medians = {name: sorted(values)[len(values) // 2] for name, values in cpu.items()}
    for name, median in medians.items():
        print(f"  {name:15s} {median:.3f} CPU-s per 100k spans")
    print(f"  prepare_traces / parse: {medians['prepare_traces'] / medians['protobuf parse']:.2f}x")


def variant_stores(engine_dir: str, prefix: str, variants: dict[str, list[str]]) -> dict:
    """One freshly migrated database per variant (``<prefix>_<i>``, cost jobs stopped), each changed by
    the variant's statements; returns {variant name: store}."""
    from schema import jobs

    stores = {}
    for i, (name, statements) in enumerate(variants.items()):
        stores[name] = store = fresh_store(engine_dir, f"{prefix}_{i}")
        jobs.stop(store)
        for statement in statements:
            store.command(statement, tag=f"bench.{prefix}")
    return stores


def bench_breakdown(engine_dir: str, reps: int) -> None:
    from collectors.ingest import insert_trace_payloads
    from schema.migrate import MIGRATIONS_DIR
    from schema.sqltext import sql_statements

    def created(family: str, head: str) -> str:
        return next(s for s in sql_statements(MIGRATIONS_DIR / family) if s.startswith(head))

    calls_mv = created("1001_baseline_calls.sql", "CREATE MATERIALIZED VIEW IF NOT EXISTS llm_calls_mv")
    decoder = created("1000_baseline_spans.sql", "CREATE MATERIALIZED VIEW IF NOT EXISTS otlp_traces_decode_mv")
    no_numbers = (decoder.replace("v.value = 'int_value', toString(v.int_value),", "v.value = 'int_value', '',")
                  .replace("v.value = 'double_value', toString(v.double_value),", "v.value = 'double_value', '',"))
    assert no_numbers != decoder, "decoder text changed: update --breakdown"
    variants = {
        "as migrated": [],
        "without llm_calls_mv": ["DROP VIEW llm_calls_mv"],
        "llm_calls_mv into Null": ["DROP VIEW llm_calls_mv", "CREATE TABLE llm_calls_null AS llm_calls ENGINE = Null",
                                   calls_mv.replace("TO llm_calls", "TO llm_calls_null")],
        "numbers not stringified": ["DROP VIEW otlp_traces_decode_mv", no_numbers],
    }
    stores = variant_stores(engine_dir, "bench_part", variants)
    cpu: dict[str, list[float]] = {name: [] for name in stores}
    seed = 1
    for rep in range(reps):
        order = list(stores.items())
        for name, store in (order if rep % 2 == 0 else order[::-1]):
            bodies = make_requests(max(1, 102_400 // SPANS_PER_REQUEST), seed=seed)
            seed += 1
            c0 = time.process_time()
            insert_trace_payloads(store, bodies)
            cpu[name].append(time.process_time() - c0)
    med = {name: sorted(v)[len(v) // 2] for name, v in cpu.items()}
    base = med["as migrated"]
    print(f"  median CPU-s per 102,400-span insert, {reps} interleaved inserts each:")
    for name, value in med.items():
        print(f"    {name:26s} {value:6.3f}  ({value - base:+.3f} vs as migrated)")


def bench_chain(engine_dir: str, reps: int, sizes: list[int]) -> None:
    """``--chain``: the fixed and per-span cost of one insert along the span chain.

    For each insert size in ``sizes`` (spans; whole requests of 512), inserts alternated over four
    databases of one engine (jobs and merges stopped, the writer's deduplication-token settings):
    as migrated; without the views on ``otel_traces`` (every one the engine lists as depending on it:
    seven at migration 1000); the limit (chain cut
    after the decoder, as in (5)); protobuf parse alone. Prints the median CPU-s per insert of each
    (this process: the engine's threads included) and its paired ratio to as migrated.
    """
    from collectors.ingest import insert_trace_payloads

    probe = fresh_store(engine_dir, "bench_chain_probe")
    span_views = probe.scalar("SELECT dependencies_table FROM system.tables WHERE database = currentDatabase() "
                              "AND name = 'otel_traces'", tag="bench.chain")
    probe.command("DROP DATABASE bench_chain_probe SYNC", tag="bench.drop")
    variants = {
        "as migrated": [],
        "without the views on otel_traces": [f"DROP VIEW {v}" for v in span_views],
        "limit (parse + flatten)": ["DROP VIEW otlp_spans_dedup_mv"],
        "parse alone": ["DROP VIEW otlp_spans_dedup_mv", "DROP VIEW otlp_traces_decode_mv"],
    }
    stores = variant_stores(engine_dir, "bench_chain", variants)
    store = stores["as migrated"]
    store.command("SYSTEM STOP MERGES", tag="bench.chain")  # the whole engine: inserts alone are timed
    seed = 100
    for size in sizes:
        per_insert = max(1, size // SPANS_PER_REQUEST)
        cpu: dict[str, list[float]] = {name: [] for name in stores}
        for rep in range(reps):
            order = list(stores.items())
            for name, store in (order if rep % 2 == 0 else order[::-1]):
                bodies = make_requests(per_insert, seed=seed)
                seed += 1
                settings = {"insert_deduplication_token": f"chain-{seed}",
                            "deduplicate_blocks_in_dependent_materialized_views": 1}
                c0 = time.process_time()
                insert_trace_payloads(store, bodies, settings=settings)
                cpu[name].append(time.process_time() - c0)
        base = cpu["as migrated"]
        print(f"  {per_insert * SPANS_PER_REQUEST:,}-span inserts, {reps} alternated each (load {os.getloadavg()[0]:.1f}):")
        for name, values in cpu.items():
            ratios = sorted(v / b for v, b in zip(values, base))
            print(f"    {name:34s} median {sorted(values)[reps // 2]:.3f} CPU-s per insert, "
                  f"paired ratio to as migrated {ratios[reps // 2]:.2f}")
    for i in range(len(variants)):
        store.command(f"DROP DATABASE bench_chain_{i} SYNC", tag="bench.drop")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spans", type=int, default=102_400, help="spans for the end-to-end and direct runs")
    parser.add_argument("--naive-spans", type=int, default=20_480, help="spans for the naive baseline")
    parser.add_argument("--clients", type=int, default=2, help="client processes")
    parser.add_argument("--in-flight", type=int, default=4, help="concurrent requests per client process")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of the limit, decode+insert, end to end")
    parser.add_argument("--batch-cap-rows", type=int, default=None,
                        help="the collector's INFERCOST_BATCH_CAP_ROWS for the end-to-end runs (default: its own)")
    parser.add_argument("--batch-cap-bytes", type=int, default=None,
                        help="the collector's INFERCOST_BATCH_CAP_BYTES for the end-to-end runs (default: its own)")
    parser.add_argument("--inserts-in-flight", default="",
                        help="comma-separated INFERCOST_INSERTS_IN_FLIGHT values: one end-to-end run per value in "
                             "each round, alternated (e.g. 1,2 compares one insert at a time with two side by side)")
    parser.add_argument("--e2e-only", action="store_true",
                        help="only the end-to-end rounds (receiver CPU and memory), no limit / direct / naive runs")
    parser.add_argument("--prepare", action="store_true",
                        help="only time the receiver's Python validation (prepare_traces), see bench_prepare")
    parser.add_argument("--drain", action="store_true",
                        help="only the writer draining a full spool, per --inserts-in-flight value (default 1,2)")
    parser.add_argument("--breakdown", action="store_true", help="only price parts of the insert (see module doc)")
    parser.add_argument("--chain", default="", metavar="SPANS,...",
                        help="only the fixed and per-span cost of one insert along the span chain, at these insert sizes")
    parser.add_argument("--reps", type=int, default=12, help="inserts per schema for --breakdown / --chain")
    args = parser.parse_args()
    if args.chain:
        with tempfile.TemporaryDirectory(prefix="bench-chain-") as engine_dir:
            bench_chain(engine_dir, args.reps, [int(x) for x in args.chain.split(",")])
        return
    if args.breakdown:
        with tempfile.TemporaryDirectory(prefix="bench-ingest-") as engine_dir:
            bench_breakdown(engine_dir, args.reps)
        return
    n_requests = max(1, args.spans // SPANS_PER_REQUEST)
    print(f"building {n_requests} requests x {SPANS_PER_REQUEST} spans ...", flush=True)
    bodies = make_requests(n_requests)
    if args.prepare:
        bench_prepare(bodies, args.rounds)
        return
    if args.drain:
        print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        with tempfile.TemporaryDirectory(prefix="bench-ingest-") as engine_dir:
            bench_drain(engine_dir, bodies, (args.inserts_in_flight or "1,2").split(","), args.rounds)
        return
    naive_bodies = bodies[: max(1, args.naive_spans // SPANS_PER_REQUEST)]
    print(f"{os.cpu_count()} CPUs; body {len(bodies[0])} bytes ({len(bodies[0]) / SPANS_PER_REQUEST:.0f} B/span); "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    in_flight = [int(x) for x in args.inserts_in_flight.split(",") if x.strip()]
    e2e_keys = [f"e2e:{n}" for n in in_flight] or ["e2e"]
    runs: dict[str, list[tuple[float, float]]] = {"parse": [], "limit": [], "direct": [], **{k: [] for k in e2e_keys}}
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as engine_dir:
        naive = None if args.e2e_only else bench_naive(engine_dir, naive_bodies)
        for rnd in range(args.rounds):
            print(f"round {rnd + 1}/{args.rounds}", flush=True)
            if not args.e2e_only:
                runs["parse"].append(bench_limit(engine_dir, bodies, flatten=False))
                runs["limit"].append(bench_limit(engine_dir, bodies))
                runs["direct"].append(bench_decode_insert(engine_dir, bodies, duplicates=rnd == 0))
            env = {}
            if args.batch_cap_rows:
                env["INFERCOST_BATCH_CAP_ROWS"] = str(args.batch_cap_rows)
            if args.batch_cap_bytes:
                env["INFERCOST_BATCH_CAP_BYTES"] = str(args.batch_cap_bytes)
            order = e2e_keys if rnd % 2 == 0 else list(reversed(e2e_keys))
            for key in order:
                if key != "e2e":
                    env["INFERCOST_INSERTS_IN_FLIGHT"] = key.split(":")[1]
                    print(f"  ({key.split(':')[1]} insert(s) in flight)", flush=True)
                runs[key].append(bench_end_to_end(engine_dir, bodies, args.clients, args.in_flight, env))

    def med(name: str, k: int) -> float:
        values = sorted(r[k] for r in runs[name])
        return values[len(values) // 2]

    print()
    print(f"medians of {args.rounds} alternating rounds; load average now "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for key in e2e_keys:
        label = f" ({key.split(':')[1]} insert(s) in flight)" if key != "e2e" else ""
        print(f"receiver process RSS{label}: idle {med(key, 2) / MB:,.0f} MB, peak under load {med(key, 3) / MB:,.0f} MB "
              f"(max of rounds {max(r[3] for r in runs[key]) / MB:,.0f} MB), 5 s after {med(key, 4) / MB:,.0f} MB "
              f"(goal: peak <= 700 MB); end to end {med(key, 0):,.0f} spans/s, {med(key, 1):.2f} CPU-s per 100k spans")
    if args.e2e_only:
        return
    limit, limit_cpu = med("limit", 0), med("limit", 1)
    print(f"{'':38s} {'spans/s':>10s}  {'CPU-s/100k':>10s}  {'x limit (wall)':>14s}  {'x limit (CPU)':>13s}")
    rows = [("naive per-span Python loop + insert", naive, None),
            ("ClickHouse parse only", med("parse", 0), med("parse", 1)),
            ("ClickHouse parse + flatten (limit)", limit, limit_cpu),
            ("decode + insert (ClickHouse decodes)", med("direct", 0), med("direct", 1)),
            *[("end to end over OTLP/HTTP" + (f", {k.split(':')[1]} in flight" if k != "e2e" else ""),
               med(k, 0), med(k, 1)) for k in e2e_keys]]
    for label, rate, cpu in rows:
        cpu_text = f"{cpu:10.2f}" if cpu is not None else f"{'':10s}"
        ratio_cpu = f"{limit_cpu / cpu:13.2f}" if cpu is not None else f"{'':13s}"
        print(f"{label:38s} {rate:10,.0f}  {cpu_text}  {rate / limit:14.2f}  {ratio_cpu}")
    for key in e2e_keys:
        label = f" ({key.split(':')[1]} in flight)" if key != "e2e" else ""
        print(f"end to end{label} / parse + flatten: {med(key, 0) / limit:.2f}x wall, {limit_cpu / med(key, 1):.2f}x "
              f"per CPU-s (goal >= 0.8x); {med(key, 0) / naive:.1f}x the naive loop")

if __name__ == "__main__":
    main()
