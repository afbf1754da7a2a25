"""Secrets out of every line we print: ``redact(text)`` and the log-record hook that applies it.

Position: schema (the lowest layer every other area imports: collectors, app, alerts, infercost).
Anything that shows text to a person — log lines, exception messages, ``/health``, CLI output,
dashboard pages — passes it through :func:`redact` first. What is masked (with ``***``):

* the password of a URL's user-info: ``http://user:secret@host`` -> ``http://user:***@host``
  (store URLs, webhook URLs, SMTP URLs);
* values of query parameters that carry credentials (``password``, ``token``, ``key``, ``secret``,
  ``sig`` ...): ``?token=abc`` -> ``?token=***``;
* ``Authorization``-style credentials: ``Bearer abc`` / ``Basic abc`` -> ``Bearer ***``;
* every value registered with :func:`register_secret` (the ingest token, the SMTP password, a
  Slack webhook path ...), wherever it appears.

:func:`install_log_redaction` makes every log record pass through :func:`redact` (message and
arguments at creation, traceback text when formatted), so no handler — ours, uvicorn's,
Streamlit's — can print an unredacted record.
"""

from __future__ import annotations

import hmac
import logging
import re
import threading

MASK = "***"

# scheme://user:password@  (the user name stays: it helps an operator, it is not a secret)
_URL_USERINFO = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^/\s:@]*):(?P<secret>[^@\s/]+)@")
# ?password=... &token=... (also in JSON-ish "password": "...")
_QUERY_SECRET = re.compile(
    r"(?P<head>(?:[?&;]|\b)(?:password|passwd|pwd|token|access_token|refresh_token|api[_-]?key|secret|"
    r"client_secret|sig|signature)=)(?P<secret>[^&\s'\"#]+)", re.IGNORECASE)
_JSON_SECRET = re.compile(
    r"(?P<head>[\"'](?:password|passwd|token|api_key|apikey|secret|client_secret)[\"']\s*:\s*[\"'])"
    r"(?P<secret>[^\"']+)", re.IGNORECASE)
_AUTH_SCHEME = re.compile(r"(?P<head>\b(?:Bearer|Basic|Token)\s+)(?P<secret>[A-Za-z0-9._~+/=\-]{4,})")

_secrets: set[str] = set()
_secrets_lock = threading.Lock()
_installed = False


def register_secret(value: str | None) -> None:
    """Mask ``value`` wherever it appears from now on (values shorter than 4 characters are ignored:
    masking them would garble ordinary text)."""
    if value and len(value) >= 4:
        with _secrets_lock:
            _secrets.add(value)


def redact(text) -> str:
    """``text`` (anything; converted with ``str``) with credentials masked (see module doc)."""
    if text is None:
        return ""
    out = text if isinstance(text, str) else str(text)
    if not out:
        return out
    out = _URL_USERINFO.sub(lambda m: f"{m.group('head')}:{MASK}@", out)
    out = _QUERY_SECRET.sub(lambda m: f"{m.group('head')}{MASK}", out)
    out = _JSON_SECRET.sub(lambda m: f"{m.group('head')}{MASK}", out)
    out = _AUTH_SCHEME.sub(lambda m: f"{m.group('head')}{MASK}", out)
    if _secrets:
        with _secrets_lock:
            secrets = sorted(_secrets, key=len, reverse=True)
        for secret in secrets:
            if secret in out:
                out = out.replace(secret, MASK)
    return out


def _redact_arg(value):
    return redact(value) if isinstance(value, str) else value


def _redacting_factory(previous):
    # Formatters may read a record's arguments, not only its message: uvicorn's access formatter
    # unpacks (client, method, path, version, status) from ``record.args``. So a record keeps its
    # arguments' shape; only when masking them one by one does not mask the message (a secret split
    # over arguments) is the message collapsed into a masked string without arguments.
    def factory(*args, **kwargs):
        record = previous(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: leave it to the handler to report
            return record
        masked = redact(message)
        if masked != message:
            r_args = record.args
            if isinstance(r_args, tuple):
                r_args = tuple(_redact_arg(a) for a in r_args)
            elif isinstance(r_args, dict):
                r_args = {k: _redact_arg(v) for k, v in r_args.items()}
            record.msg, record.args = _redact_arg(record.msg), r_args
            try:
                kept = record.getMessage() == masked
            except Exception:
                kept = False
            if not kept:
                record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        return record

    factory.infercost_redacting = True  # type: ignore[attr-defined]
    return factory


def install_log_redaction() -> None:
    """Redact every log record created from now on, in every logger of this process (idempotent)."""
    global _installed
    current = logging.getLogRecordFactory()
    if _installed or getattr(current, "infercost_redacting", False):
        _installed = True
        return
    logging.setLogRecordFactory(_redacting_factory(current))
    _installed = True


def credentials(header: str | None, scheme: str) -> str | None:
    """The credentials of an ``Authorization`` header value if its scheme is ``scheme`` (``Bearer``,
    ``Basic``), else None. Schemes are case-insensitive (RFC 9110 11.1: ``bearer abc`` is ``Bearer
    abc``); the credentials are stripped of surrounding blanks."""
    parts = (header or "").strip().split(None, 1)
    if len(parts) != 2 or parts[0].lower() != scheme.lower():
        return None
    return parts[1].strip()


def bearer_matches(header: str | None, token: str) -> bool:
    """True when ``header`` (an ``Authorization`` value) is ``Bearer <token>`` (scheme in any case),
    compared in constant time; False for an empty ``token``."""
    given = credentials(header, "Bearer")
    return bool(token) and given is not None and hmac.compare_digest(given.encode(), token.encode())
