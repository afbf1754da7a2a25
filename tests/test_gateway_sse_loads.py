"""The gateway's JSON decoding (serving.gateway.sse.loads): exactly json.loads, results and exceptions."""

from __future__ import annotations

import gc
import json

import pytest
from hypothesis import given, settings, strategies as st

from serving.gateway import sse


# Inputs where orjson alone differs from json.loads (a float for a 20-digit integer; errors where json
# accepts), and ordinary vLLM chunks.
EDGES = [
    b'{"usage":{"prompt_tokens":18446744073709551616,"completion_tokens":1}}',  # orjson alone: 1.8446744073709552e+19
    b'{"n":123456789012345678901234567890}',
    b'{"n":-9223372036854775809}',
    b'{"a":"\\ud800"}',  # a lone surrogate: json keeps it, orjson rejects
    b'\xef\xbb\xbf{"a":1}',  # UTF-8 BOM
    '{"a":1}'.encode("utf-16"),
    b'{"a":NaN,"b":Infinity,"c":-Infinity}',
    b'{"a":1e400}',
    b'{"a":1,"a":2}',
    b'{"a":-0.0,"b":1.0000000000000002,"c":5e-324,"d":1e-400}',
    b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":0,"model":"m","choices":[{"index":0,'
    b'"delta":{"role":"assistant","content":""},"finish_reason":null}],"usage":{"prompt_tokens":7,'
    b'"completion_tokens":0,"total_tokens":7}}',
    b'{"id": "x", "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 16, "total_tokens": 23}}',
    b' [1, 2.5, "\\u00e9", true, false, null] ',
]
BAD = [b"", b"{not json", b'{"a":1', b"[1,]", b"\xff\xfe\xfa", b"{'a': 1}", b'{"a":1}x', b"[" * 100000]


def _outcome(fn, data):
    try:
        value = fn(data)
    except RecursionError:
        return ("error", "RecursionError", "")
    except Exception as exc:  # noqa: BLE001 - the type and message are what is compared
        return ("error", type(exc).__name__, str(exc))
    return ("value", value)


def _outcome_at_depth(fn, data):
    """``_outcome`` for input that runs the decoder to the recursion limit (the 100,000-deep array). A
    cyclic collection firing there runs finalizers of objects other tests left behind, whose report
    fails for want of stack, and pytest turns those reports into a failure of this test (seen in CI).
    Collect first and hold collection off while the decoder runs."""
    gc.collect()
    gc.disable()
    try:
        return _outcome(fn, data)
    finally:
        gc.enable()


def _same(a, b) -> bool:
    """Equal with types (True != 1, 1 != 1.0) and NaN equal to NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and a != a:
        return b != b
    return a == b


@pytest.mark.parametrize("data", EDGES + BAD)
def test_loads_is_json_loads(data):
    got, want = _outcome_at_depth(sse.loads, data), _outcome_at_depth(json.loads, data)
    assert got[:2] == want[:2]
    if got[0] == "value":
        assert _same(got[1], want[1])
    else:
        assert got[2] == want[2]  # the same message: the gateway puts it in its 400 answer


def test_big_integer_stays_an_integer():
    doc = sse.loads(EDGES[0])
    assert doc["usage"]["prompt_tokens"] == 18446744073709551616
    assert type(doc["usage"]["prompt_tokens"]) is int


_numbers = st.one_of(
    st.integers(min_value=-(10 ** 30), max_value=10 ** 30).map(str),
    st.builds(lambda m, f, e: f"{m}.{f}e{e}", st.integers(-10 ** 20, 10 ** 20), st.integers(0, 10 ** 20),
              st.integers(-400, 400)),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
)
_scalars = st.one_of(st.sampled_from(["null", "true", "false"]), _numbers, st.text(max_size=8).map(json.dumps))
_json_text = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda xs: "[" + ",".join(xs) + "]"),
        st.dictionaries(st.text(max_size=4), inner, max_size=4).map(
            lambda d: "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in d.items()) + "}")),
    max_leaves=12)


@settings(max_examples=400, deadline=None)
@given(_json_text)
def test_loads_matches_json_on_generated_documents(text):
    data = text.encode()
    got, want = _outcome(sse.loads, data), _outcome(json.loads, data)
    assert got[:2] == want[:2]
    if got[0] == "value":
        assert _same(got[1], want[1])
