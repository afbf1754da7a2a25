"""Upstream timeouts and client disconnects for the gateway, without per-chunk timers.

Position: serving (gateway). Each upstream attempt gets an :class:`AttemptWatch` (one small object
per attempt); the relay loop only stores the monotonic time of each chunk in it (a float
assignment: no allocation, no timer per chunk, which keeps the hot path lean). One watchdog task
per gateway (:func:`watchdog_loop`) scans the live watches every ``tick_s`` and cancels the
request's task when an attempt passes its deadline; the client's ``http.disconnect`` cancels it
at once (:meth:`AttemptWatch.on_receive`). The proxy catches the cancellation, reads ``reason``
and ends the attempt accordingly (retry, error event, or stop).

Deadlines (Envoy's vocabulary in brackets), all seconds, from :class:`~serving.gateway.config.GatewayConfig`:

* connect: TCP connect to the replica [connect_timeout] — aiohttp's own ``sock_connect``;
* first byte: request sent -> first byte of the body of a streamed response (for vLLM this is
  queueing + prefill: it sends headers at once) [per_try_timeout];
* chunk: longest silence between two chunks of a stream once it started [stream_idle_timeout];
* response: request sent -> whole body of a non-streamed response (vLLM answers only when done).
"""

from __future__ import annotations

import asyncio
import time

PHASES = ("first_byte", "chunk", "response")


class AttemptWatch:
    """The deadline state of one upstream attempt, and the reason it was cut (None while running).

    ``reason``: ``timeout`` or ``client_disconnect`` once the watchdog or the client ended it;
    ``phase``: which timeout (``first_byte``, ``chunk``, ``response``). ``last``: monotonic time of
    the latest upstream chunk (set by the relay loop).
    """

    __slots__ = ("task", "started", "last", "got_first", "stream", "first_byte_s", "chunk_s", "response_s",
                 "reason", "phase", "active", "answered")

    def __init__(self, task: asyncio.Task | None, stream: bool, first_byte_s: float, chunk_s: float, response_s: float):
        self.task = task
        self.started = self.last = time.monotonic()
        self.got_first = False
        self.stream = stream
        self.first_byte_s, self.chunk_s, self.response_s = first_byte_s, chunk_s, response_s
        self.reason: str | None = None
        self.phase = ""
        self.active = True  # False once the attempt's outcome is decided: never cancel after that
        # True once the client was sent ``data: [DONE]``: it has the whole answer, and closing its
        # connection then (the OpenAI SDK does at once) is not a disconnect that cuts the attempt.
        self.answered = False

    def overdue(self, now: float) -> str:
        """The phase whose deadline passed at ``now`` ('' when none)."""
        if not self.stream:
            return "response" if now - self.started > self.response_s else ""
        if not self.got_first:
            return "first_byte" if now - self.started > self.first_byte_s else ""
        return "chunk" if now - self.last > self.chunk_s else ""

    def cut(self, reason: str, phase: str = "") -> None:
        """End the attempt now: remember why and cancel the request's task (once)."""
        if not self.active or self.reason is not None or self.task is None:
            return
        self.reason, self.phase = reason, phase
        self.task.cancel()

    def on_receive(self, future: asyncio.Future) -> None:
        """Done-callback of the request's pending ``receive()``: a client disconnect cuts the attempt."""
        if future.cancelled() or future.exception() is not None:
            return
        if future.result().get("type") == "http.disconnect" and not self.answered:
            self.cut("client_disconnect")


async def watchdog_loop(watches: set, tick_s: float) -> None:
    """Cut every watched attempt whose deadline passed, every ``tick_s`` seconds, until cancelled."""
    while True:
        await asyncio.sleep(tick_s)
        now = time.monotonic()
        for watch in list(watches):
            if watch.active and watch.reason is None:
                phase = watch.overdue(now)
                if phase:
                    watch.cut("timeout", phase)


def take_cancellation(watch: AttemptWatch) -> bool:
    """In an ``except CancelledError`` handler: True (and the cancellation consumed) when ``watch`` caused
    it, False when it came from elsewhere (shutdown) and must propagate."""
    if watch.reason is None:
        return False
    task = asyncio.current_task()
    if task is not None and hasattr(task, "uncancel"):
        task.uncancel()
    watch.active = False
    return True
