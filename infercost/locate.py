"""Which store a CLI command reads, and how: the store itself, or the owning service's query API.

One data location per data dir: ``infercost demo``, ``up``, ``cost``, ``review`` and ``dashboard`` all
use ``<data dir>/clickhouse`` (embedded) or ``INFERCOST_CLICKHOUSE_URL``. chDB lets one process open a
directory; while ``up`` / ``demo`` own it they announce their query API in ``<data dir>/service.json``
and read-only commands go through it (:class:`APIClient`, same answers: the API runs the same named
queries). A read-only command never creates an empty store: with no store at the path it says so
and what to run. Every command says which store it opened (on stderr).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from infercost.settings import Settings
from schema.redact import redact


class NoStoreHere(RuntimeError):
    """There is no store where the settings point (nothing was created)."""


@dataclass
class APIClient:
    """The owning service's query API (``infercost.api``), used while the embedded store is locked."""

    base_url: str  # http://host:port/api/v1
    token: str = ""
    timeout_s: float = 120.0

    def get(self, path: str, **params) -> dict:
        """GET ``base_url + path`` with ``params``; returns the JSON. Raises RuntimeError with the API's message."""
        import httpx

        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        clean = {k: v for k, v in params.items() if v not in (None, "")}
        try:
            resp = httpx.get(self.base_url + path, params=clean, headers=headers, timeout=self.timeout_s)
        except httpx.HTTPError as exc:
            raise RuntimeError(f"the service's query API at {self.base_url} did not answer: {exc}") from exc
        try:
            body = resp.json()
        except ValueError:
            body = {"error": resp.text[:200]}
        if resp.status_code != 200:
            raise RuntimeError(f"query API {path}: HTTP {resp.status_code}: {body.get('error', body)}")
        return body


def service_api(settings: Settings) -> APIClient | None:
    """The query API announced in ``<data dir>/service.json`` by a live owner process, else None."""
    try:
        info = json.loads(settings.service_file.read_text())
    except (OSError, ValueError):
        return None
    pid = info.get("pid")
    try:
        if not isinstance(pid, int):
            return None
        os.kill(pid, 0)  # signal 0: is the process alive?
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, another user's
    url = info.get("api_url")
    return APIClient(url, token=settings.auth_token) if url else None


def embedded_path(settings: Settings) -> Path | None:
    """The embedded store's directory, or None for a server URL."""
    url = settings.store_url
    if not url.startswith("chdb://"):
        return None
    rest = url[len("chdb://"):]
    return None if rest in ("", "memory", ":memory:") else Path(rest).expanduser().resolve()


def store_exists(settings: Settings) -> bool:
    """True when the embedded store holds our database (a server store always "exists")."""
    path = embedded_path(settings)
    if path is None:
        return True
    meta = path / "metadata"
    return (meta / settings.database).exists() or (meta / f"{settings.database}.sql").exists()


def open_for_reading(settings: Settings, echo, *, migrate_store: bool = True):
    """The store (a :class:`schema.store.Store`) or the owner's :class:`APIClient` for a read-only command.

    Args:
        echo: ``echo(text)`` for the one line saying which store was opened (stderr in the CLI).
        migrate_store: apply pending migrations when the store is opened directly.

    Raises:
        NoStoreHere: the embedded store does not exist (with what to run), or it is locked by a process
            that announced no API.
        StoreError / MigrationError: the store failed.
    """
    from schema.migrate import migrate
    from schema.store import StoreUnavailable, connect

    path = embedded_path(settings)
    if path is not None:
        api = service_api(settings)
        if api is not None:
            echo(f"store: {path} (owned by a running service; reading through its query API {api.base_url})")
            return api
        if not store_exists(settings):
            raise NoStoreHere(
                f"no store at {path} (INFERCOST_DATA_DIR={settings.data_dir}): nothing was created. Run "
                "`infercost demo` or `infercost up` first, or point INFERCOST_DATA_DIR / INFERCOST_CLICKHOUSE_URL "
                "at your store.")
    try:
        store = connect(settings.store_url, settings.database)
    except StoreUnavailable as exc:
        # chDB refuses a directory another process holds ("Cannot lock file", or "Error initializing
        # EmbeddedServer" in chdb 4.x): an existing embedded store that will not open is held elsewhere.
        if path is not None:
            raise NoStoreHere(f"the store at {path} is held by another process that announced no query API "
                              f"({settings.service_file} missing): stop it, or run `infercost up` / `demo` "
                              "there (they serve /api/v1 for the CLI)") from exc
        raise
    if migrate_store:
        migrate(store, settings.retention_days)
    echo(f"store: {path if path is not None else redact(settings.store_url)}")
    return store
