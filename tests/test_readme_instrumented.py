"""README "Already instrumented?" says what the tests run: every package it names is in the test extra
(pinned as the README says) and installed, and every context source it promises is one the store writes."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("## Already instrumented?")
    return text[start:text.index("\n## ", start + 1)]


def _test_extra() -> dict[str, str]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    return {re.split(r"[<>=!~ ]", d, maxsplit=1)[0]: d for d in deps}


def test_every_named_package_is_in_the_test_extra_and_installed():
    named = set(re.findall(r"`((?:opentelemetry|openinference|openai)-[a-z0-9-]+)(?:==[0-9a-z.]+)?`", _section()))
    assert named == {"opentelemetry-instrumentation-openai-v2", "opentelemetry-util-genai", "openai-agents",
                     "openinference-instrumentation-openai-agents", "openinference-instrumentation-openai",
                     "opentelemetry-instrumentation-openai"}
    extra = _test_extra()
    for package in named:
        assert package in extra, package
        metadata.version(package)  # raises when the test extra did not install it
    for pin in re.findall(r"`([a-z0-9-]+==[0-9a-z.]+)`", _section()):
        assert extra[pin.split("==")[0]] == pin


def test_context_sources_are_the_stores():
    sql = (ROOT / "schema" / "migrations" / "0540_derive_tasks_from_standard_spans.sql").read_text()
    for source in ("genai_agent", "openinference", "traceloop", "genai_call", "request_root"):
        assert f"'{source}'" in sql
    assert "`context_source`" in _section()
