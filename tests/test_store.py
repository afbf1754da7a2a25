"""The store access layer: URL parsing, identifier allow-list, typed errors, tagging."""

from __future__ import annotations

import pytest

from schema.store import StoreQueryError, StoreURL, validate_identifier


def test_store_urls():
    assert StoreURL.parse("chdb://memory").path == ":memory:"
    assert StoreURL.parse("chdb:///var/lib/x").path == "/var/lib/x"
    parsed = StoreURL.parse("https://u:p@ch.example:8443/prod")
    assert (parsed.backend, parsed.database) == ("http", "prod")
    with pytest.raises(ValueError, match="unsupported store URL"):
        StoreURL.parse("postgres://x")
    with pytest.raises(ValueError, match="identifier"):
        StoreURL.parse("http://h:8123/bad-name")


@pytest.mark.parametrize("name", ["", "1abc", "a b", "a;DROP", "x`y", "a" * 64])
def test_identifier_allow_list_rejects(name):
    with pytest.raises(ValueError):
        validate_identifier(name)


def test_query_error_is_typed_and_tagged(store):
    with pytest.raises(StoreQueryError, match=r"\[probe\].*UNKNOWN_TABLE|\[probe\].*does not exist"):
        store.query("SELECT * FROM no_such_table", tag="probe")
    assert store.stats.errors == 1


def test_parameters_are_bound_not_formatted(store):
    evil = "x' OR 1=1 --"
    assert store.scalar("SELECT {v:String}", {"v": evil}, tag="t") == evil
