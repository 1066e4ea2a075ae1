from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np
import pandas as pd
import pytest
import sqlglot
from sqlglot import exp

from deniable.accounting.loss import EpsilonDelta
from deniable.curator.session import Session
from deniable.engines.base import Capabilities
from deniable.engines.duckdb import DuckDBEngine
from deniable.query.release import ExactAggregates
from deniable.query.rewrite.compile import Secrets, compile_plan
from deniable.query.testing import exact_aggregates


class PlainSqlEngine(DuckDBEngine):
    """DuckDB pretending to lack SEMI/ANTI JOIN and IS NOT DISTINCT FROM."""

    capabilities: ClassVar[Capabilities] = dataclasses.replace(
        DuckDBEngine.capabilities, semi_join=False, null_safe_equal=False
    )


def _frame() -> pd.DataFrame:
    rows = []
    for u in range(60):
        for j in range(1 + u % 9):
            rows.append((f"u{u}", ["x", "y", "z", None][(u + j) % 4], float(j * 7 % 23)))
    return pd.DataFrame(rows, columns=["who", 'we"ird key', "v"])


def _session(tmp_path, engine=None) -> Session:  # type: ignore[no-untyped-def]
    tmp_path.mkdir(parents=True, exist_ok=True)
    s = Session(
        budget=EpsilonDelta(epsilon=10, delta=1e-3), ledger=tmp_path / "l.db", engine=engine
    )
    s.add_table("t", _frame(), privacy_unit="who", bounds={"v": (0, 20)}, max_groups=2, max_rows=2)
    return s


QUERY = (
    'SELECT "we""ird key", COUNT(*) AS n, SUM(v) AS s, MEDIAN(v) AS m FROM t '
    'WHERE v <> 3 GROUP BY "we""ird key"'
)


def test_generated_sql_is_one_read_only_query_with_quoted_names(tmp_path) -> None:  # type: ignore[no-untyped-def]
    s = _session(tmp_path)
    plan = s.plan(QUERY, epsilon=1, delta=1e-6)
    sql = compile_plan(plan, DuckDBEngine.capabilities, "__deniable_0", Secrets(5, 6)).sql
    (stmt,) = sqlglot.parse(sql, read="duckdb")
    assert isinstance(stmt, exp.Query)
    assert '"we""ird key"' in sql and "CAST(5 AS UBIGINT)" in sql and "CAST(6 AS UBIGINT)" in sql
    assert not any(isinstance(n, exp.DML | exp.DDL) for n in stmt.walk())
    other = compile_plan(plan, DuckDBEngine.capabilities, "__deniable_0", Secrets(7, 8)).sql
    assert other != sql
    s.close()


def test_fast_form_ranks_only_heavy_rows(tmp_path) -> None:  # type: ignore[no-untyped-def]
    s = _session(tmp_path)
    # additive measures: no row is ranked or re-read; heavy partitions are scaled
    plan = s.plan('SELECT SUM(v) AS s FROM t GROUP BY "we""ird key"', epsilon=1, delta=1e-6)
    sql = compile_plan(plan, DuckDBEngine.capabilities, "b", Secrets(1, 2)).sql
    assert "PARTITION BY __u ORDER BY" in sql and "__ranked" not in sql
    assert "__heavy" not in sql and "PARTITION BY __u, __k0" not in sql and "// (2 * __n)" in sql
    # histograms read real rows: only those of heavy partitions are ranked
    plan = s.plan('SELECT MEDIAN(v) AS m FROM t GROUP BY "we""ird key"', epsilon=1, delta=1e-6)
    sql = compile_plan(plan, DuckDBEngine.capabilities, "b", Secrets(1, 2)).sql
    assert "__heavy" in sql and "PARTITION BY __u, __k0" in sql and "__ranked" not in sql
    # counts only: no rows re-read, min(rows, max_rows) per kept partition
    plan = s.plan('SELECT COUNT(*) AS n FROM t GROUP BY "we""ird key"', epsilon=1, delta=1e-6)
    sql = compile_plan(plan, DuckDBEngine.capabilities, "b", Secrets(1, 2)).sql
    assert "__heavy" not in sql and "least(__n, 2)" in sql and "PARTITION BY __u ORDER BY" in sql
    # public domain no larger than max_groups: no partition ranking at all
    s.add_table(
        "p", _frame(), privacy_unit="who", max_groups=3, public_keys={"v": [1.0, 7.0]}, max_rows=1
    )
    plan = s.plan("SELECT v, COUNT(*) AS n FROM p GROUP BY v", epsilon=1)
    sql = compile_plan(plan, DuckDBEngine.capabilities, "b", Secrets(1, 2)).sql
    assert "PARTITION BY __u ORDER BY" not in sql
    s.close()


