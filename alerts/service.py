"""The alert service: the evaluator on a named background thread, for ``infercost alerts`` and
``infercost up``/``demo``.

``AlertService(store, config, receiver_stats=None, notifiers=None)``; ``start()`` runs
``step(now=wall clock)`` every ``config.interval_s`` on the thread ``infercost-alerts``;
``start()`` first resumes alerts left open in the table by a previous run; ``stop()`` is idempotent and drains pending deliveries; ``step(now)`` runs one evaluation in the
caller's thread (tests, ``--once``). Exceptions inside a step are logged and counted, never fatal.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timezone
from typing import Any, Callable

from alerts.config import AlertConfig
from alerts.evaluator import Evaluator
from alerts.model import Transition
from alerts.notifiers import Dispatcher, Notifier

log = logging.getLogger(__name__)


class AlertService:
    """Runs the evaluator live.

    Args:
        store: schema.store.Store.
        config: AlertConfig (defaults if None).
        receiver_stats: optional callable returning the receiver's stats (duck-typed dataclass with
            rejected, spooled_bytes, store_available), for the ingestion-health rule.
        notifiers: Notifier list (webhook / slack / alertmanager); none = record only.
        clock: returns "now" (UTC); injectable for tests.
    """

    def __init__(self, store, config: AlertConfig | None = None, receiver_stats: Callable[[], Any] | None = None,
                 notifiers: list[Notifier] | None = None, clock: Callable[[], datetime] | None = None,
                 dispatcher: Dispatcher | None = None):
        self.config = (config or AlertConfig()).validate()
        self.dispatcher = dispatcher or (Dispatcher(notifiers) if notifiers else None)
        self.evaluator = Evaluator(store, self.config, self.dispatcher, receiver_stats)
        self.clock = clock or (lambda: datetime.now(timezone.utc))
        self.failures = 0
        self._restored = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def step(self, now: datetime | None = None) -> list[Transition]:
        """One evaluation at ``now`` (default: the clock). Returns its state changes."""
        with self._lock:
            return self.evaluator.step(now or self.clock())

    def restore(self) -> int:
        """Resume alerts left open in the ``alerts`` table by a previous run (once). Returns the count."""
        if self._restored:
            return 0
        self._restored = True
        with self._lock:
            return self.evaluator.restore()

    def start(self) -> "AlertService":
        """Start the background loop (thread ``infercost-alerts``); a second call does nothing."""
        if self._thread is not None:
            return self
        self.restore()
        if self.dispatcher is not None:
            self.dispatcher.start()
        self._thread = threading.Thread(target=self._loop, name="infercost-alerts", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the loop and drain deliveries within ``timeout_s``. Idempotent."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=timeout_s)
        if self.dispatcher is not None:
            self.dispatcher.stop(timeout_s)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except Exception:  # keep evaluating: one bad step must not end alerting
                self.failures += 1
                log.exception("alert evaluation failed")
            self._stop.wait(self.config.interval_s)
