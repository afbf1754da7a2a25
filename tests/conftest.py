"""Shared fixtures: the embedded ClickHouse store (chDB), one fresh database per test.

chDB allows one engine per process, so this process always uses the in-memory engine
(``chdb://memory``) and isolates tests by database. A test that needs a store in another process
(a receiver killed with SIGKILL) gives that process its own directory under ``tmp_path`` and reads
it back from a subprocess, never from this one.
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TRACES_DIR = ROOT / "serving" / "workloads" / "data"
ARTIFACTS = ROOT / "tests" / "artifacts"

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# tests/vllm needs a real vLLM (``make test-vllm`` installs it and sets INFERCOST_VLLM_PYTHON);
# plain ``make test`` leaves it out. Under ``make test-vllm`` a missing install fails, never skips.
collect_ignore = [] if os.environ.get("INFERCOST_VLLM_PYTHON") else ["vllm"]


def new_store(migrated: bool = True):
    from schema.migrate import migrate
    from schema.store import connect

    store = connect("chdb://memory", f"t_{uuid.uuid4().hex[:12]}")
    if migrated:
        migrate(store, retention_days=3650)
    return store


def drop_store(store) -> None:
    try:
        store.command(f"DROP DATABASE IF EXISTS `{store.database}` SYNC", tag="test.drop")
    finally:
        store.close()


@pytest.fixture
def store():
    """A migrated store in a fresh database of the in-memory chDB engine."""
    s = new_store()
    yield s
    drop_store(s)


@pytest.fixture(scope="module")
def module_store():
    """One migrated database for a whole test module (migrating takes seconds); tests that use it
    empty the tables they write with :func:`emptied` in their own ``store`` fixture."""
    s = new_store()
    yield s
    drop_store(s)


@pytest.fixture(scope="module")
def rig(module_store, tmp_path_factory):
    """The real producers wired to ``module_store`` (tests/producers.py: receiver, gateway, SDK)."""
    from tests.producers import Rig

    r = Rig(module_store, tmp_path_factory.mktemp("spool"))
    yield r
    r.close()


def emptied(store, *tables: str):
    """TRUNCATE ``tables`` (our own table names) of ``store`` and return it. Emptying ``otel_traces``
    also empties ``otel_span_keys`` (the keys of stored spans, migration 1000): else spans a previous
    test stored would be dropped as duplicates."""
    if "otel_traces" in tables and "otel_span_keys" not in tables:
        tables = (*tables, "otel_span_keys")
    for table in tables:
        store.command(f"TRUNCATE TABLE {table}", tag="test.truncate")
    return store


@pytest.fixture
def empty_store():
    """A fresh database with no tables."""
    s = new_store(migrated=False)
    yield s
    drop_store(s)


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    """The public serving traces the package ships (``serving/workloads/data``)."""
    if not TRACES_DIR.is_dir():
        pytest.fail(f"traces folder not found at {TRACES_DIR}")
    return TRACES_DIR


@pytest.fixture(scope="session")
def artifacts() -> Path:
    """A folder for test artifacts (screenshots), git-ignored."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


FAULT_LINES: list[str] = []  # tests/test_faults.py: one "acknowledged vs stored" line per fault


def pytest_terminal_summary(terminalreporter):
    if FAULT_LINES:
        terminalreporter.section("fault injection: acknowledged vs stored")
        for line in FAULT_LINES:
            terminalreporter.write_line(line)


def pytest_addoption(parser):
    parser.addoption("--faults", action="store_true", default=False,
                     help="run the fault-injection suite (tests marked 'faults'; needs root): make test-faults")


def pytest_collection_modifyitems(config, items):
    # The fault-injection suite mounts file systems and needs root: `make test-faults` runs it
    # (CI calls both); a plain `make test` leaves it out.
    if config.getoption("--faults"):
        return
    kept = [item for item in items if "faults" not in item.keywords]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if "faults" in item.keywords])
        items[:] = kept


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    # Loopback traffic must never go through a proxy from the environment.
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    os.environ.setdefault("INFERCOST_DATA_DIR", str(ROOT / ".infercost" / "test"))
