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


# one root span of each kind the README promises (attributes as their producers set them) -> its source
ROOTS = {
    "genai_agent": ("invoke_agent research", {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "research"}),
    "openinference": ("Agent workflow", {"openinference.span.kind": "AGENT"}),
    "traceloop": ("research.workflow", {"traceloop.span.kind": "workflow", "traceloop.workflow.name": "research"}),
    "genai_call": ("chat llama", {"gen_ai.operation.name": "chat", "gen_ai.request.model": "llama"}),
    "request_root": ("POST /ask", {"http.request.method": "POST"}),
}


def test_context_sources_are_the_stores(store):
    """Each context source the README names is the one the store records for a root span of that kind."""
    from tests.test_cost_support import Spans, hex_id, new_id

    sp = Spans()
    for source, (name, attrs) in ROOTS.items():
        sp.span(f"trace-{source}", new_id(), "", name, "Client" if source == "genai_call" else "Internal",
                0.0, 1.0, "app", attrs)
    sp.flush(store)
    written = dict(store.query("SELECT task_id, context_source FROM task_spans", tag="test").result_rows)
    assert written == {hex_id(f"trace-{source}", 16): source for source in ROOTS}
    assert "`context_source`" in _section()
