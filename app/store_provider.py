"""The process-level store the dashboard's page scripts read from.

Position: **app** (reads the store through ``schema.queries`` only). Streamlit runs the page
scripts in threads of the process that serves them; this module is the hand-over point: the
service (``infercost up``), ``infercost dashboard`` or a test calls :func:`set_store` before the
first page runs, and pages call :func:`get_store`. The app never reads settings itself.

``context`` carries plain facts the empty states mention (e.g. ``otlp_endpoint``, the URL vLLM's
``--otlp-traces-endpoint`` should point at), so the app needs no settings to say what to do.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading

log = logging.getLogger("app")

_lock = threading.Lock()
_store = None
_context: dict[str, str] = {}
# Clients for reads run beside the page's own (app.ui.prefetch): clones of the store, made on first
# use, at most READERS of them; closed when the store is replaced or cleared.
READERS = 2
_readers: queue.Queue = queue.Queue()
_readers_made = 0


class NoStore(RuntimeError):
    """No store was handed to the dashboard (start it with ``infercost dashboard`` / ``infercost up``)."""


def set_store(store, **context: str) -> None:
    """Hand ``store`` (a :class:`schema.store.Store`) to the dashboard; ``context`` updates the hints."""
    global _store
    with _lock:
        if store is not _store:
            _close_readers()
        _store = store
        _context.update({k: str(v) for k, v in context.items() if v is not None})


def get_store():
    """The store set by :func:`set_store`; raises :class:`NoStore` with what to do when there is none."""
    with _lock:
        if _store is None:
            raise NoStore("the dashboard has no store: start it with `infercost dashboard` or `infercost up` "
                          "(or call app.store_provider.set_store(store) before serving)")
        return _store


@contextlib.contextmanager
def reader():
    """Borrow a client for one read run in parallel with the page's (a clone of the store: the embedded
    engine runs one call per client at a time); waits while all :data:`READERS` are lent out. Raises
    :class:`NoStore` without a store and StoreUnavailable when a clone cannot be opened."""
    global _readers_made
    store = get_store()
    client = None
    while client is None:
        with _lock:
            make = _readers.empty() and _readers_made < READERS
            if make:
                _readers_made += 1
        if make:
            try:
                client = store.clone()
            except Exception:
                with _lock:
                    _readers_made -= 1
                raise
        else:
            with contextlib.suppress(queue.Empty):  # a swap of the store may empty the pool meanwhile
                client = _readers.get(timeout=0.2)
    try:
        yield client
    finally:
        with _lock:
            keep = _store is store
            if keep:
                _readers.put(client)
        if not keep:  # the store was replaced while this read ran
            client.close()


def _close_readers() -> None:
    """Close the pooled clones (caller holds ``_lock``); clones lent out close when returned."""
    global _readers_made
    while True:
        try:
            client = _readers.get_nowait()
        except queue.Empty:
            break
        try:
            client.close()
        except Exception:  # closing must not raise while the store is swapped
            log.debug("closing a dashboard reader failed", exc_info=True)
    _readers_made = 0


def store_key() -> str:
    """A stable key of the current store for result caches: database name + object identity."""
    store = get_store()
    return f"{getattr(store, 'database', '')}:{id(store)}"


def context(name: str, default: str = "") -> str:
    """A hint set with :func:`set_store` (e.g. ``otlp_endpoint``), or ``default``."""
    with _lock:
        return _context.get(name, default)


def clear() -> None:
    """Forget the store and hints (tests)."""
    global _store
    with _lock:
        _close_readers()
        _store = None
        _context.clear()
