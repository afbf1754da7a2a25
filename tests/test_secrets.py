"""No secret shown: a store URL's password, the ingest token and other credentials
never appear in log lines, errors, /health or the CLI's output. The commands run for real against
a server store that is down (a closed port), and every output is grepped for the secrets."""

from __future__ import annotations

import io
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from schema.redact import install_log_redaction, redact, register_secret
from schema.store import StoreUnavailable
from tests.producers import free_port

PASSWORD = "pw-Zq81-secret"
TOKEN = "tok-9f3a77-secret"
INFERCOST = str(Path(sys.executable).with_name("infercost"))


def _env(tmp_path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env.update(NO_PROXY="127.0.0.1,localhost", INFERCOST_DATA_DIR=str(tmp_path / "data"),
               INFERCOST_INGEST_TOKEN=TOKEN)
    return env


def test_redact_masks_every_form():
    register_secret(TOKEN)
    text = (f"cannot open store http://infercost:{PASSWORD}@db:8123/x; https://hooks/x?token={PASSWORD}&a=1; "
            f'Authorization: Bearer {PASSWORD}; {{"password": "{PASSWORD}"}}; got {TOKEN}')
    out = redact(text)
    assert PASSWORD not in out and TOKEN not in out
    assert "http://infercost:***@db:8123/x" in out and "token=***&a=1" in out and "Bearer ***" in out
    assert redact("chdb:///var/lib/infercost/clickhouse") == "chdb:///var/lib/infercost/clickhouse"


def test_store_errors_and_log_lines_are_redacted():
    assert PASSWORD not in str(StoreUnavailable(f"cannot open store http://u:{PASSWORD}@h:8123/db", "connect"))
    install_log_redaction()
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    logger = logging.getLogger("infercost.test.secrets")
    logger.addHandler(handler)
    try:
        logger.error("store http://u:%s@h/db refused", PASSWORD)
        try:
            raise RuntimeError(f"boom at http://u:{PASSWORD}@h/db")
        except RuntimeError:
            logger.exception("failed")
    finally:
        logger.removeHandler(handler)
    assert PASSWORD not in buffer.getvalue() and "http://u:***@h/db" in buffer.getvalue()


def test_redacted_records_keep_their_arguments_for_formatters_that_read_them():
    # uvicorn's access formatter unpacks record.args (client, method, path, version, status); the demo
    # printed "--- Logging error --- cannot unpack non-iterable NoneType" when redaction dropped them.
    from uvicorn.logging import AccessFormatter

    install_log_redaction()
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(AccessFormatter('%(client_addr)s - "%(request_line)s" %(status_code)s', use_colors=False))
    logger = logging.getLogger("infercost.test.secrets.access")
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    try:
        access = '%s - "%s %s HTTP/%s" %d'
        logger.info(access, "127.0.0.1:5000", "POST", "/v1/chat/completions", "1.1", 200)
        logger.info(access, "127.0.0.1:5001", "GET", f"/hook?token={PASSWORD}&a=1", "1.1", 404)
    finally:
        logger.removeHandler(handler)
    assert buffer.getvalue().splitlines() == ['127.0.0.1:5000 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
                                              '127.0.0.1:5001 - "GET /hook?token=***&a=1 HTTP/1.1" 404 Not Found']
    # a registered secret split over two arguments cannot be masked argument by argument: the record
    # becomes one masked message without arguments
    register_secret(TOKEN)
    record = logging.getLogger("infercost.test.secrets.split").makeRecord(
        "x", logging.WARNING, __file__, 1, "got %s%s", (TOKEN[:5], TOKEN[5:]), None)
    assert (record.getMessage(), record.args) == ("got ***", None)


def test_cli_outputs_never_show_the_password(tmp_path):
    env = _env(tmp_path)
    url = f"http://infercost:{PASSWORD}@127.0.0.1:{free_port()}/infercost"
    outputs = []
    for args in (["migrate", "--clickhouse-url", url], ["up", "--clickhouse-url", url, "--no-alerts"]):
        done = subprocess.run([INFERCOST, *args], capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode != 0  # the store is down: a clear error ...
        outputs.append(done.stdout + done.stderr)
        assert "cannot open store http://infercost:***@127.0.0.1" in outputs[-1]  # ... naming it, redacted

    log = tmp_path / "collector.log"
    proc = subprocess.Popen([INFERCOST, "collector", "--port", "0", "--clickhouse-url", url], stdout=open(log, "w"),
                            stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 90
        while not re.search(r"receiver on (http://\S+) ", log.read_text()):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.1)
        base = re.search(r"receiver on (http://\S+) ", log.read_text()).group(1)
        # the writer's first try against the closed port marks the receiver degraded
        while '"status":"degraded"' not in (health := httpx.get(f"{base}/health", timeout=10).text).replace(" ", ""):
            assert proc.poll() is None and time.monotonic() < deadline, health
            time.sleep(0.1)
        metrics = httpx.get(f"{base}/metrics", timeout=10).text
        refused = httpx.post(f"{base}/v1/traces", content=b"", headers={"content-type": "application/x-protobuf",
                                                                         "authorization": "Bearer wrong"}).text
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
    outputs += [log.read_text(), health, metrics, refused]
    assert '"status":"degraded"' in health.replace(" ", "")
    for text in outputs:
        assert PASSWORD not in text and TOKEN not in text
