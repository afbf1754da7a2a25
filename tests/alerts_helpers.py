"""Seeding helpers for the alert tests: rows written straight into llm_calls / otel_metrics_gauge /
otel_traces with hand-chosen values (the tests compute the expected figures by hand)."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone

T0 = datetime(2026, 11, 2, 12, 0, 0, tzinfo=timezone.utc)
_ids = itertools.count(1)

CALL_COLUMNS = ["start_time", "end_time", "trace_id", "span_id", "parent_span_id", "call_source", "replica",
                "task_id", "task_step", "task_attempt", "output_tokens", "ttft_s", "e2e_s", "queue_s", "decode_s",
                "finish_reason", "status", "prompt_tokens", "prefill_s"]


def naive(t: datetime) -> datetime:
    return t.astimezone(timezone.utc).replace(tzinfo=None)


def engine_call(replica, end, ttft_s=0.1, decode_s=1.0, output_tokens=101, queue_s=0.01, status="ok",
                finish="stop", duration_s=2.0, prompt_tokens=1000, prefill_s=0.04):
    n = next(_ids)
    return [naive(end - timedelta(seconds=duration_s)), naive(end), f"t{n}", f"s{n}", "", "engine", replica, "", "",
            None, output_tokens, ttft_s, duration_s, queue_s, decode_s, finish, status, prompt_tokens, prefill_s]


def client_call(end, task_id, step="s1", attempt=1, duration_s=1.0):
    n = next(_ids)
    return [naive(end - timedelta(seconds=duration_s)), naive(end), f"t{n}", f"s{n}", "", "client", "", task_id, step,
            attempt, 10, 0.1, duration_s, None, None, "stop", "ok", 100, None]


def gateway_call(end, parent, replica="r1", duration_s=1.0):
    n = next(_ids)
    return [naive(end - timedelta(seconds=duration_s)), naive(end), f"t{n}", f"s{n}", parent, "gateway", replica, "", "",
            None, 10, 0.1, duration_s, None, None, "stop", "ok", 100, None]


def insert_calls(store, rows):
    store.insert("llm_calls", rows, CALL_COLUMNS, tag="test.seed")


def insert_gauges(store, points):
    """points: (replica, metric, time, value)."""
    rows = [[{"service.instance.id": r}, "vllm", m, naive(t), naive(t), float(v)] for r, m, t, v in points]
    store.insert("otel_metrics_gauge", rows, ["ResourceAttributes", "ServiceName", "MetricName", "StartTimeUnix",
                                              "TimeUnix", "Value"], tag="test.seed")


def insert_task_spans(store, tasks):
    """tasks: (end, duration_s, outcome, slo_e2e_ms or None)."""
    rows = []
    for end, duration_s, outcome, slo in tasks:
        n = next(_ids)
        attrs = {"task.id": f"task{n}", "task.type": "chat", "task.outcome": outcome}
        if slo is not None:
            attrs["slo.e2e_ms"] = str(slo)
        rows.append([naive(end - timedelta(seconds=duration_s)), f"tr{n}", f"sp{n}", "", "task chat", "Internal",
                     "client", attrs, int(duration_s * 1e9), "Ok"])
    store.insert("otel_traces", rows, ["Timestamp", "TraceId", "SpanId", "ParentSpanId", "SpanName", "SpanKind",
                                       "ServiceName", "SpanAttributes", "Duration", "StatusCode"], tag="test.seed")


class Receiver:
    """A local HTTP server (127.0.0.1, free port) recording POSTed JSON bodies; ``statuses`` is a
    list of response codes to answer first (then 200)."""

    def __init__(self, statuses=()):
        import json
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.requests = []
        self.statuses = list(statuses)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                status = outer.statuses.pop(0) if outer.statuses else 200
                outer.requests.append((self.path, status, self.headers.get("Content-Type"), json.loads(body)))
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, name="test-receiver", daemon=True)
        self.thread.start()

    def bodies(self, path=None):
        return [b for p, s, _, b in self.requests if s == 200 and (path is None or p == path)]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def seed_cascade_timeline(store, t0, minutes=20, fault=(6, 10)):
    """A hand-made cascade after a healthy baseline: replica r2 3x slower on its own work (decode 3 s
    and prefill 0.12 s for the same tokens) in minutes [6, 10); clients retry 5 of 25 calls a minute
    in minutes 7-11; every replica's queue at 2, 4, 6, 6, 4 requests in minutes 7-11, then empty;
    r1's KV cache at 95% in minutes 8-11. Engine calls of minute m end in (m, m + 1)."""
    calls, points = [], []
    for m in range(minutes + 1):
        base = t0 + timedelta(minutes=m)
        for replica in ("r1", "r2", "r3", "r4"):
            slow = replica == "r2" and fault[0] <= m < fault[1]
            for k in range(5):
                calls.append(engine_call(replica, base + timedelta(seconds=5 + 11 * k), ttft_s=0.3 if slow else 0.1,
                                         decode_s=3.0 if slow else 1.0, prefill_s=0.12 if slow else 0.04))
        for k in range(25):
            calls.append(client_call(base + timedelta(seconds=1 + 2 * k), f"m{m}k{k}", attempt=1))
        if fault[0] + 1 <= m <= fault[1] + 1:
            for k in range(5):
                calls.append(client_call(base + timedelta(seconds=30 + k), f"m{m}k{k}", attempt=2))
        waiting = {fault[0] + 1: 2, fault[0] + 2: 4, fault[0] + 3: 6, fault[0] + 4: 6, fault[0] + 5: 4}.get(m, 0)
        for s in (5, 20, 35, 50):
            t = base + timedelta(seconds=s)
            for replica in ("r1", "r2", "r3", "r4"):
                points.append((replica, "vllm:num_requests_waiting", t, waiting))
                kv = 0.95 if (replica == "r1" and fault[0] + 2 <= m <= fault[0] + 5) else 0.4
                points.append((replica, "vllm:kv_cache_usage_perc", t, kv))
                points.append((replica, "vllm:num_requests_running", t, 8))
    insert_calls(store, calls)
    insert_gauges(store, points)
