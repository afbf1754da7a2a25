"""Prompt text of a given length whose shared prefix blocks are byte-identical across calls.

Position: serving (workloads). The traces carry sizes, not text (serving/workloads/data/README.md), so the
live runner builds text: each 512-token block id (Mooncake ``hash_ids``, or the builder's
per-task ids) maps to the same 512 words every time, so a prefix cache (vLLM's, the emulator's)
sees a hit exactly where ids repeat; the rest of the prompt is words unique to the call.

Words are common lower-case English words, each one token in Llama-3's tokenizer and in the
emulator's word tokenizer (``serving.emulator.kvcache.tokenize``), so ``n`` words ~ ``n`` tokens.
"""

from __future__ import annotations

import functools
import random

from serving.workloads.traces import MOONCAKE_BLOCK_TOKENS

WORDS = tuple("""the of and to in is was for on that with as by at from his it an were are which this be or
has had not but have one their its also first after new who they two been her more other she when all
time during into there would only most can years over some many city later then about made used these
under before may such while part well where world state year through people both between three name known
since called each day found work number being life however second four system data model
set line place end high small large form group use area music water light power order game field""".split())


@functools.lru_cache(maxsize=4096)
def block_text(block_id: int, tokens: int = MOONCAKE_BLOCK_TOKENS) -> str:
    """``tokens`` words determined only by ``block_id`` (a leading space included)."""
    rng = random.Random(block_id * 1_000_003 + tokens)
    return " " + " ".join(rng.choices(WORDS, k=tokens))


def filler(seed: str, tokens: int) -> str:
    """``tokens`` words unique to ``seed`` (a call's id), so unshared parts never hit a cache."""
    if tokens <= 0:
        return ""
    rng = random.Random(seed)
    return " " + " ".join(rng.choices(WORDS, k=tokens))


def prompt_text(prompt_tokens: int, prefix_blocks: tuple[int, ...], seed: str) -> str:
    """A prompt of about ``prompt_tokens`` tokens: the full 512-token blocks of ``prefix_blocks`` that
    fit, a partial last block, then words unique to ``seed``. Raises ValueError if prompt_tokens < 1."""
    if prompt_tokens < 1:
        raise ValueError(f"prompt_tokens must be >= 1, got {prompt_tokens}")
    parts, used = [], 0
    for block in prefix_blocks:
        take = min(MOONCAKE_BLOCK_TOKENS, prompt_tokens - used)
        if take <= 0:
            break
        parts.append(block_text(block, MOONCAKE_BLOCK_TOKENS)[: _prefix_chars(block, take)] if take < MOONCAKE_BLOCK_TOKENS
                     else block_text(block))
        used += take
    parts.append(filler(seed, prompt_tokens - used))
    return "".join(parts).lstrip()


def _prefix_chars(block: int, words: int) -> int:
    """Characters of ``block_text(block)`` covering its first ``words`` words."""
    text = block_text(block)
    pos = 0
    for _ in range(words):
        pos = text.find(" ", pos + 1)
        if pos < 0:
            return len(text)
    return pos
