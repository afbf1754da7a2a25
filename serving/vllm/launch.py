"""Launch settings of a real vLLM replica and a process handle for it (the CPU build in tests).

Where it sits: serving/vllm, the real-vLLM harness (``make test-vllm``, calibration). Runs in the
project's Python; vLLM itself runs in its own virtualenv (``install.sh``) through ``serve.py``.

The flags and environment here are the ones the README's "Pointing a real vLLM fleet at it"
tells operators to use; ``tests/vllm`` checks the README against :func:`VllmSettings.argv` /
:func:`VllmSettings.env`, so the two cannot drift apart:

- tracing: ``--otlp-traces-endpoint <receiver>/v1/traces`` with
  ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf`` (vLLM's default exporter is gRPC);
- identity: ``OTEL_SERVICE_NAME=vllm`` and ``OTEL_RESOURCE_ATTRIBUTES=service.instance.id=...,
  gpu.type=...,gpu.count=...,gen_ai.request.model=...`` (vLLM 0.32 puts no model name on its spans);
- cached tokens in responses: ``--enable-prompt-tokens-details`` (``usage.prompt_tokens_details
  .cached_tokens``); prefix caching on (``--enable-prefix-caching``).

CPU-build specifics (tests only): ``--load-format dummy`` random weights, ``--dtype float32``,
``VLLM_TARGET_DEVICE=cpu``, ``VLLM_CPU_KVCACHE_SPACE`` (GiB of KV cache).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
SERVE_PY = HERE / "serve.py"
TINY_MODEL_PY = HERE / "tiny_model.py"


def free_port(host: str = "127.0.0.1") -> int:
    """An ephemeral port free right now (vLLM takes a port number, not a bound socket)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class VllmSettings:
    """One vLLM replica's command line and environment. Sizes in tokens; ``kv_cache_gib`` in GiB."""

    model: str
    served_model_name: str = "tiny-llama"
    replica_id: str = "replica-0"
    gpu_type: str = "CPU"
    gpu_count: int = 1
    host: str = "127.0.0.1"
    port: int = 8000
    otlp_endpoint: str | None = None  # the receiver's base URL, e.g. http://127.0.0.1:4318
    max_model_len: int = 1024
    max_num_seqs: int = 16
    max_num_batched_tokens: int = 2048
    kv_cache_gib: int = 1
    cpu_build: bool = True
    span_export_delay_ms: int | None = None  # OTEL_BSP_SCHEDULE_DELAY (SDK default 5000): tests flush sooner
    extra_args: tuple[str, ...] = field(default_factory=tuple)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def argv(self) -> list[str]:
        """Arguments after ``vllm serve``."""
        a = [self.model, "--served-model-name", self.served_model_name, "--host", self.host, "--port", str(self.port),
             "--max-model-len", str(self.max_model_len), "--max-num-seqs", str(self.max_num_seqs),
             "--max-num-batched-tokens", str(self.max_num_batched_tokens),
             "--enable-prefix-caching", "--enable-prompt-tokens-details"]
        if self.otlp_endpoint:
            a += ["--otlp-traces-endpoint", self.otlp_endpoint.rstrip("/") + "/v1/traces"]
        if self.cpu_build:
            a += ["--load-format", "dummy", "--dtype", "float32"]
        return a + list(self.extra_args)

    def resource_attributes(self) -> str:
        return (f"service.instance.id={self.replica_id},gpu.type={self.gpu_type},gpu.count={self.gpu_count},"
                f"gen_ai.request.model={self.served_model_name}")

    def env(self) -> dict[str, str]:
        """Environment variables vLLM needs on top of the caller's."""
        e = {"OTEL_SERVICE_NAME": "vllm", "OTEL_RESOURCE_ATTRIBUTES": self.resource_attributes(),
             "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}
        if self.cpu_build:
            e.update({"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_gib)})
        if self.span_export_delay_ms is not None:
            e["OTEL_BSP_SCHEDULE_DELAY"] = str(self.span_export_delay_ms)
        return e


class VllmStartError(RuntimeError):
    """vLLM exited or did not become healthy; the message carries the tail of its log."""


class VllmProcess:
    """A running ``vllm serve`` (its own process group). ``start()`` blocks until ``/health`` is 200.

    ``python``: the vLLM virtualenv's interpreter. ``log_path``: vLLM's stdout+stderr.
    """

    def __init__(self, python: str, settings: VllmSettings, log_path: Path):
        self.python = python
        self.settings = settings
        self.log_path = Path(log_path)
        self.proc: subprocess.Popen | None = None
        self.started_s: float | None = None

    @property
    def url(self) -> str:
        return self.settings.url

    def start(self, timeout_s: float = 420.0, progress=None) -> "VllmProcess":
        """Start and wait for health. Raises VllmStartError (with the log's tail) on exit or timeout."""
        env = {**os.environ, **self.settings.env()}
        for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
            env.pop(var, None)
        env["NO_PROXY"] = "127.0.0.1,localhost"
        t0 = time.monotonic()
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([self.python, str(SERVE_PY), *self.settings.argv()], stdout=log,
                                     stderr=subprocess.STDOUT, env=env, start_new_session=True)
        log.close()
        deadline = t0 + timeout_s
        next_note = t0 + 30
        while True:
            if self.proc.poll() is not None:
                raise VllmStartError(f"vLLM exited with code {self.proc.returncode} while starting:\n{self.log_tail()}")
            try:
                if httpx.get(self.url + "/health", timeout=2.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            now = time.monotonic()
            if now > deadline:
                self.stop()
                raise VllmStartError(f"vLLM not healthy after {timeout_s:.0f} s:\n{self.log_tail()}")
            if progress and now > next_note:
                progress(f"vLLM starting ({now - t0:.0f} s)")
                next_note = now + 30
            time.sleep(1.0)
        self.started_s = time.monotonic() - t0
        return self

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM the process group, SIGKILL what is left after ``grace_s`` (idempotent)."""
        p = self.proc
        if p is None or p.poll() is not None and not _group_alive(p.pid):
            return
        for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                return
            end = time.monotonic() + wait
            while time.monotonic() < end:
                if p.poll() is not None and not _group_alive(p.pid):
                    return
                time.sleep(0.2)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def build_tiny_model(python: str, out_dir: Path, corpus_files: list[Path]) -> Path:
    """Build the tiny model directory (context 1024 tokens) with the vLLM virtualenv's ``tokenizers``
    (tiny_model.py). Raises RuntimeError with the builder's stderr when it fails."""
    r = subprocess.run([python, str(TINY_MODEL_PY), str(out_dir), *map(str, corpus_files)], capture_output=True,
                       text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"building the tiny model failed:\n{r.stderr[-2000:]}")
    return Path(out_dir)
