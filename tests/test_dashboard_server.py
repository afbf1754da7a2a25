"""``app.server.serve`` in background mode and the ``infercost dashboard`` command, each in its own process.

Streamlit's configuration is process-global and chDB allows one engine per process, so the server is
started in a subprocess (with its own store directory), never in the pytest process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.producers import free_port

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    import sys, threading
    sys.path.insert(0, {root!r})
    import httpx
    from schema.store import connect
    from app import store_provider
    from app.server import serve

    store = connect("chdb://" + sys.argv[1], "infercost")
    handle = serve(store, "127.0.0.1", int(sys.argv[2]), block=False, otlp_endpoint="http://127.0.0.1:4318/v1/traces")
    assert threading.current_thread() is threading.main_thread() and handle.thread.is_alive()
    health = httpx.get(handle.url + "/_stcore/health", timeout=10)
    page = httpx.get(handle.url + "/", timeout=10)
    assert store_provider.get_store() is store
    assert store_provider.context("otlp_endpoint") == "http://127.0.0.1:4318/v1/traces"
    from streamlit import config
    runner = (config.get_option("runner.postScriptGC"), config.get_option("runner.magicEnabled"))
    handle.stop()
    print("HEALTH", health.status_code, health.text.strip(), "PAGE", page.status_code, "ALIVE", handle.thread.is_alive())
    print("RUNNER gc=%s magic=%s" % runner)
""")


def test_serve_in_background_answers_and_stops(tmp_path):
    script = tmp_path / "serve_bg.py"
    script.write_text(SCRIPT.format(root=str(ROOT)))
    out = subprocess.run([sys.executable, str(script), str(tmp_path / "store"), str(free_port())],
                         capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr[-3000:]
    assert "HEALTH 200 ok PAGE 200 ALIVE False" in out.stdout, out.stdout + out.stderr[-2000:]
    # the served dashboard runs without Streamlit's post-run gc.collect and magic (app/server.py RUNNER_OPTIONS)
    assert "RUNNER gc=False magic=False" in out.stdout, out.stdout


def _magic_writes(source: str, name: str) -> int:
    """How many expressions Streamlit's magic rewrite would write to the page in ``source``."""
    import ast

    from streamlit.runtime.scriptrunner import magic

    return sum(isinstance(node, ast.Attribute) and node.attr == "transparent_write"
               for node in ast.walk(magic.add_magic(source, name)))


def test_no_page_script_relies_on_streamlit_magic():
    """The dashboard turns magic off (``runner.magicEnabled``): a bare expression in a page script, which
    magic would write to the page, would silently show nothing. Streamlit's own rewrite finds none."""
    scripts = [ROOT / "app" / "main.py", *sorted((ROOT / "app" / "views").glob("*.py"))]
    assert len(scripts) >= 8
    written = {path.name: _magic_writes(path.read_text(), str(path)) for path in scripts}
    assert written == dict.fromkeys(written, 0), written
    # the check itself finds a bare expression
    assert _magic_writes("import streamlit as st\nx = 1\nx\n", "probe.py") == 1


def test_dashboard_command_rejects_a_bad_store_url(tmp_path):
    out = subprocess.run([sys.executable, "-m", "infercost.cli", "dashboard", "--clickhouse-url", "postgres://x",
                          "--port", str(free_port())], capture_output=True, text=True, timeout=60, cwd=str(tmp_path))
    assert out.returncode != 0
    assert "unsupported store URL" in out.stderr


def test_dashboard_refuses_a_public_bind_without_auth_and_a_missing_store(tmp_path):
    """No unauthenticated dashboard on a non-loopback address unless told; no empty
    store created by accident."""
    env = dict(os.environ, INFERCOST_DATA_DIR=str(tmp_path / "data"))
    env.pop("INFERCOST_CLICKHOUSE_URL", None)
    env.pop("INFERCOST_AUTH_TOKEN", None)
    run = lambda *args, **extra: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "infercost.cli", "dashboard", *args], capture_output=True, text=True, timeout=120,
        env=dict(env, **extra))
    out = run("--host", "0.0.0.0")
    assert out.returncode != 0 and "refusing to serve the dashboard on 0.0.0.0" in out.stderr
    assert "INFERCOST_AUTH_TOKEN" in out.stderr
    out = run("--host", "127.0.0.1", "--port", "1")
    assert out.returncode != 0 and "no store at" in out.stderr and "nothing was created" in out.stderr
    assert not (tmp_path / "data" / "clickhouse").exists()
    # a token (or explicitly allowing it) lifts the refusal; the missing store still stops it
    out = run("--host", "0.0.0.0", INFERCOST_AUTH_TOKEN="t0k")
    assert "refusing" not in out.stderr and "no store at" in out.stderr
