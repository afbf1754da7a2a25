"""HTTP/SSE pieces of the gateway: vLLM's error bodies, the mid-stream error event, event classification.

Position: serving (gateway). Plain functions over bytes and raw ASGI ``send``/``receive``.
"""

from __future__ import annotations

import json
import re

import orjson

# Byte-level classification of SSE events (vLLM and the emulator serialise compactly; spaces tolerated).
NEEDS_DECODE = re.compile(rb'"(?:usage|error|tool_calls)"|"finish_reason": ?"')
OUTPUT = re.compile(rb'"(?:content|text|reasoning_content)": ?"[^"]')
# Once the prompt's usage is known, a continuous-usage token chunk needs no decoding either: only
# finish reasons, errors, tool calls and the usage-only last chunk (``"choices": []``) do.
NEEDS_DECODE_BESIDES_USAGE = re.compile(rb'"(?:error|tool_calls)"|"finish_reason": ?"|"choices": ?\[\]')
USAGE_ONLY = re.compile(rb'"choices": ?\[\]')


# A run of 19+ digits: an integer orjson would turn into a float (beyond 64 bits), where json keeps an int.
_LONG_NUMBER = re.compile(rb"\d{19}")


def loads(data: bytes):
    """``json.loads(data)``, the same result and the same exceptions, in about a fifth of the time.

    orjson parses first (~1 us for a vLLM chunk against ~4.5 us); what it rejects goes to
    ``json.loads`` (which accepts some of it: lone surrogates, a BOM, UTF-16, NaN...), and input with
    an integer of 19+ digits goes to ``json.loads`` directly (orjson reads integers beyond 64 bits
    as floats). Where orjson accepts, it returns what ``json.loads`` returns (checked in
    tests/test_gateway_sse_loads.py)."""
    if _LONG_NUMBER.search(data) is None:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return json.loads(data)


def plain_token_event(data: bytes) -> bool:
    """True when an event's JSON holds nothing to read but output (no usage, finish reason, error, tool call)."""
    return NEEDS_DECODE.search(data) is None


def usage_token_event(data: bytes) -> bool:
    """True when an event holds nothing to read but output and cumulative usage (continuous_usage_stats)."""
    return NEEDS_DECODE_BESIDES_USAGE.search(data) is None


def usage_only_event(data: bytes) -> bool:
    """True for the usage-only chunk of ``include_usage`` (no choices)."""
    return USAGE_ONLY.search(data) is not None and b'"usage"' in data


def carries_output(data: bytes) -> bool:
    """True when an event's JSON carries non-empty output text (one token, in vLLM's one-token-per-chunk stream)."""
    return OUTPUT.search(data) is not None


def error_body(message: str, err_type: str, code: int) -> bytes:
    """vLLM's error object (entrypoints/openai ErrorResponse): ``{"error": {message, type, param, code}}``."""
    return json.dumps({"error": {"message": message, "type": err_type, "param": None, "code": code}}).encode()


def midstream_error_event(message: str, err_type: str = "InternalServerError", code: int = 500) -> bytes:
    """The chunk vLLM sends when a stream fails after HTTP 200, followed by ``[DONE]``."""
    return b"data: " + error_body(message, err_type, code) + b"\n\ndata: [DONE]\n\n"


def retry_after_value(seconds: float) -> bytes:
    # Retry-After is whole seconds (RFC 9110 §10.2.3); round up so a client never comes back early.
    return str(max(int(-(-seconds // 1)), 0)).encode()


async def read_body(receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    return b"".join(chunks)


async def respond(send, status: int, body: bytes, content_type: bytes = b"application/json", extra=None) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    headers.extend(extra or ())
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
