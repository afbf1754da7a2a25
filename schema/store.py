"""The one store access layer: a ClickHouse client from a URL, tagged, timed, with typed errors.

Position in the flow: serving -> collectors -> **schema** -> app/alerts. Everything that reads or
writes ClickHouse goes through :class:`Store`; it

* opens the backend named by a URL (``chdb://<dir>``, ``chdb://memory``, ``http(s)://…``),
* creates our database with ``ENGINE = Atomic`` (refreshable materialized views need it on chDB),
* tags every call with ``log_comment`` (visible in ``system.query_log``) and times it,
* retries only transient errors (network, server overload) and raises typed errors.

chDB allows one engine path per process (a second path raises); clients on the same path share
the data, and each client keeps its own current database, which is how tests isolate themselves.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence
from urllib.parse import urlparse

import clickhouse_connect
from clickhouse_connect.driver.exceptions import DatabaseError, OperationalError
from clickhouse_connect.driver.exceptions import Error as ClickHouseDriverError

log = logging.getLogger(__name__)

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
# ClickHouse error codes that are worth retrying: TIMEOUT_EXCEEDED, TOO_MANY_SIMULTANEOUS_QUERIES,
# NETWORK_ERROR, SOCKET_TIMEOUT, TOO_MANY_PARTS, MEMORY_LIMIT_EXCEEDED (server-wide), ALL_CONNECTION_TRIES_FAILED.
_TRANSIENT_CODES = {159, 202, 210, 209, 252, 241, 279}


class StoreError(Exception):
    """Base of the store's typed errors. ``tag`` names the call that failed."""

    def __init__(self, message: str, tag: str = ""):
        super().__init__(f"[{tag}] {message}" if tag else message)
        self.tag = tag


class StoreUnavailable(StoreError):
    """The store cannot be reached or is overloaded; callers answer with back-pressure."""


class StoreQueryError(StoreError):
    """The store rejected a statement (syntax, types, missing table): not retried."""


def validate_identifier(name: str) -> str:
    """Return ``name`` if it is a safe ClickHouse identifier (database, table), else raise ValueError.

    Identifiers cannot be bound as query parameters, so they reach SQL only through this check.
    """
    if not _IDENTIFIER.match(name or ""):
        raise ValueError(f"not a valid ClickHouse identifier: {name!r} (letters, digits, '_'; not starting with a digit)")
    return name


@dataclass
class StoreStats:
    """Counters of the access layer (mapped to Prometheus by the service, not here)."""

    calls: int = 0
    errors: int = 0
    retries: int = 0
    seconds: float = 0.0
    by_tag: dict[str, float] = field(default_factory=dict)


def _error_code(exc: BaseException) -> int | None:
    match = re.search(r"Code: (\d+)", str(exc))
    return int(match.group(1)) if match else None


def _is_transient(exc: BaseException) -> bool:
    if isinstance(exc, OperationalError):
        return True
    code = _error_code(exc)
    return code in _TRANSIENT_CODES


@dataclass(frozen=True)
class StoreURL:
    """A parsed store URL. ``backend`` is ``chdb`` or ``http``; ``path`` is the chDB data path."""

    backend: str
    path: str = ""
    dsn: str = ""
    database: str = ""

    @classmethod
    def parse(cls, url: str) -> "StoreURL":
        """Parse ``chdb://memory``, ``chdb://<dir>`` or ``http(s)://user:pass@host:port/db``.

        Raises ValueError with the accepted forms for anything else.
        """
        if url.startswith("chdb://"):
            rest = url[len("chdb://"):]
            if rest in ("", "memory", ":memory:"):
                return cls("chdb", path=":memory:")
            return cls("chdb", path=str(Path(rest).expanduser().resolve()))
        parsed = urlparse(url)
        if parsed.scheme in ("http", "https", "clickhouse", "clickhouses"):
            database = parsed.path.strip("/")
            if database:
                validate_identifier(database)
            return cls("http", dsn=url, database=database)
        raise ValueError(
            f"unsupported store URL {url!r}: use chdb://<directory>, chdb://memory or http(s)://user:pass@host:8123/db"
        )