@pytest.mark.parametrize("query", [QUERY, QUERY.replace(", MEDIAN(v) AS m", "")])
def test_engine_capabilities_change_spelling_not_results(tmp_path, query: str) -> None:  # type: ignore[no-untyped-def]
    a = _session(tmp_path / "a")
    b = _session(tmp_path / "b", engine=PlainSqlEngine())
    _plan_a, comp_a, exact_a = exact_aggregates(a, query, not_private=True, epsilon=1, delta=1e-6)
    _, comp_b, exact_b = exact_aggregates(b, query, not_private=True, epsilon=1, delta=1e-6)
    # rows are re-read for the median's histogram (SUM alone reads no rows twice)
    assert ("SEMI JOIN" in comp_a.sql) == ("MEDIAN" in query) == ("EXISTS" in comp_b.sql)
    assert "SEMI JOIN" not in comp_b.sql and "IS NOT DISTINCT FROM" not in comp_b.sql
    assert sorted(exact_a.keys, key=repr) == sorted(exact_b.keys, key=repr)
    assert (None,) in exact_a.keys

    def by_key(exact: ExactAggregates, values: np.ndarray) -> dict[object, object]:
        return dict(zip(exact.keys, values.tolist(), strict=True))

    assert by_key(exact_a, exact_a.units) == by_key(exact_b, exact_b.units)
    for mid in exact_a.measures:
        assert by_key(exact_a, exact_a.measures[mid]) == by_key(exact_b, exact_b.measures[mid])
    for mid, hist in exact_a.histograms.items():
        assert {k: v.tolist() for k, v in hist.items()} == {
            k: v.tolist() for k, v in exact_b.histograms[mid].items()
        }
    a.close()
    b.close()


def test_engine_runs_only_one_select(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from deniable.errors import InternalError

    s = _session(tmp_path)
    binding = s._bindings["t"]
    for bad in ("SELECT 1; DROP TABLE x", f'DROP VIEW "{binding.name}"', "PRAGMA version"):
        with pytest.raises(InternalError):
            s._engine.check(binding, bad)
    assert len(s._engine.run(binding, f'SELECT * FROM "{binding.name}"')) == len(_frame())
    s.close()


def test_duckdb_keyed_hash_is_the_chain_of_one_argument_hashes() -> None:
    from deniable.query.rewrite.compile import _Sql, render

    h = _Sql(DuckDBEngine.capabilities).keyed_hash(7, ["__u", "__k0", "__v0"])
    assert render(h, "duckdb") == (
        "hash(xor(hash(xor(hash(xor(CAST(7 AS UBIGINT), hash(__u))), hash(__k0))), hash(__v0)))"
    )


def test_engine_limitations_are_typed_refusals(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from deniable.engines.base import POSTGRES_CAPABILITIES, SPARK_CAPABILITIES
    from deniable.errors import UnsafeQuery

    s = _session(tmp_path)
    # Spark has no NFC normalisation: a text privacy unit could count one person as two
    plan = s.plan('SELECT COUNT(*) AS n FROM t GROUP BY "we""ird key"', epsilon=1, delta=1e-6)
    with pytest.raises(UnsafeQuery, match=r"spark.*NFC"):
        compile_plan(plan, SPARK_CAPABILITIES, "b", Secrets(1, 2))
    postgres = compile_plan(plan, POSTGRES_CAPABILITIES, "b", Secrets(1, 2)).sql
    assert "normalize(" in postgres.lower() and "hashtextextended" in postgres
    # PostgreSQL has no TRY: a predicate that could raise on some rows is refused
    plan = s.plan("SELECT COUNT(*) AS n FROM t WHERE v / 2 > 1", epsilon=1)
    with pytest.raises(UnsafeQuery, match=r"postgres.*no TRY"):
        compile_plan(plan, POSTGRES_CAPABILITIES, "b", Secrets(1, 2))
    plan = s.plan("SELECT COUNT(*) AS n FROM t WHERE v > 1 AND who LIKE 'u1%'", epsilon=1)
    sql = compile_plan(plan, POSTGRES_CAPABILITIES, "b", Secrets(1, 2)).sql
    sqlglot.parse_one(sql, read="postgres")
    s.close()


def test_rendering_never_drops_a_construct_silently(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from deniable.errors import InternalError

    s = _session(tmp_path)
    plan = s.plan("SELECT COUNT(*) AS n FROM t WHERE v + 1 > 2", epsilon=1)
    compiled = compile_plan(plan, DuckDBEngine.capabilities, "b", Secrets(1, 2))
    assert "try(" in compiled.render("duckdb")
    with pytest.raises(InternalError):  # PostgreSQL has no TRY: never rendered without it
        compiled.render("postgres")
    s.close()


def test_comparisons_that_cannot_raise_are_not_wrapped_in_try(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """TRY hides a predicate from the optimiser; it is kept only where a row could raise:
    a comparison of a text column with a number converts row by row and may fail."""
    s = _session(tmp_path)
    safe = s.plan("SELECT COUNT(*) AS n FROM t WHERE v > 1", epsilon=1)
    sql = compile_plan(safe, DuckDBEngine.capabilities, "b", Secrets(1, 2)).sql
    assert "try(" not in sql
    risky = s.plan('SELECT COUNT(*) AS n FROM t WHERE "we""ird key" = 5', epsilon=1)
    sql = compile_plan(risky, DuckDBEngine.capabilities, "b", Secrets(1, 2)).sql
    assert "try(" in sql
    s.close()
