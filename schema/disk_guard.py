"""Keep the embedded store's scheduled jobs off a nearly full disk.

Position: schema (store-side protection; started by ``infercost collector`` / ``infercost up``
next to the receiver). The cost jobs are refreshable materialized views (``schema/jobs``); a
refresh replaces its target table by creating a new one and swapping table definitions. With the
embedded engine (chDB 26.9) on a full disk, a refresh was seen to leave a table definition file
empty, after which the store no longer opens (observed in the fault-injection suite on tmpfs). The
receiver itself loses nothing on a full disk (its spool answers 503, its writer retries), so the
guard only has to keep refreshes from running then:

* every ``interval_s`` it reads the free space of the store's directory;
* below ``min_free_bytes`` it stops the refresh schedule (``SYSTEM STOP VIEW``, :func:`schema.jobs.stop`;
  again every tick while low, so a part starting the jobs meanwhile is overruled) and reports
  ``low`` (the receiver's ``/health`` shows it);
* above twice that it starts the schedule again (only if it stopped it).

A ClickHouse server manages its own disks; the guard runs for the embedded store only.
"""

from __future__ import annotations

import logging
import shutil
import threading
from pathlib import Path

log = logging.getLogger(__name__)


class DiskGuard:
    """Watches ``path``'s free space for ``store`` (see module doc). ``start()`` / ``stop()``; ``low`` is
    True while the schedule is stopped for lack of space; ``free_bytes`` the last reading."""

    def __init__(self, store, path: str | Path, min_free_bytes: int = 256 * 1024 * 1024, interval_s: float = 1.0):
        self.store = store
        self.path = Path(path)
        self.min_free_bytes = int(min_free_bytes)
        self.interval_s = interval_s
        self.low = False
        self.free_bytes: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def check(self) -> None:
        """One reading, and the schedule stopped or started accordingly (also called by the thread)."""
        from schema import jobs
        from schema.store import StoreError

        try:
            self.free_bytes = shutil.disk_usage(self.path).free
        except OSError as exc:
            log.debug("disk usage of %s unreadable: %s", self.path, exc)
            return
        try:
            if self.free_bytes < self.min_free_bytes or (self.low and self.free_bytes < 2 * self.min_free_bytes):
                jobs.stop(self.store, wait_s=None)  # every tick while low: whoever starts the jobs meanwhile is overruled
                if not self.low:
                    log.warning("store disk nearly full (%d bytes free < %d): cost jobs paused until space returns",
                                self.free_bytes, self.min_free_bytes)
                self.low = True
            elif self.low and self.free_bytes >= 2 * self.min_free_bytes:
                jobs.start(self.store)
                self.low = False
                log.info("store disk has room again (%d bytes free): cost jobs resumed", self.free_bytes)
        # store not connected yet, views missing, or a missed run still running: try again next tick
        except (StoreError, RuntimeError) as exc:
            log.debug("disk guard could not switch the jobs: %s", exc)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.check()

    def start(self) -> "DiskGuard":
        if self._thread is None:
            self.check()
            self._thread = threading.Thread(target=self._run, name="infercost-disk-guard", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
