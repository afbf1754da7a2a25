"""The vLLM /metrics scraper: Prometheus text -> otel_metrics_* rows, and a real scrape over HTTP."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from collectors.receiver import Receiver, ReceiverConfig
from collectors.scraper import Scraper, ScrapeTarget, parse_metrics_text
from conftest import drop_store, new_store

NOW = 1_764_400_000_000_000_000
CREATED = 1_764_399_000.5

VLLM_TEXT = f"""# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{engine="0",model_name="llama"}} 3.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{{engine="0",model_name="llama"}} 1234.0
# HELP vllm:prompt_tokens_created Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_created gauge
vllm:prompt_tokens_created{{engine="0",model_name="llama"}} {CREATED}
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{{engine="0",finished_reason="stop",model_name="llama"}} 7.0
vllm:request_success_total{{engine="0",finished_reason="abort",model_name="llama"}} 1.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{{engine="0",le="0.1",model_name="llama"}} 2.0
vllm:time_to_first_token_seconds_bucket{{engine="0",le="0.5",model_name="llama"}} 5.0
vllm:time_to_first_token_seconds_bucket{{engine="0",le="+Inf",model_name="llama"}} 6.0
vllm:time_to_first_token_seconds_count{{engine="0",model_name="llama"}} 6.0
vllm:time_to_first_token_seconds_sum{{engine="0",model_name="llama"}} 1.75
"""

TARGET = ScrapeTarget("http://unused/metrics", replica="replica-a", gpu_type="H100", gpu_count=2, model="llama")
RESOURCE = {"service.name": "vllm", "service.instance.id": "replica-a", "gpu.type": "H100", "gpu.count": "2",
            "gen_ai.request.model": "llama"}
LABELS = {"engine": "0", "model_name": "llama"}


@pytest.fixture(scope="module")
def store():
    s = new_store()
    yield s
    drop_store(s)


def test_parse_maps_vllm_families():
    rows = parse_metrics_text(VLLM_TEXT, TARGET, NOW)
    assert [(r[8], r[11], r[13], r[14]) for r in rows.gauge] == [("vllm:num_requests_waiting", LABELS, NOW, 3.0)]
    assert [(r[8], r[11], r[12], r[14], r[-2], r[-1]) for r in rows.sum] == [
        ("vllm:prompt_tokens", LABELS, int(CREATED * 1e9), 1234.0, 2, True),
        ("vllm:request_success", {**LABELS, "finished_reason": "stop"}, 0, 7.0, 2, True),
        ("vllm:request_success", {**LABELS, "finished_reason": "abort"}, 0, 1.0, 2, True),
    ]
    (hist,) = rows.histogram
    assert hist[8] == "vllm:time_to_first_token_seconds" and hist[11] == LABELS
    assert hist[14:18] == [6, 1.75, [2, 3, 1], [0.1, 0.5]]  # per-bucket counts, +Inf bound dropped
    assert hist[0] == RESOURCE and hist[7] == "vllm"


def test_scrape_over_http_into_the_store(store):
    body = VLLM_TEXT.encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/metrics" else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            if self.path == "/metrics":
                self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        good = ScrapeTarget(f"http://127.0.0.1:{server.server_port}/metrics", "replica-a", "H100", 2, "llama")
        bad = ScrapeTarget(f"http://127.0.0.1:{server.server_port}/nope", "replica-b", "A100", 1)
        scraper = Scraper([good, bad], sink=store)  # a Store as sink: direct inserts
        scraper.scrape_once()
        scraper.stop()
    finally:
        server.shutdown()
    assert scraper.stats.failures == 1 and "404" in scraper.stats.last_error["replica-b"]
    gauges = store.query("SELECT ResourceAttributes['service.instance.id'], MetricName, Value FROM otel_metrics_gauge "
                         "ORDER BY 1, 2", tag="test").result_rows
    assert gauges == [("replica-a", "up", 1.0), ("replica-a", "vllm:num_requests_waiting", 3.0), ("replica-b", "up", 0.0)]
    sums = store.query("SELECT MetricName, Attributes['finished_reason'], Value, AggregationTemporality, IsMonotonic, "
                       "toUnixTimestamp64Nano(StartTimeUnix) FROM otel_metrics_sum ORDER BY 1, 2", tag="test").result_rows
    assert sums == [("vllm:prompt_tokens", "", 1234.0, 2, True, int(CREATED * 1e9)),
                    ("vllm:request_success", "abort", 1.0, 2, True, 0), ("vllm:request_success", "stop", 7.0, 2, True, 0)]
    hist = store.query("SELECT ServiceName, MetricName, Count, Sum, BucketCounts, ExplicitBounds, ResourceAttributes "
                       "FROM otel_metrics_histogram", tag="test").result_rows
    assert hist == [("vllm", "vllm:time_to_first_token_seconds", 6, 1.75, [2, 3, 1], [0.1, 0.5], RESOURCE)]


def test_scraped_rows_through_the_receiver_spool(store, tmp_path):
    for table in ("otel_metrics_gauge", "otel_metrics_sum", "otel_metrics_histogram"):
        store.command(f"TRUNCATE TABLE {table}", tag="test.truncate")
    r = Receiver(ReceiverConfig(port=0, spool_dir=tmp_path / "spool", batch_max_seconds=0.05), store).start()
    try:
        r.metrics_sink(parse_metrics_text(VLLM_TEXT, TARGET, NOW))
        assert r.flush(10)
        assert r.stats.metric_points_stored == 5
    finally:
        r.stop()
    counts = store.query("SELECT (SELECT count() FROM otel_metrics_gauge), (SELECT count() FROM otel_metrics_sum), "
                         "(SELECT groupArray(BucketCounts) FROM otel_metrics_histogram)", tag="test").result_rows
    assert counts == [(1, 3, [[2, 3, 1]])]


def test_idle_connection_not_reused_past_the_replicas_keepalive():
    """vLLM closes an idle keep-alive connection after 5 s (VLLM_HTTP_TIMEOUT_KEEP_ALIVE): a scrape that
    reused one at that instant was reset and recorded up = 0. Scrapes a moment apart share a connection;
    after more than KEEPALIVE_EXPIRY_S idle (still below 5 s) the scraper opens a new one."""
    from collectors.scraper import KEEPALIVE_EXPIRY_S

    IDLE_S = 2.5  # below vLLM's 5 s, above the scraper's expiry
    assert KEEPALIVE_EXPIRY_S < IDLE_S
    body = VLLM_TEXT.encode()
    ports: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as uvicorn serves vLLM's /metrics

        def do_GET(self):
            ports.append(self.client_address[1])
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    scraper = Scraper([ScrapeTarget(f"http://127.0.0.1:{server.server_port}/metrics", "replica-a", "H100", 1)],
                      sink=lambda rows: None)
    try:
        scraper.scrape_once()
        scraper.scrape_once()
        time.sleep(IDLE_S)
        scraper.scrape_once()
    finally:
        scraper.stop()
        server.shutdown()
    assert scraper.stats.failures == 0 and len(ports) == 3
    assert ports[0] == ports[1] and ports[2] != ports[1]
