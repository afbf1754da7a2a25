"""Token accounting over an OpenAI-compatible chat stream (SSE chunks), for client and gateway.

Position: serving. Pure logic, no I/O; :class:`StreamUsage` is fed one decoded chunk at a time
(a dict from ``json.loads`` or an ``openai`` ``ChatCompletionChunk``) and answers how many output
tokens arrived, what the server's usage said and how the choices finished.

The cases it gets right (vLLM, shared/reference/vllm-telemetry.md, "OpenAI-compatible API"):
* ``stream_options.include_usage``: usage arrives in a final chunk with ``choices: []`` — but some
  servers attach it to the last chunk that still carries a choice; both are read, and that chunk's
  content still counts.
* ``continuous_usage_stats``: EVERY chunk carries the cumulative usage so far. Usage is therefore
  always *replaced* by the latest chunk's, never summed.
* A stream that breaks: no usage chunk ever arrives; :attr:`tokens_received` is the best count of
  output tokens seen: the latest cumulative ``completion_tokens`` if the server sent any, else one
  token per chunk that carried output (vLLM emits one chunk per engine step, i.e. one token per
  chunk without speculative decoding or ``stream_interval``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if obj.__class__ is dict:  # decoded JSON, the common case: one check
        return obj.get(name, default)
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


@dataclass
class StreamUsage:
    """Accumulated view of one streamed completion.

    chunks: chunks fed. content_chunks: chunks whose choices carried output (text, tool calls).
    usage_prompt_tokens / usage_completion_tokens / usage_cached_tokens: the LATEST usage seen
    (cumulative, so replaced, never added), None until a chunk carries usage.
    finish_reasons: one per choice index that finished, in index order. response_id / model: from
    the first chunk that has them. error: the ``error`` object of a mid-stream error chunk.
    """

    chunks: int = 0
    content_chunks: int = 0
    usage_prompt_tokens: int | None = None
    usage_completion_tokens: int | None = None
    usage_cached_tokens: int | None = None
    finish_by_index: dict[int, str] = field(default_factory=dict)
    response_id: str | None = None
    model: str | None = None
    error: Any = None
    text_parts: list[str] = field(default_factory=list)
    keep_text: bool = False

    def feed(self, chunk: Any) -> None:
        """Account one decoded chunk (dict or ``ChatCompletionChunk``)."""
        self.chunks += 1
        err = _get(chunk, "error")
        if err:
            self.error = err
            return
        if self.response_id is None:
            self.response_id = _get(chunk, "id")
        if self.model is None:
            self.model = _get(chunk, "model")
        choices = _get(chunk, "choices") or ()
        carried = False
        for choice in choices:
            delta = _get(choice, "delta")
            text = _get(delta, "content") if delta is not None else _get(choice, "text")
            if text or _get(delta, "tool_calls") or _get(delta, "reasoning_content"):
                carried = True
                if self.keep_text and text:
                    self.text_parts.append(text)
            reason = _get(choice, "finish_reason")
            if reason:
                self.finish_by_index[int(_get(choice, "index", 0) or 0)] = str(reason)
        if carried:
            self.content_chunks += 1
        usage = _get(chunk, "usage")
        if usage:
            # Cumulative by contract (continuous_usage_stats) or final (include_usage): replace.
            self.usage_prompt_tokens = _get(usage, "prompt_tokens", self.usage_prompt_tokens)
            self.usage_completion_tokens = _get(usage, "completion_tokens", self.usage_completion_tokens)
            details = _get(usage, "prompt_tokens_details")
            cached = _get(details, "cached_tokens") if details else None
            if cached is not None:
                self.usage_cached_tokens = cached

    @property
    def tokens_received(self) -> int:
        """Output tokens seen so far (tokens): the server's cumulative count, or the chunks that carried
        output when more (a reader that skips decoding some continuous-usage chunks holds an older count)."""
        if self.usage_completion_tokens is not None:
            return max(int(self.usage_completion_tokens), self.content_chunks, 0)
        return self.content_chunks

    @property
    def finish_reasons(self) -> list[str]:
        return [self.finish_by_index[i] for i in sorted(self.finish_by_index)]

    @property
    def finished(self) -> bool:
        """True when at least one choice reported a finish reason."""
        return bool(self.finish_by_index)

    @property
    def text(self) -> str:
        return "".join(self.text_parts)
