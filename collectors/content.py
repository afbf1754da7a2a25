"""Prompts and completions stay out of the store.

Position: collectors. No I/O. OpenInference, OpenLLMetry and the OpenTelemetry GenAI instrumentations
(with content capture on) put whole prompts, completions and tool arguments on spans and span events.
Cost needs none of it, and a store of everything users typed is a privacy and storage liability, so
the receiver removes them before a span is spooled or stored unless the operator opts in
(``INFERCOST_KEEP_CONTENT=true``). What is removed is counted (``infercost_receiver_content_dropped``
and the partial-success message), never silently.

Removed:

* span and event attributes named in :data:`CONTENT_KEYS` or starting with one of
  :data:`CONTENT_PREFIXES` (OpenInference ``input.value`` / ``llm.input_messages.*``, GenAI
  ``gen_ai.input.messages`` / ``gen_ai.output.messages``, OpenLLMetry ``gen_ai.prompt.*`` /
  ``gen_ai.completion.*`` and ``traceloop.entity.input`` / ``output``, ...);
* span events that exist only to carry content (:data:`CONTENT_EVENTS`: the GenAI message events).

Everything else on the span — token counts, ids, model, status, ``error.type`` — is kept as sent.
"""

from __future__ import annotations

CONTENT_KEYS = frozenset({
    # OpenInference
    "input.value", "output.value", "llm.prompts", "llm.prompt_template.variables",
    # OpenTelemetry GenAI (current, opt-in content attributes)
    "gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions",
    "gen_ai.tool.call.arguments", "gen_ai.tool.call.result",
    # OpenTelemetry GenAI (deprecated event attributes), OpenLLMetry
    "gen_ai.prompt", "gen_ai.completion", "traceloop.entity.input", "traceloop.entity.output",
})
CONTENT_PREFIXES = ("llm.input_messages.", "llm.output_messages.", "llm.prompts.", "gen_ai.prompt.",
                    "gen_ai.completion.")
CONTENT_EVENTS = frozenset({
    "gen_ai.content.prompt", "gen_ai.content.completion", "gen_ai.system.message", "gen_ai.user.message",
    "gen_ai.assistant.message", "gen_ai.tool.message", "gen_ai.choice",
    "gen_ai.client.inference.operation.details",
})
# Producers that put no content on their spans: vLLM's engine spans and infercost's own gateway and
# SDK. A request from them alone (nearly all of the span volume) is neither searched nor walked.
CONTENT_FREE_SCOPES = ("vllm.", "infercost.")
# A request whose bytes hold none of these holds no content key or event (each key, prefix and event
# name contains one), so it is not walked.
_MARKERS = (b"input.value", b"output.value", b"_messages", b"llm.prompt", b"gen_ai.prompt", b"gen_ai.completion",
            b"gen_ai.system_instructions", b"gen_ai.tool.call.", b"traceloop.entity.", b"gen_ai.content.",
            b".message", b"gen_ai.choice", b"operation.details")


def is_content_key(key: str) -> bool:
    return key in CONTENT_KEYS or key.startswith(CONTENT_PREFIXES)


def may_hold_content(request, raw: bytes | None) -> bool:
    """False when ``request`` (its serialized bytes ``raw``, or None when not at hand) certainly holds
    no content: every scope is a content-free producer's, or the bytes hold no content marker."""
    if all(ss.scope.name.startswith(CONTENT_FREE_SCOPES) for rs in request.resource_spans for ss in rs.scope_spans):
        return False
    return raw is None or any(marker in raw for marker in _MARKERS)


def _drop_keys(attributes) -> int:
    doomed = [i for i, kv in enumerate(attributes) if is_content_key(kv.key)]
    for i in reversed(doomed):
        del attributes[i]
    return len(doomed)


def drop_content(request) -> int:
    """Remove content attributes and content events from every span of ``request`` (in place).

    Returns how many attributes and events were removed.
    """
    dropped = 0
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            for span in ss.spans:
                dropped += _drop_keys(span.attributes)
                events = span.events
                doomed = [i for i, event in enumerate(events) if event.name in CONTENT_EVENTS]
                for i in reversed(doomed):
                    del events[i]
                dropped += len(doomed)
                for event in events:
                    dropped += _drop_keys(event.attributes)
    return dropped


def content_key_pattern() -> str:
    """One regular expression matching exactly the content keys (for the OpenTelemetry Collector's
    ``delete_matching_keys`` in ``docker/otel-collector.yaml``, kept equal by a test)."""
    exact = "|".join(k.replace(".", r"\.") for k in sorted(CONTENT_KEYS))
    prefixes = "|".join(p.replace(".", r"\.") + ".*" for p in CONTENT_PREFIXES)
    return f"^({exact}|{prefixes})$"
