"""Admission control: per-priority caps, an optional upstream concurrency limit, 429 beyond.

Position: serving (gateway). Delaying work is one of the four moves (avoid, share, move, delay work): past a priority's
cap a request is rejected at once with ``429`` + ``Retry-After`` (cheap for everyone) rather than
queued until it times out after consuming GPU time. vLLM itself never answers 429 (it queues), so
this is where back-pressure comes from.

Semantics: ``cap(priority)`` bounds the requests of that priority inside the gateway (waiting +
in flight). With ``max_inflight > 0`` at most that many requests are upstream at once; the rest
wait, served in ``priorities_order`` (interactive before batch), FIFO within a priority.
"""

from __future__ import annotations

import asyncio
from collections import deque


class Rejected(Exception):
    """The request exceeded its priority's cap; answer 429 with ``retry_after_s``."""

    def __init__(self, priority: str, cap: int, retry_after_s: float):
        super().__init__(f"priority {priority!r} is at its cap of {cap} requests")
        self.priority, self.cap, self.retry_after_s = priority, cap, retry_after_s


class Admission:
    """``await acquire(priority)`` -> admitted (or raises :class:`Rejected`); ``release(priority)`` when done.

    caps: priority -> cap; default_cap for others. max_inflight: 0 = no upstream limit.
    priorities_order: dequeue order. Counts only; single event loop, no locks needed.
    """

    def __init__(self, caps: dict[str, int], default_cap: int, retry_after_s: float, max_inflight: int = 0,
                 priorities_order: tuple[str, ...] = ("interactive", "batch")):
        self.caps = dict(caps)
        self.default_cap = default_cap
        self.retry_after_s = retry_after_s
        self.max_inflight = max_inflight
        self.order = list(priorities_order)
        self.inside: dict[str, int] = {}
        self.inflight = 0
        self._waiters: dict[str, deque[asyncio.Future]] = {}

    def cap(self, priority: str) -> int:
        return self.caps.get(priority, self.default_cap)

    def queued(self) -> int:
        return sum(len(q) for q in self._waiters.values())

    async def acquire(self, priority: str) -> None:
        cap = self.cap(priority)
        inside = self.inside.get(priority, 0)
        if inside >= cap:
            raise Rejected(priority, cap, self.retry_after_s)
        self.inside[priority] = inside + 1
        if self.max_inflight and self.inflight >= self.max_inflight:
            fut = asyncio.get_running_loop().create_future()
            self._waiters.setdefault(priority, deque()).append(fut)
            try:
                await fut  # the releaser counted us in flight already
            except BaseException:
                if fut.done() and not fut.cancelled():
                    self._release_slot()
                else:
                    self._waiters[priority].remove(fut)
                self.inside[priority] -= 1
                raise
        else:
            self.inflight += 1

    def _release_slot(self) -> None:
        for prio in self.order + [p for p in self._waiters if p not in self.order]:
            q = self._waiters.get(prio)
            while q:
                fut = q.popleft()
                if not fut.done():
                    fut.set_result(None)  # hand the slot over: inflight stays the same
                    return
        self.inflight -= 1

    def release(self, priority: str) -> None:
        """The request finished (any outcome): free its slot and its place under the cap."""
        self.inside[priority] -= 1
        self._release_slot()
