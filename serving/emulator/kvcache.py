"""Paged KV cache with prefix caching: block accounting, segment hashes, LRU eviction.

Where it sits: owned by one engine (``engine.py``). Memory is counted in blocks of
``block_size`` tokens (vLLM default 16). Prefix caching follows vLLM's automatic prefix caching:
only full blocks are cached, each identified by a hash chained over everything before it; a
cached block whose reference count drops to zero stays resident and is evicted least recently
used first when memory is needed.

For speed a cache entry is a *segment*: a run of consecutive full blocks sharing one chained key
(one Mooncake ``hash_ids`` block of 512 tokens = 32 KV blocks; one 16-token block for text
prompts). A prompt is a tuple of ``(key, end_token)`` segments; a hit is the longest run of
leading segments found in the cache.
"""

from __future__ import annotations

import re
from collections import OrderedDict

MOONCAKE_BLOCK_TOKENS = 512  # Mooncake trace release: each hash id covers 512 prompt tokens


def segments_from_hash_ids(hash_ids, prompt_tokens: int, block_tokens: int = MOONCAKE_BLOCK_TOKENS,
                           block_size: int = 16) -> tuple[tuple[int, int], ...]:
    """Prefix-cache segments of a prompt described by block ids (Mooncake ``hash_ids``).

    Returns ``((key, end_token), ...)``: ``end_token`` is the cumulative prompt length covered,
    rounded down to full KV blocks; keys chain the ids so a block only matches after the same prefix.
    """
    out = []
    key = 0
    for i, hid in enumerate(hash_ids):
        end = min((i + 1) * block_tokens, prompt_tokens)
        end -= end % block_size
        if end <= (out[-1][1] if out else 0):
            break
        partial = end < (i + 1) * block_tokens
        key = hash((key, int(hid), end if partial else -1))
        out.append((key, end))
        if partial:
            break
    return tuple(out)


_TOKEN_RE = re.compile(r"\w+|[^\w\s]")


def tokenize(text: str) -> list[str]:
    """A stand-in tokenizer (words and punctuation marks). The emulator has no vocabulary; counts
    are about 0.75x a BPE tokenizer's on English, which is fine for timing and cache behaviour."""
    return _TOKEN_RE.findall(text)


def segments_from_tokens(tokens, block_size: int = 16) -> tuple[tuple[int, int], ...]:
    """Prefix-cache segments of a tokenised prompt: one per full ``block_size`` block, chained."""
    out = []
    key = 0
    for end in range(block_size, len(tokens) + 1, block_size):
        key = hash((key, tuple(tokens[end - block_size:end])))
        out.append((key, end))
    return tuple(out)


class PrefixCache:
    """Segments resident in KV memory: key -> [refcount, n_blocks]; LRU over unreferenced ones.

    ``ref_blocks``: blocks of segments in use by some request. ``evictable_blocks``: blocks of
    resident segments nobody references (free to evict, still hit-able).
    """

    __slots__ = ("entries", "lru", "ref_blocks", "evictable_blocks", "enabled")

    def __init__(self, enabled: bool = True):
        self.entries: dict[int, list[int]] = {}
        self.lru: OrderedDict[int, None] = OrderedDict()
        self.ref_blocks = 0
        self.evictable_blocks = 0
        self.enabled = enabled

    def lookup(self, segments) -> int:
        """Number of leading segments resident (a prefix-cache hit), without touching refcounts."""
        if not self.enabled:
            return 0
        n = 0
        entries = self.entries
        for key, _end in segments:
            if key not in entries:
                break
            n += 1
        return n

    def unreferenced_blocks(self, segments, n: int) -> int:
        """Blocks among the first ``n`` segments that are resident but unreferenced (would become used)."""
        total = 0
        for key, _end in segments[:n]:
            e = self.entries[key]
            if e[0] == 0:
                total += e[1]
        return total

    def ref(self, key: int) -> None:
        e = self.entries[key]
        if e[0] == 0:
            self.lru.pop(key, None)
            self.evictable_blocks -= e[1]
            self.ref_blocks += e[1]
        e[0] += 1

    def unref(self, key: int) -> None:
        e = self.entries[key]
        e[0] -= 1
        if e[0] == 0:
            self.ref_blocks -= e[1]
            if self.enabled:
                self.evictable_blocks += e[1]
                self.lru[key] = None
            else:
                del self.entries[key]

    def insert(self, key: int, n_blocks: int) -> bool:
        """Register a just-computed segment, referenced once by its computing request.

        Returns False when the key is already resident (another request computed it meanwhile:
        the caller keeps its own copy of the blocks, as vLLM does for concurrent identical prefills).
        """
        if key in self.entries:
            return False
        self.entries[key] = [1, n_blocks]
        self.ref_blocks += n_blocks
        return True

    def evict(self, blocks_needed: int) -> int:
        """Evict least recently used unreferenced segments until ``blocks_needed`` are freed."""
        freed = 0
        while freed < blocks_needed and self.lru:
            key, _ = self.lru.popitem(last=False)
            n = self.entries.pop(key)[1]
            self.evictable_blocks -= n
            freed += n
        return freed

    def clear(self) -> None:
        self.entries.clear()
        self.lru.clear()
        self.ref_blocks = 0
        self.evictable_blocks = 0
