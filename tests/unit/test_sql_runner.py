"""The toolkits' engine interface (SQLRunner), its DuckDB adapter, and the one SQL quoting."""

from __future__ import annotations

import duckdb
import pytest

from deniable.engines.duckdb import DuckDBRunner
from deniable.errors import EngineError, InvalidParameter, SQLError
from deniable.sampling import sample_table
from deniable.sqlnames import quote_identifier, quote_literal, quote_table
from deniable.sqlrunner import SQLRunner, require_runner


def test_duckdb_runner_is_an_sql_runner_and_a_bare_connection_is_refused() -> None:
    con = duckdb.connect()
    assert isinstance(DuckDBRunner(con), SQLRunner)
    with pytest.raises(InvalidParameter, match="DuckDBRunner"):
        require_runner(con)
    with pytest.raises(InvalidParameter, match="DuckDBRunner"):
        sample_table(con, "t", rate=0.5)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameter):
        DuckDBRunner("not a connection")  # type: ignore[arg-type]


def test_failures_never_carry_row_data() -> None:
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT 'secret-4790' AS s")
    runner = DuckDBRunner(con)
    with pytest.raises(SQLError, match="refused") as refused:
        runner.rows("SELECT missing_column FROM t")
    assert refused.value.__context__ is None and refused.value.__cause__ is None
    with pytest.raises(EngineError) as failed:
        runner.rows("SELECT CAST(s AS INTEGER) FROM t")  # DuckDB's message quotes the value
    assert "4790" not in str(failed.value)
    assert failed.value.__context__ is None and failed.value.__cause__ is None
    assert runner.columns('"t"') == (("s", "VARCHAR"),)
    assert runner.columns("nope") is None


@pytest.mark.parametrize("name", ['we"ird', "a.b", "select", "MiXed", "é ü", "x'y"])
def test_quoted_identifiers_round_trip_through_duckdb(name: str) -> None:
    con = duckdb.connect()
    con.execute(f"CREATE TABLE {quote_identifier(name)} AS SELECT 1 AS {quote_identifier(name)}")
    assert DuckDBRunner(con).columns(quote_identifier(name)) == ((name, "INTEGER"),)
    with pytest.raises(InvalidParameter):
        quote_identifier("")


@pytest.mark.parametrize("value", ["it's", "a\\b", "line\nbreak", "''", "é", "$1"])
def test_quoted_literals_round_trip_through_duckdb(value: str) -> None:
    assert duckdb.connect().execute(f"SELECT {quote_literal(value)}").fetchall() == [(value,)]


def test_qualified_table_names() -> None:
    assert quote_table('s."t"') == '"s"."""t"""'
