"""Credentials out of anything shown: ``redact(text)`` replaces URL passwords with ``***``.

Position: schema (the store URL is where credentials live); used by every layer that prints or shows
a store URL or an error that may quote one (CLI output, the dashboard's store line, API errors).
Issue 14 item 5 asks for one such helper: this is it until that branch lands its own.
"""

from __future__ import annotations

import re

# scheme://user:password@host  ->  scheme://user:***@host (any scheme; the password is everything up
# to the last '@' of the authority, so a password holding '@' or ':' is covered).
_URL_PASSWORD = re.compile(r"(?P<head>[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]*:)(?P<password>[^\s/]*)@")


def redact(text: str) -> str:
    """``text`` with every URL password replaced by ``***``; other text unchanged."""
    return _URL_PASSWORD.sub(lambda m: f"{m.group('head')}***@", str(text))
