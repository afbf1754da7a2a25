"""The store's typed errors and the one classification of driver / OS errors into them.

Position: schema (used by :mod:`schema.store`, which re-exports the classes). The question every
caller asks is "will the same statement succeed later?":

* :class:`StoreUnavailable` — yes, once the store's condition passes: unreachable, timeout,
  overloaded, out of disk space, read-only or not writable, no permission, too many parts, memory
  limit, I/O error. ``reason`` names which (shown in
  ``/health``). Unknown conditions land here too: retrying is the safe default for data.
* :class:`StorePayloadError` — never: the input itself does not parse (ClickHouse's parse error
  codes). The only permanent insert error; the receiver sets such a record aside (quarantine).
* :class:`StoreQueryError` — never for this statement: syntax, types, a missing table (a bug, a
  schema mismatch, migrations not applied: ``reason`` ``schema_missing``). Writers keep the data
  and retry: a migration or a fix can make the same insert succeed.

Codes are ClickHouse's (``src/Common/ErrorCodes.cpp``). Messages are redacted (no credentials).
"""

from __future__ import annotations

import re

from clickhouse_connect.driver.exceptions import DatabaseError, DataError, OperationalError
from clickhouse_connect.driver.exceptions import Error as ClickHouseDriverError

from schema.redact import redact

# Codes whose cause is the store's state, not the statement or the data -> reason.
UNAVAILABLE_CODES = {
    159: "timeout", 160: "timeout", 209: "timeout",  # TIMEOUT_EXCEEDED, TOO_SLOW, SOCKET_TIMEOUT
    202: "overloaded", 439: "overloaded",  # TOO_MANY_SIMULTANEOUS_QUERIES, CANNOT_SCHEDULE_TASK
    210: "unreachable", 279: "unreachable", 1000: "unreachable",  # NETWORK_ERROR, ALL_CONNECTION_TRIES_FAILED, POCO
    241: "memory_limit", 173: "memory_limit",  # MEMORY_LIMIT_EXCEEDED, CANNOT_ALLOCATE_MEMORY
    252: "too_many_parts",  # TOO_MANY_PARTS (merges behind inserts)
    243: "out_of_space",  # NOT_ENOUGH_SPACE
    164: "read_only", 242: "read_only",  # READONLY, TABLE_IS_READ_ONLY
    291: "permission_denied", 497: "permission_denied", 516: "permission_denied",  # ACCESS_DENIED, AUTHENTICATION_FAILED
    74: "io_error", 75: "io_error", 76: "io_error", 77: "io_error", 95: "io_error", 425: "io_error",
    236: "aborted", 394: "aborted", 319: "unreachable",  # ABORTED, QUERY_WAS_CANCELLED, UNKNOWN_STATUS_OF_INSERT
    225: "unreachable", 999: "unreachable", 285: "unreachable", 286: "unreachable",  # keeper, replicas
}
# Statement errors with a name worth showing (still StoreQueryError; the writer retries them: only a
# payload error is permanent for data).
QUERY_REASONS = {60: "schema_missing", 81: "schema_missing", 47: "schema_missing", 16: "schema_missing"}
# Codes meaning "this input can never be inserted": the bytes or values themselves do not parse.
PAYLOAD_CODES = {
    6, 26, 27, 32, 33, 38, 41, 69, 72, 117, 130, 131,  # CANNOT_PARSE_*, ATTEMPT_TO_READ_AFTER_EOF, INCORRECT_DATA ...
    190, 321, 395, 407,  # SIZES_OF_ARRAYS_DONT_MATCH, VALUE_IS_OUT_OF_RANGE, throwIf, DECIMAL_OVERFLOW
}
# Operating-system conditions named in a message, whatever the code (the embedded engine reports a
# failed mkdir in a read-only directory as STD_EXCEPTION 1001).
_OS_REASONS = (
    (re.compile(r"no space left|not enough space|errno: 28\b|ENOSPC|disk quota|errno: 122\b", re.I), "out_of_space"),
    (re.compile(r"read-only file system|errno: 30\b|EROFS", re.I), "read_only"),
    (re.compile(r"permission denied|errno: 13\b|operation not permitted|EACCES", re.I), "permission_denied"),
    (re.compile(r"input/output error|errno: 5\b|\bEIO\b", re.I), "io_error"),
)
_NETWORK_REASONS = (
    (re.compile(r"timed? ?out", re.I), "timeout"),
    (re.compile(r"connection refused|connection reset|broken pipe|name or service not known|"
                r"failed to establish|max retries exceeded|remote end closed|connection aborted", re.I), "unreachable"),
)
# Reasons worth retrying inside one call (a blip); the others last longer: the caller retries later.
RETRY_IN_CALL = frozenset({"timeout", "overloaded", "unreachable", "aborted"})


class StoreError(Exception):
    """Base of the store's typed errors. ``tag`` names the call that failed; ``reason`` is a short
    word (``out_of_space``, ``read_only``, ``timeout``, ``payload``, ``query`` ...; '' if unknown)."""

    def __init__(self, message: str, tag: str = "", reason: str = ""):
        message = redact(message)
        super().__init__(f"[{tag}] {message}" if tag else message)
        self.tag = tag
        self.reason = reason


class StoreUnavailable(StoreError):
    """The store cannot take the statement now; retry later (callers answer with back-pressure)."""


class StoreQueryError(StoreError):
    """The store rejected the statement (syntax, types): retrying the same statement will not help."""


class StorePayloadError(StoreQueryError):
    """The data of an insert can never be inserted (it does not parse): the only permanent insert error."""


def error_code(exc: BaseException) -> int | None:
    """ClickHouse's error code in an exception's message (``Code: NNN``), or None."""
    match = re.search(r"Code: (\d+)", str(exc))
    return int(match.group(1)) if match else None


def classify_error(exc: BaseException) -> tuple[type[StoreError], str]:
    """(error class, reason) for an exception raised by the driver, the embedded engine or the OS."""
    if isinstance(exc, OperationalError):
        return StoreUnavailable, "unreachable"
    if isinstance(exc, TimeoutError):
        return StoreUnavailable, "timeout"
    text = str(exc)
    for pattern, reason in _OS_REASONS:  # first: they hide behind any code
        if pattern.search(text):
            return StoreUnavailable, reason
    code = error_code(exc)
    if code in UNAVAILABLE_CODES:
        return StoreUnavailable, UNAVAILABLE_CODES[code]
    if code in PAYLOAD_CODES or (code is None and isinstance(exc, DataError)):  # DataError: client-side conversion
        return StorePayloadError, "payload"
    if code is not None and isinstance(exc, (DatabaseError, ClickHouseDriverError)):
        return StoreQueryError, QUERY_REASONS.get(code, "query")
    for pattern, reason in _NETWORK_REASONS:
        if pattern.search(text):
            return StoreUnavailable, reason
    if isinstance(exc, (ConnectionError, OSError)):
        return StoreUnavailable, "unreachable" if isinstance(exc, ConnectionError) else "io_error"
    return StoreUnavailable, "unknown"
