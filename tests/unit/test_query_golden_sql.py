"""Golden files of the generated statement for DuckDB, PostgreSQL and Spark SQL.

A fixed set of queries is planned through a Session (DuckDB binds the tables), compiled
with fixed secrets for each engine's capabilities and rendered (pretty) by sqlglot; the text
must equal ``tests/sql/golden/<name>.<dialect>.sql``. Every rendering must parse back with
sqlglot in its dialect, and the DuckDB one must bind in DuckDB. A diff is a change of the
generated SQL: review it, then regenerate with ``DENIABLE_UPDATE_GOLDEN=1``.

PostgreSQL has no TRY(): a WHERE clause with arithmetic could raise on some rows and is
refused there (checked below instead of a golden file).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import sqlglot
from sqlglot import exp

from deniable import ROW
from deniable.accounting.loss import EpsilonDelta
from deniable.curator.session import Session
from deniable.engines.base import (
    DUCKDB_CAPABILITIES,
    POSTGRES_CAPABILITIES,
    SPARK_CAPABILITIES,
    Capabilities,
)
from deniable.errors import UnsafeQuery
from deniable.query.rewrite.compile import CompiledQuery, Secrets, compile_plan

GOLDEN = Path(__file__).resolve().parents[1] / "sql" / "golden"
UPDATE = os.environ.get("DENIABLE_UPDATE_GOLDEN") == "1"
SECRETS = Secrets(rows=1, partitions=2)
ENGINES: dict[str, Capabilities] = {
    "duckdb": DUCKDB_CAPABILITIES,
    "postgres": POSTGRES_CAPABILITIES,
    "spark": SPARK_CAPABILITIES,
}
QUERIES: dict[str, tuple[str, dict[str, Any]]] = {
    "count": ("SELECT COUNT(*) AS n FROM t", {}),
    "sum_avg": ("SELECT SUM(v) AS s, AVG(v) AS a FROM t", {}),
    "variance": ("SELECT VARIANCE(v) AS var FROM t", {}),
    "median": ("SELECT g, MEDIAN(v) AS m FROM t GROUP BY g", {}),
    "private_keys": (
        "SELECT name, COUNT(*) AS n, SUM(q) AS s FROM t GROUP BY name",
        {"delta": 1e-6},
    ),
    "public_keys": ("SELECT g, COUNT(*) AS n, COUNT(v) AS c FROM t GROUP BY g", {}),
    "where_arith": ("SELECT COUNT(*) AS n FROM t WHERE v * 2 + 1 > 10 AND name LIKE 'a%'", {}),
    "where_compare": (
        (
            "SELECT g, COUNT(*) AS n FROM t WHERE v BETWEEN 1 AND 5 AND name LIKE 'a%' "
            "AND q IN (1, 2) GROUP BY g"
        ),
        {},
    ),
    "row_level": ("SELECT g, COUNT(*) AS n, SUM(v) AS s FROM r GROUP BY g", {}),
    "row_expression": (
        (
            "SELECT SUM(v * q) AS s, COUNT(*) FILTER (WHERE v > 1) AS n, "
            "SUM(CASE WHEN q > 1 THEN v ELSE 0 END) AS c FROM t"
        ),
        {},
    ),
    "group_case": (
        (
            "SELECT CASE WHEN v > 10 THEN 'hi' ELSE 'lo' END AS band, COUNT(*) AS n FROM t "
            "GROUP BY band"
        ),
        {},
    ),
    "count_distinct": ("SELECT g, COUNT(DISTINCT name) AS d FROM t GROUP BY g", {}),
    "join_public": (
        "SELECT p.label, COUNT(*) AS n, SUM(t.v) AS s FROM t JOIN p ON t.g = p.g GROUP BY p.label",
        {},
    ),
    "join_private": (
        "SELECT t.g, COUNT(*) AS n, AVG(u.w) AS w FROM t JOIN u ON t.uid = u.uid GROUP BY t.g",
        {},
    ),
    "cte": (
        (
            "WITH big AS (SELECT uid, g, v FROM t WHERE v > 1) SELECT g, COUNT(*) AS n "
            "FROM big GROUP BY g"
        ),
        {},
    ),
}
# PostgreSQL has no TRY: arithmetic on rows could raise on some rows and is refused there.
REFUSED = {("where_arith", "postgres"), ("row_expression", "postgres")}


def _frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "uid": pd.Series([1, 2, 3], dtype="int64"),
            "g": ["x", "y", None],
            "name": ["ann", "bob", "al"],
            "v": [1.0, 2.5, 30.0],
            "q": pd.Series([1, 2, 3], dtype="int64"),
        }
    )


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    s = Session(
        budget=EpsilonDelta(epsilon=100, delta=1e-3),
        ledger=tmp_path_factory.mktemp("golden") / "l.db",
    )
    policy: dict[str, object] = {
        "bounds": {"v": (0, 20), "q": (0, 10)},
        "public_keys": {"g": ["x", "y", None]},
    }
    s.add_table("t", _frame(), privacy_unit="uid", max_groups=2, max_rows=3, **policy)  # type: ignore[arg-type]
    s.add_table("r", _frame(), privacy_unit=ROW, **policy)  # type: ignore[arg-type]
    s.add_table(
        "u",
        pd.DataFrame({"uid": pd.Series([1, 2], dtype="int64"), "w": [1.0, 2.0]}),
        privacy_unit="uid",
        bounds={"w": (0, 5)},
        max_groups=1,
        max_rows=1,
    )
    s.add_public_table("p", pd.DataFrame({"g": ["x", "y"], "label": ["ex", "why"]}))
    yield s
    s.close()


def _compile(session: Session, name: str, caps: Capabilities) -> CompiledQuery:
    query, options = QUERIES[name]
    plan = session.plan(query, epsilon=1, **options)
    binding = session._bindings[plan.query.table.name]
    joined = {j.table.name: session._bindings[j.table.name].name for j in plan.query.joins}
    return compile_plan(plan, caps, binding.name, SECRETS, joined)


@pytest.mark.parametrize("dialect", sorted(ENGINES))
@pytest.mark.parametrize("name", sorted(QUERIES))
def test_generated_sql_matches_golden(session: Session, name: str, dialect: str) -> None:
    caps = ENGINES[dialect]
    path = GOLDEN / f"{name}.{dialect}.sql"
    if (name, dialect) in REFUSED:
        with pytest.raises(UnsafeQuery, match="no TRY"):
            _compile(session, name, caps)
        assert not path.exists()
        return
    compiled = _compile(session, name, caps)
    pretty = compiled.render(dialect, pretty=True) + "\n"
    assert compiled.sql == compiled.render(dialect)
    for text in (pretty, compiled.sql):
        (stmt,) = sqlglot.parse(text, read=dialect)
        assert isinstance(stmt, exp.Query)
        assert not any(isinstance(n, exp.DML | exp.DDL) for n in stmt.walk())
    if dialect == "duckdb":  # binds against the real table (schema only, no rows read)
        query, _ = QUERIES[name]
        table = "r" if " FROM r " in query else "t"
        session._engine.check(session._bindings[table], pretty)
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(pretty)
    assert path.exists(), f"missing golden file {path.name}: run with DENIABLE_UPDATE_GOLDEN=1"
    assert pretty == path.read_text(), f"{path.name} changed: review, then regenerate"


def test_every_golden_file_is_used() -> None:
    expected = {f"{n}.{d}.sql" for n in QUERIES for d in ENGINES} - {
        f"{n}.{d}.sql" for n, d in REFUSED
    }
    assert {p.name for p in GOLDEN.glob("*.sql")} == expected
