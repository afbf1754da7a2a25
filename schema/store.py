"""The one store access layer: a ClickHouse client from a URL, tagged, timed, with typed errors.

Position in the flow: serving -> collectors -> **schema** -> app/alerts. Everything that reads or
writes ClickHouse goes through :class:`Store`; it

* opens the backend named by a URL (``chdb://<dir>``, ``chdb://memory``, ``http(s)://…``),
* creates our database with ``ENGINE = Atomic`` (refreshable materialized views need it on chDB),
* tags every call with ``log_comment`` on a server (visible in ``system.query_log``; chDB keeps
  no query log) and times it,
* retries only transient errors (network, server overload) and raises typed errors
  (:mod:`schema.store_errors`: unavailable with a reason, payload, query),
* works in UTC whatever the host's or the server's time zone (:func:`_use_utc`): every naive
  ``datetime`` the code passes or gets back is UTC, and so are ``toStartOfHour`` and friends in SQL.

chDB allows one engine path per process (a second path raises); clients on the same path share
the data, and each client keeps its own current database, which is how tests isolate themselves.

The embedded engine's allocator (jemalloc, configured by ``JE_MALLOC_CONF``) is told to return
freed pages to the system after 1 s (:data:`EMBEDDED_MALLOC_CONF`, set before the engine loads
unless ``JE_MALLOC_CONF`` is already set). With ClickHouse's own default (dirty pages kept 5 s)
the memory one insert freed is still resident while the next allocates, so the receiver's peak
held both; returning pages at once (0 ms) lowers the peak a little more but costs ~1.6x CPU per
insert (pages faulted in again). Measured with ``benchmarks/bench_ingest.py --e2e-only`` (README).
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import timezone
from pathlib import Path
from typing import Any, Iterable, Sequence
from urllib.parse import urlparse

import clickhouse_connect
from clickhouse_connect.driver.exceptions import Error as ClickHouseDriverError

from schema.redact import redact
from schema.store_errors import (RETRY_IN_CALL, StoreError, StorePayloadError, StoreQueryError,  # noqa: F401 (re-exported)
                                 StoreUnavailable, classify_error)

log = logging.getLogger(__name__)

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


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
        if not self.embedded:
            # the tag in the server's system.query_log. Not on chDB: it keeps no query log, and
            # clickhouse-connect's chDB backend applies a statement's settings by reading
            # system.settings, SET and SET back around it (3 extra engine queries, 7-15 ms a
            # statement; the cost jobs' fixed cost, schema/jobs/README.md)
            settings.setdefault("log_comment", f"infercost:{tag}")
        attempt = 0
        while True:
            start = time.perf_counter()
            try:
                if self._lock is not None:
                    with self._lock:
                        return fn(*args, settings=settings, **kwargs)
                return fn(*args, settings=settings, **kwargs)
            except (ClickHouseDriverError, ConnectionError, OSError, TimeoutError) as exc:
                kind, reason = classify_error(exc)
                if kind is StoreUnavailable and reason in RETRY_IN_CALL and attempt < self.retries:
                    attempt += 1
                    self.stats.retries += 1
                    time.sleep(0.2 * 2**attempt)
                    continue
                self.stats.errors += 1
                raise kind(str(exc).split("\n")[0][:2000], tag, reason) from exc
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

    def raw_insert(self, table: str, data, fmt: str, *, tag: str, settings: dict | None = None):
        """Insert ``data`` already encoded in ClickHouse input format ``fmt`` (e.g. ``Protobuf``) into ``table``.

        ``data``: bytes, or a sequence of bytes-like chunks that together form the input (written
        one after the other, never joined in memory on the embedded store). The server (or the
        embedded engine) decodes the bytes; used by the OTLP receiver to let ClickHouse decode
        protobuf requests itself. On the embedded store (Linux) the chunks go into an anonymous
        in-memory file (``memfd``) read with ``INSERT … FROM INFILE``, instead of the client
        library's copy into a temporary file on disk.
        """
        validate_identifier(table)
        validate_identifier(fmt)
        if self.embedded and hasattr(os, "memfd_create"):
            return self._call(tag, self._raw_insert_memfd, table, data, fmt, settings=settings)
        if not isinstance(data, (bytes, bytearray, memoryview)):
            data = b"".join(data)
        return self._call(tag, self.client.raw_insert, table, None, data, fmt=fmt, settings=settings)

    def _raw_insert_memfd(self, table: str, data, fmt: str, *, settings: dict):
        chunks = [data] if isinstance(data, (bytes, bytearray, memoryview)) else data
        fd = os.memfd_create("infercost-insert", os.MFD_CLOEXEC)
        try:
            for chunk in chunks:
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view):]
            return self.client.command(f"INSERT INTO `{table}` FROM INFILE '/proc/self/fd/{fd}' FORMAT {fmt}",
                                       settings=settings)
        finally:
            os.close(fd)

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

    def clone(self) -> "Store":
        """Another client on the same store and database, for statements run in parallel with this
        one's (the embedded engine runs one call per client at a time; clients on one path share
        the engine and its data). The caller closes it. Raises StoreUnavailable like :func:`connect`."""
        if self.embedded:
            url = "chdb://memory" if self.url.path == ":memory:" else f"chdb://{self.url.path}"
        else:
            url = self.url.dsn
        return connect(url, self.database, create_database=False)


# freed (dirty) pages go back to the system after 1 s, not ClickHouse's 5 s; none kept lazily
# (MADV_FREE'd "muzzy" pages would still count as resident); see the module doc
EMBEDDED_MALLOC_CONF = "dirty_decay_ms:1000,muzzy_decay_ms:0"


def _configure_embedded_allocator() -> None:
    """Set ``JE_MALLOC_CONF`` for the embedded engine unless set; no effect once chDB is loaded."""
    os.environ.setdefault("JE_MALLOC_CONF", EMBEDDED_MALLOC_CONF)


# Naive datetimes written by clickhouse-connect are localized to the client's ``server_tz`` (UTC, see
# _use_utc), not to the host's zone (the library's default: a naive value is read by .timestamp()).
clickhouse_connect.common.set_setting("naive_datetime_insert", "server")
UTC_SETTINGS = {"session_timezone": "UTC"}


def _use_utc(client, embedded: bool):
    """Make ``client`` work in UTC: the session's time zone (``session_timezone``: what ClickHouse uses
    for bare ``DateTime`` columns, their text form and ``toStartOfDay``-like functions, materialized
    views of an insert included) and the zone clickhouse-connect converts bare ``DateTime`` values
    with, both ways. chDB's engine takes the host's zone (``TZ``, /etc/localtime) by default, and a
    server its configured ``timezone``; the schema and every query treat bare ``DateTime`` as UTC
    (the cost jobs' minutes, the pages' ranges, the weekly review's weeks). chDB keeps one session per client, so one ``SET`` holds (a per-statement setting
    would cost chDB 3 extra engine queries each, see :meth:`Store._call`); a server gets the
    setting with every request (``get_client(settings=…)``)."""
    if embedded:
        client.command("SET session_timezone = 'UTC'")
    client.server_tz = timezone.utc
    return client


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
            _configure_embedded_allocator()
            if parsed.path != ":memory:":
                Path(parsed.path).mkdir(parents=True, exist_ok=True)
            # One client: closing the last client of an in-memory engine would drop its data.
            client = _use_utc(clickhouse_connect.get_client(dsn=f"chdb://{parsed.path}"), embedded=True)
            if create_database:
                client.command(f"CREATE DATABASE IF NOT EXISTS `{database}` ENGINE = Atomic")
            client.database = database
        else:
            if create_database:
                boot = clickhouse_connect.get_client(dsn=parsed.dsn, database="default", autogenerate_session_id=False)
                boot.command(f"CREATE DATABASE IF NOT EXISTS `{database}` ENGINE = Atomic")
                boot.close()
            client = _use_utc(clickhouse_connect.get_client(dsn=parsed.dsn, database=database, autogenerate_session_id=False,
                                                            settings=UTC_SETTINGS), embedded=False)
    except (ClickHouseDriverError, OSError) as exc:
        hint, reason = "", classify_error(exc)[1]
        if "Cannot lock file" in str(exc) or "already initialized" in str(exc) or _locked(parsed):
            hint = " (another process, or another path in this process, holds the embedded store: stop it or use a ClickHouse server URL)"
            reason = "locked"
        raise StoreUnavailable(f"cannot open store {url}: {str(exc).splitlines()[0]}{hint}", "connect", reason) from exc
    return Store(parsed, database, client)


def _locked(url: StoreURL) -> bool:
    """True when another process holds the embedded store's directory (the engine flocks ``status``)."""
    if url.backend != "chdb" or url.path == ":memory:":
        return False
    import fcntl

    try:
        with open(Path(url.path) / "status", "rb") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return True
            fcntl.flock(f, fcntl.LOCK_UN)
    except OSError:
        return False
    return False


