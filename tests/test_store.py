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


UTC_PROBE = """
import sys
from datetime import datetime
sys.path.insert(0, {root!r})
from schema.store import connect
store = connect("chdb://memory", "tzprobe")
store.command("CREATE TABLE t (m DateTime, n DateTime64(9)) ENGINE = Memory", tag="probe")
store.insert("t", [(datetime(2026, 11, 2, 10, 7), datetime(2026, 11, 2, 10, 7, 30, 250))], ["m", "n"], tag="probe")
row = store.query("SELECT m, n, toString(m), toStartOfHour(m), toStartOfDay(m), {{p:DateTime}} = m FROM t",
                  {{"p": datetime(2026, 11, 2, 10, 7)}}, tag="probe").result_rows[0]
frame = store.query_df("SELECT m, toStartOfHour(n) AS h FROM t", tag="probe")
print(" ".join(v.isoformat() if hasattr(v, "isoformat") else str(v) for v in row))
print(frame.iloc[0]["m"].isoformat(), frame.iloc[0]["h"].isoformat(), frame["m"].dt.tz)
"""


@pytest.mark.parametrize("zone", ["Asia/Kathmandu", "America/New_York"])
def test_the_store_works_in_utc_on_a_host_in_another_zone(zone):
    """A host (and chDB engine) in UTC+5:45 or UTC-5: naive datetimes go in and come back as UTC, and
    SQL's hours and days are UTC ones (before the fix: 10:07 came back 5 h 45 min off, hours at :15)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[1])
    out = subprocess.run([sys.executable, "-c", UTC_PROBE.format(root=root)], env=dict(os.environ, TZ=zone),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    row_text, frame_text = out.stdout.splitlines()
    # naive values back; the text form, the hour and the day of 10:07 UTC; the bound parameter matches
    assert row_text.split() == ["2026-11-02T10:07:00", "2026-11-02T10:07:30.000250", "2026-11-02", "10:07:00",
                                "2026-11-02T10:00:00", "2026-11-02T00:00:00", "1"]
    assert frame_text == "2026-11-02T10:07:00 2026-11-02T10:00:00 None"
