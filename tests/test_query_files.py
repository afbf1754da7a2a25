"""The named queries of schema/queries load whole: a line ``-- include: <fragment>`` stands for the
fragment's text, and a fragment that does not exist is an error naming it."""

from __future__ import annotations

import pytest

import schema.queries as queries


@pytest.fixture
def query_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(queries, "QUERIES_DIR", tmp_path)
    queries.sql.cache_clear()
    yield tmp_path
    queries.sql.cache_clear()


def test_every_named_query_loads_with_its_fragments_in_place():
    names = sorted(p.stem for p in queries.QUERIES_DIR.glob("*.sql"))
    assert "cost_rollup_params" in names and "ops_call_filters" in names
    for name in names:
        text = queries.sql(name)
        assert not queries._INCLUDE.search(text), name
    fragment = queries.sql("cost_rollup_params").rstrip("\n")
    assert fragment in queries.sql("cost_waste_breakdown")


def test_an_include_line_is_replaced_by_the_fragment_and_nothing_else(query_dir):
    (query_dir / "part.sql").write_text("-- a fragment\nx = {x:UInt8}\n")
    (query_dir / "whole.sql").write_text("SELECT 1\nWHERE\n    -- include: part\n-- not an include: part\n")
    assert queries.sql("whole") == "SELECT 1\nWHERE\n-- a fragment\nx = {x:UInt8}\n-- not an include: part\n"


def test_a_missing_fragment_is_an_error_that_names_it(query_dir):
    (query_dir / "whole.sql").write_text("SELECT 1\n-- include: nowhere\n")
    with pytest.raises(queries.UnknownQuery, match="no named query 'nowhere'"):
        queries.sql("whole")