class LazyStore:
    """A store connected on first use — and again after a failed attempt — for a process that must run
    while the store is down (the OTLP collector: it accepts into its spool and drains once connected).

    Every :class:`Store` method is delegated to the connected store; until the store can be reached
    each call raises :class:`StoreUnavailable` (connection attempts at most every ``retry_s``
    seconds). ``on_connect(store)`` runs once after connecting (the migrations); if it fails the
    connection is dropped and retried later. ``embedded`` is known from the URL without connecting.
    Raises ValueError at construction for a malformed URL.
    """

    def __init__(self, url: str, database: str = "infercost", on_connect=None, retry_s: float = 5.0):
        self.url = StoreURL.parse(url)
        self._raw_url = url
        self.database = validate_identifier(self.url.database or database)
        self._on_connect = on_connect
        self.retry_s = retry_s
        self._store: Store | None = None
        self._next_try = 0.0
        self._last_error: StoreError | None = None
        self._lock = threading.Lock()

    @property
    def embedded(self) -> bool:
        return self.url.backend == "chdb"

    @property
    def connected(self) -> bool:
        return self._store is not None

    def get(self) -> Store:
        """The connected store; raises StoreUnavailable (the last connection error) until it is reachable."""
        store = self._store
        if store is not None:
            return store
        with self._lock:
            if self._store is not None:
                return self._store
            now = time.monotonic()
            if now < self._next_try and self._last_error is not None:
                raise StoreUnavailable(str(self._last_error), "connect", self._last_error.reason)
            self._next_try = now + self.retry_s
            try:
                store = connect(self._raw_url, self.database)
            except StoreError as exc:
                self._last_error = exc
                raise
            try:
                if self._on_connect is not None:
                    self._on_connect(store)
            except Exception as exc:  # noqa: BLE001 - e.g. a migration failing while the server starts up
                store.close()
                self._last_error = StoreUnavailable(f"connected, but start-up failed: {exc}", "connect",
                                                    getattr(exc, "reason", "") or "schema_missing")
                raise self._last_error from exc
            self._store, self._last_error = store, None
            log.info("store connected: %s", redact(self._raw_url))
            return store

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.get(), name)

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