class Store:
    """A ClickHouse client bound to one database, with tagging, timing, retries and typed errors.

    Use :func:`connect` to build one. Methods take SQL text (from ``.sql`` files) and bound
    parameters (``{name:Type}`` placeholders); they never format values into SQL.
    """

    def __init__(self, url: StoreURL, database: str, client: Any, retries: int = 2):
        self.url = url
        self.database = database
        self.client = client
        self.retries = retries
        self.stats = StoreStats()
        self._lock = threading.Lock() if url.backend == "chdb" else None

    @property
    def embedded(self) -> bool:
        return self.url.backend == "chdb"

    def _call(self, tag: str, fn, *args, **kwargs):
        settings = dict(kwargs.pop("settings", None) or {})
        settings.setdefault("log_comment", f"infercost:{tag}")
        attempt = 0
        while True:
            start = time.perf_counter()
            try:
                if self._lock is not None:
                    with self._lock:
                        return fn(*args, settings=settings, **kwargs)
                return fn(*args, settings=settings, **kwargs)
            except ClickHouseDriverError as exc:
                transient = _is_transient(exc)
                if transient and attempt < self.retries:
                    attempt += 1
                    self.stats.retries += 1
                    time.sleep(0.2 * 2**attempt)
                    continue
                self.stats.errors += 1
                message = str(exc).split("\n")[0][:2000]
                if transient:
                    raise StoreUnavailable(message, tag) from exc
                if isinstance(exc, DatabaseError) or _error_code(exc) is not None:
                    raise StoreQueryError(message, tag) from exc
                raise StoreUnavailable(message, tag) from exc
            except (ConnectionError, OSError, TimeoutError) as exc:
                if attempt < self.retries:
                    attempt += 1
                    self.stats.retries += 1
                    time.sleep(0.2 * 2**attempt)
                    continue
                self.stats.errors += 1
                raise StoreUnavailable(str(exc), tag) from exc
            finally:
                elapsed = time.perf_counter() - start
                self.stats.calls += 1
                self.stats.seconds += elapsed
                self.stats.by_tag[tag] = self.stats.by_tag.get(tag, 0.0) + elapsed

    def command(self, sql: str, parameters: dict | None = None, *, tag: str, settings: dict | None = None):
        """Run a statement that returns no rows (DDL, INSERT … SELECT, SYSTEM). Returns the driver's summary."""
        return self._call(tag, self.client.command, sql, parameters=parameters, settings=settings)

    def query(self, sql: str, parameters: dict | None = None, *, tag: str, settings: dict | None = None):
        """Run a SELECT; returns clickhouse-connect's QueryResult (``.result_rows``, ``.column_names``)."""
        return self._call(tag, self.client.query, sql, parameters=parameters, settings=settings)

    def query_df(self, sql: str, parameters: dict | None = None, *, tag: str, settings: dict | None = None):
        """Run a SELECT; returns a pandas DataFrame."""
        return self._call(tag, self.client.query_df, sql, parameters=parameters, settings=settings)

    def scalar(self, sql: str, parameters: dict | None = None, *, tag: str):
        """Run a SELECT returning one value; returns it (None for no rows)."""
        rows = self.query(sql, parameters, tag=tag).result_rows
        return rows[0][0] if rows else None

    def insert(self, table: str, rows: Sequence[Sequence[Any]] | Iterable, column_names: Sequence[str], *, tag: str,
               settings: dict | None = None):
        """Insert rows (sequences in ``column_names`` order) into ``table`` of our database."""
        validate_identifier(table)
        return self._call(tag, self.client.insert, table, rows, column_names=list(column_names), settings=settings)

    def insert_df(self, table: str, df, *, tag: str, settings: dict | None = None):
        """Insert a pandas DataFrame whose columns are named as the table's."""
        validate_identifier(table)
        return self._call(tag, self.client.insert_df, table, df, settings=settings)

    def raw_insert(self, table: str, data: bytes, fmt: str, *, tag: str, settings: dict | None = None):
        """Insert ``data`` already encoded in ClickHouse input format ``fmt`` (e.g. ``Protobuf``) into ``table``.

        The server (or the embedded engine) decodes the bytes; used by the OTLP receiver to let
        ClickHouse decode protobuf requests itself.
        """
        validate_identifier(table)
        return self._call(tag, self.client.raw_insert, table, None, data, fmt=fmt, settings=settings)

    def ping(self) -> bool:
        """True if the store answers ``SELECT 1``."""
        try:
            return self.scalar("SELECT 1", tag="ping") == 1
        except StoreError:
            return False

    def close(self) -> None:
        try:
            self.client.close()
        except Exception:  # closing must not raise during shutdown
            log.debug("store close failed", exc_info=True)


def connect(url: str, database: str = "infercost", *, create_database: bool = True) -> Store:
    """Open the store at ``url`` bound to ``database``; create the database (``ENGINE = Atomic``) if asked.

    Args:
        url: ``chdb://<dir>`` (embedded, data on local disk), ``chdb://memory`` (tests), or
            ``http(s)://user:pass@host:port/db`` (a ClickHouse server; the path names the database
            and overrides ``database``).
        database: our database name; checked against the identifier allow-list.
        create_database: run ``CREATE DATABASE IF NOT EXISTS … ENGINE = Atomic`` first.

    Returns:
        A :class:`Store`.

    Raises:
        ValueError: the URL or database name is malformed.
        StoreUnavailable: the backend cannot be opened (e.g. another process holds the chDB directory).
    """
    parsed = StoreURL.parse(url)
    database = validate_identifier(parsed.database or database)
    try:
        if parsed.backend == "chdb":
            if parsed.path != ":memory:":
                Path(parsed.path).mkdir(parents=True, exist_ok=True)
            # One client: closing the last client of an in-memory engine would drop its data.
            client = clickhouse_connect.get_client(dsn=f"chdb://{parsed.path}")
            if create_database:
                client.command(f"CREATE DATABASE IF NOT EXISTS `{database}` ENGINE = Atomic")
            client.database = database
        else:
            if create_database:
                boot = clickhouse_connect.get_client(dsn=parsed.dsn, database="default", autogenerate_session_id=False)
                boot.command(f"CREATE DATABASE IF NOT EXISTS `{database}` ENGINE = Atomic")
                boot.close()
            client = clickhouse_connect.get_client(dsn=parsed.dsn, database=database, autogenerate_session_id=False)
    except ClickHouseDriverError as exc:
        hint = ""
        if "Cannot lock file" in str(exc) or "already initialized" in str(exc):
            hint = " (another process, or another path in this process, holds the embedded store: stop it or use a ClickHouse server URL)"
        raise StoreUnavailable(f"cannot open store {url}: {str(exc).splitlines()[0]}{hint}", "connect") from exc
    return Store(parsed, database, client)
