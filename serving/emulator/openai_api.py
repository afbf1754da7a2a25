"""vLLM's OpenAI-compatible API shapes: request parsing, response chunks, usage, errors.

Where it sits: used by server.py (live replicas). Shapes follow vLLM's ``entrypoints/openai``
(shared/reference/vllm-telemetry.md): errors ``{"error": {"message", "type", "param", "code"}}``,
SSE chunks of object ``chat.completion.chunk`` / ``text_completion``, a usage chunk with
``choices: []``. Emulator extensions to the request body are described in server.py.
"""

from __future__ import annotations

import json
import zlib

from starlette.responses import JSONResponse

from serving.emulator.kvcache import segments_from_hash_ids, segments_from_tokens, tokenize

_WORDS = ("the", " model", " emulates", " a", " GPU", " replica", ",", " token", " by", " token", ".")
_ERROR_TYPES = {400: "BadRequestError", 404: "NotFoundError", 429: "TooManyRequestsError",
                500: "InternalServerError", 502: "BadGatewayError", 503: "ServiceUnavailableError",
                504: "GatewayTimeoutError"}
CRASH_MESSAGE = "EngineCore encountered an issue. See stack trace (above) for the root cause."
REJECT_MESSAGE = "The prompt does not fit in the KV cache of this replica."
CHAT_TEMPLATE_TOKENS_PER_MESSAGE = 4  # Llama 3 chat template: header ids + eot per message


def error_body(message: str, status: int, param=None) -> dict:
    """vLLM's error JSON: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": _ERROR_TYPES.get(status, "InternalServerError"),
                      "param": param, "code": status}}


def error_response(message: str, status: int, headers=None, param=None) -> JSONResponse:
    return JSONResponse(error_body(message, status, param), status_code=status, headers=headers)


def parse_prompt(body: dict, chat: bool, block_size: int = 16):
    """Prompt tokens and prefix-cache segments of a chat or completions request body.

    Raises ValueError with a client-facing message for a malformed body.
    """
    if chat:
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise ValueError("'messages' must be a non-empty list")
        tokens = []
        for m in msgs:
            if not isinstance(m, dict) or "role" not in m:
                raise ValueError("each message needs a 'role'")
            content = m.get("content") or ""
            if isinstance(content, list):  # content parts
                content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
            tokens += ["<|start_header_id|>", m["role"], "<|end_header_id|>"] + tokenize(str(content)) + ["<|eot_id|>"]
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            tokens = [str(t) for t in prompt]
        elif isinstance(prompt, str) and prompt:
            tokens = tokenize(prompt)
        elif isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            tokens = tokenize(prompt[0])
        else:
            raise ValueError("'prompt' must be a non-empty string or a list of token ids")
    want = body.get("emulator_prompt_tokens")
    if want is not None:
        if not isinstance(want, int) or want < 1:
            raise ValueError("'emulator_prompt_tokens' must be a positive integer")
        tokens = (tokens + ["<pad>"] * want)[:want] if want >= len(tokens) else tokens[:want]
    if not tokens:
        tokens = ["<|begin_of_text|>"]
    blocks = body.get("emulator_prefix_blocks")
    if blocks is not None:
        if not isinstance(blocks, list) or not all(isinstance(b, int) for b in blocks):
            raise ValueError("'emulator_prefix_blocks' must be a list of integers")
        segments = segments_from_hash_ids(blocks, len(tokens), block_size=block_size)
    else:
        segments = segments_from_tokens(tokens, block_size)
    return tokens, segments

def output_tokens(body: dict, header_value, tokens) -> int:
    """Tokens the emulated model generates before stopping (see the module docstring)."""
    v = body.get("emulator_output_tokens", header_value)
    max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise ValueError("'max_tokens' must be a positive integer")
    if v is not None:
        try:
            n = int(v)
        except (TypeError, ValueError):
            raise ValueError("'emulator_output_tokens' must be a positive integer") from None
        if n < 1:
            raise ValueError("'emulator_output_tokens' must be a positive integer")
        return n
    if body.get("ignore_eos") and max_tokens:
        return int(max_tokens) + 1  # never stops by itself: max_tokens ends it ("length")
    natural = 32 + zlib.crc32(" ".join(tokens[-64:]).encode()) % 256
    return max(natural, int(body.get("min_tokens") or 0))


def request_n(body: dict) -> int:
    """The ``n`` parameter (choices per request). Raises ValueError as vLLM 0.32 does: ``n`` < 1,
    or ``n`` > 1 with greedy sampling (``temperature`` 0)."""
    n = body.get("n")
    if n is None:
        return 1
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError("'n' must be a positive integer")
    if n > 1 and body.get("temperature") == 0:
        raise ValueError(f"n must be 1 when using greedy sampling, got {n}.")
    return n


def context_error(prompt_tokens: int, max_tokens, max_model_len: int) -> tuple[str, str] | None:
    """vLLM 0.32's 400s about the context, as ``(message, param)``, or None: ``max_tokens`` above
    the context, or a prompt that leaves no room for one output token. A prompt + ``max_tokens``
    over the context is NOT an error: the output is capped (observed on a real vLLM 0.32 server)."""
    if max_tokens is not None and max_tokens > max_model_len:
        return (f"max_tokens={max_tokens} cannot be greater than max_model_len={max_model_len}. Please request "
                f"fewer output tokens. (parameter=max_tokens, value={max_tokens})", "max_tokens")
    if prompt_tokens >= max_model_len:
        at_least = min(prompt_tokens, max_model_len + 1)
        return (f"This model's maximum context length is {max_model_len} tokens. However, your prompt contains at "
                f"least {at_least} input tokens, which exceeds this limit even without any output tokens. Please "
                f"reduce the length of the input prompt. (parameter=input_tokens, value={at_least})", "input_tokens")
    return None


def usage(reqs, outs) -> dict:
    """Usage of a client request: the prompt once, the completion tokens of all its choices, and
    ``prompt_tokens_details.cached_tokens`` (vLLM with ``--enable-prompt-tokens-details``) only when
    some prompt tokens were cached: vLLM 0.32 sets the details only for a request with cached tokens
    (a miss has no ``prompt_tokens_details``; CONFORMANCE.md)."""
    reqs = reqs if isinstance(reqs, (list, tuple)) else [reqs]
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    prompt = reqs[0].prompt_tokens
    completion = sum(outs)
    out = {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion}
    if reqs[0].hit_tokens:
        out["prompt_tokens_details"] = {"cached_tokens": reqs[0].hit_tokens, "created_cache_tokens": 0}
    return out

def sse_chunk(request_id, chat, model, created, text=None, role=None, finish=None, usage=None, choices=True,
              index: int = 0) -> str:
    """One SSE ``data:`` line of a streamed chat/completions response, vLLM's chunk shape."""
    if chat:
        delta = {}
        if role:
            delta["role"] = role
        if text is not None:
            delta["content"] = text
        choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
        if finish:
            choice["stop_reason"] = None
        obj = "chat.completion.chunk"
    else:
        choice = {"index": index, "text": text or "", "logprobs": None, "finish_reason": finish, "stop_reason": None}
        obj = "text_completion"
    d = {"id": request_id, "object": obj, "created": created, "model": model,
         "choices": [choice] if choices else []}
    if usage is not None:
        d["usage"] = usage
    return "data: " + json.dumps(d, separators=(",", ":")) + "\n\n"
