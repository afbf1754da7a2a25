"""The process-level store the dashboard's page scripts read from.

Position: **app** (reads the store through ``schema.queries`` only). Streamlit runs the page
scripts in threads of the process that serves them; this module is the hand-over point: the
service (``infercost up``), ``infercost dashboard`` or a test calls :func:`set_store` before the
first page runs, and pages call :func:`get_store`. The app never reads settings itself.

``context`` carries plain facts the empty states mention (e.g. ``otlp_endpoint``, the URL vLLM's
``--otlp-traces-endpoint`` should point at), so the app needs no settings to say what to do.
"""

from __future__ import annotations

import threading

_lock = threading.Lock()
_store = None
_context: dict[str, str] = {}


class NoStore(RuntimeError):
    """No store was handed to the dashboard (start it with ``infercost dashboard`` / ``infercost up``)."""


def set_store(store, **context: str) -> None:
    """Hand ``store`` (a :class:`schema.store.Store`) to the dashboard; ``context`` updates the hints."""
    global _store
    with _lock:
        _store = store
        _context.update({k: str(v) for k, v in context.items() if v is not None})


def get_store():
    """The store set by :func:`set_store`; raises :class:`NoStore` with what to do when there is none."""
    with _lock:
        if _store is None:
            raise NoStore("the dashboard has no store: start it with `infercost dashboard` or `infercost up` "
                          "(or call app.store_provider.set_store(store) before serving)")
        return _store


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
        _store = None
        _context.clear()
