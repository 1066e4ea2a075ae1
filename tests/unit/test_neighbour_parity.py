"""Neighbour parity: one person's extreme values never decide a query's outcome for free.

DESIGN §6.5: between the engine reading private rows and the charge committing, no
observable outcome may depend on the data. This suite checks the consequence an analyst
can observe. For a dataset ``D`` and ``D′ = D`` plus one person whose rows hold the extreme
values of every column type DuckDB accepts (integers of every width at their limits,
HUGEINT/UBIGINT, DECIMAL(38), NaN/±inf/−0.0/subnormal floats, NFD/very long/NUL/empty
text, BLOB, DATE/TIMESTAMP/TIMESTAMPTZ at ±infinity and past year 9999 or before year 1,
INTERVAL, BOOLEAN, UUID, LIST/STRUCT/MAP, NULL), every query gives the *same outcome
class* on both: answered (and charged, unless it releases only public keys), or refused
with the same typed error and the same message, and a refusal charges nothing.

Queries are drawn by hypothesis (derandomised: the same examples on every run) from every
query kind the SQL path has: each aggregate, private and public keys, WHERE predicates,
row expressions, CTEs, joins of two private tables on the unit, quantiles on a large grid, a table on a
Bernoulli sample with population answers. A planted pre-charge conversion (the defect of
issue 20: keys converted to Python for every partition before the charge) must make the
same check fail: :func:`test_control_a_pre_charge_conversion_is_caught`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))

from _parity import Outcome, outcome, planted_pre_charge_conversion

from deniable.accounting import EpsilonDelta
from deniable.curator.session import Session

# column → (DuckDB type, normal value as SQL over i, extreme values as SQL literals)
COLUMNS: dict[str, tuple[str, str, list[str]]] = {
    "i8": ("TINYINT", "i % 50", ["127", "-128"]),
    "i16": ("SMALLINT", "i % 50", ["32767", "-32768"]),
    "i32": ("INTEGER", "i % 50", ["2147483647", "-2147483648"]),
    "i64": ("BIGINT", "i % 50", ["9223372036854775807", "-9223372036854775808"]),
    "hi": (
        "HUGEINT",
        "i % 50",
        ["170141183460469231731687303715884105727", "-170141183460469231731687303715884105727"],
    ),
    "ub": ("UBIGINT", "i % 50", ["18446744073709551615", "0"]),
    "dec": (
        "DECIMAL(38, 10)",
        "(i % 50) / 4",
        ["9999999999999999999999999999.9999999999", "-9999999999999999999999999999.9999999999"],
    ),
    "f64": (
        "DOUBLE",
        "(i % 50) / 4",
        ["'nan'", "'inf'", "'-inf'", "'-0.0'", "'5e-324'", "'1.7976931348623157e308'"],
    ),
    "f32": ("FLOAT", "(i % 50) / 4", ["'nan'", "'inf'", "'-inf'", "'-0.0'", "'1e-45'"]),
    "txt": (
        "VARCHAR",
        "'k' || (i % 3)",
        ["'e' || chr(769)", "repeat('x', 100000)", "'a' || chr(0) || 'b'", "''", "chr(128512)"],
    ),
    "blob": ("BLOB", "('b' || (i % 3))::BLOB", ["'\\x00\\xFF'::BLOB", "''::BLOB"]),
    "d": (
        "DATE",
        "DATE '2020-01-01' + (i % 4)::INTEGER",
        ["'infinity'", "'-infinity'", "'10000-01-01'", "'0044-03-15 (BC)'"],
    ),
    "ts": (
        "TIMESTAMP",
        "TIMESTAMP '2020-01-01' + to_hours(i % 4)",
        ["'infinity'", "'-infinity'", "'12000-01-01 00:00:00'", "'0010-01-01 (BC)'"],
    ),
    "tstz": (
        "TIMESTAMPTZ",
        "TIMESTAMPTZ '2020-01-01 00:00:00+00' + to_hours(i % 4)",
        ["'infinity'", "'-infinity'", "'12000-01-01 00:00:00+00'"],
    ),
    "iv": ("INTERVAL", "to_days(i % 4)", ["to_years(100000)", "-to_microseconds(1)"]),
    "b": ("BOOLEAN", "i % 2 = 0", ["true", "false"]),
    "u": (
        "UUID",
        "'00000000-0000-0000-0000-00000000000' || (i % 3)",
        ["'ffffffff-ffff-ffff-ffff-ffffffffffff'", "'00000000-0000-0000-0000-000000000000'"],
    ),
    "lst": ("INTEGER[]", "[i % 3]", ["[]", "[NULL]", "range(1000)::INTEGER[]"]),
    "st": ("STRUCT(a INTEGER)", "{'a': i % 3}", ["{'a': NULL}", "{'a': 2147483647}"]),
    "mp": ("MAP(VARCHAR, INTEGER)", "MAP {'k': i % 3}", ["MAP {}", "MAP {'k': NULL}"]),
}
NUMERIC = ["i8", "i16", "i32", "i64", "hi", "ub", "dec", "f64", "f32"]
BOUNDS = dict.fromkeys(NUMERIC, (0, 20))
PERSONS, ROWS_EACH = 40, 3


def _person_rows() -> str:
    """The extra person's rows: row j holds each column's j-th extreme (cycling), then NULLs."""
    depth = max(len(v[2]) for v in COLUMNS.values())
    selects = []
    for j in range(depth + 1):
        cells = []
        for name, (sql_type, _, extremes) in COLUMNS.items():
            value = "NULL" if j == depth else extremes[j % len(extremes)]
            cells.append(f"CAST({value} AS {sql_type}) AS {name}")
        cells.append("'public' AS k")
        selects.append(f"SELECT 999999 AS uid, {', '.join(cells)}")
    return " UNION ALL ".join(selects)


def _base_rows() -> str:
    cells = ", ".join(
        f"CAST({normal} AS {t}) AS {name}" for name, (t, normal, _) in COLUMNS.items()
    )
    return (
        f"SELECT i % {PERSONS} AS uid, {cells}, 'k' || (i % 2) AS k "
        f"FROM range({PERSONS * ROWS_EACH}) r(i)"
    )


def _connection(with_person: bool) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    sql = _base_rows() + (" UNION ALL " + _person_rows() if with_person else "")
    con.execute(f"CREATE TABLE t AS {sql}")
    con.execute(
        f"CREATE TABLE visits AS SELECT i % {PERSONS} AS uid, i % 7 AS w FROM range(100) r(i)"
        + (" UNION ALL SELECT 999999, 2147483647" if with_person else "")
    )
    return con


@dataclasses.dataclass
class Pair:
    """``D`` and ``D′`` behind two sessions with their own ledgers (same policy)."""

    sessions: tuple[Session, Session]


def _pair(tmp: Path, *, sample_rate: float | None = None) -> Pair:
    sessions = []
    for with_person in (False, True):
        con = _connection(with_person)
        session = Session(
            budget=EpsilonDelta(epsilon=10**9, delta=Fraction(1, 2)),
            ledger=tmp / f"ledger-{with_person}-{sample_rate}.sqlite",
        )
        session.add_table(
            "t",
            con,
            privacy_unit="uid",
            bounds=BOUNDS,
            max_groups=2,
            max_rows=2,
            public_keys={"k": ["k0", "k1", "public"]},
            sample_rate=sample_rate,
        )
        session.add_table("visits", con, privacy_unit="uid", max_groups=2, max_rows=2)
        sessions.append(session)
    return Pair((sessions[0], sessions[1]))


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Pair:
    return _pair(tmp_path_factory.mktemp("parity"))


@pytest.fixture(scope="module")
def sampled_pair(tmp_path_factory: pytest.TempPathFactory) -> Pair:
    return _pair(tmp_path_factory.mktemp("parity-sampled"), sample_rate=0.5)


# Query kinds; {c} is a column of COLUMNS.
TEMPLATES = [
    "SELECT COUNT(*) AS n FROM t WHERE {c} IS NOT NULL",
    "SELECT COUNT({c}) AS n FROM t",
    "SELECT {c} AS g, COUNT(*) AS n FROM t GROUP BY {c}",
    "SELECT {c} AS g, SUM(i32) AS s FROM t GROUP BY {c}",
    "SELECT k, COUNT(*) AS n FROM t WHERE {c} = {c} GROUP BY k",
    "SELECT SUM({c}) AS s FROM t",
    "SELECT AVG({c}) AS a, COUNT(*) AS n FROM t",
    "SELECT VARIANCE({c}) AS v FROM t",
    "SELECT MEDIAN({c}) AS m FROM t",
    "SELECT MIN({c}) AS lo, MAX({c}) AS hi FROM t",
    "SELECT COUNT(DISTINCT {c}) AS n FROM t",
    "SELECT k, MEDIAN({c}) AS m FROM t GROUP BY k",
    "SELECT COUNT(*) AS n FROM t WHERE CAST({c} AS VARCHAR) > 'a'",
    "SELECT SUM({c} * 2 + 1) AS s FROM t",
    "WITH w AS (SELECT * FROM t WHERE {c} IS NULL) SELECT COUNT(*) AS n FROM w",
    "SELECT COUNT(*) AS n FROM t JOIN visits ON t.uid = visits.uid WHERE {c} IS NOT NULL",
    "SELECT k FROM t WHERE {c} IS NOT NULL GROUP BY k",
    "SELECT k, COUNT(*) AS n FROM t GROUP BY k HAVING COUNT(*) > 0 ORDER BY n DESC LIMIT 2",
]
OPTIONS: list[dict[str, Any]] = [
    {"epsilon": 1, "delta": Fraction(1, 10**6)},
    {"epsilon": 1, "delta": Fraction(1, 10**6), "quantile_grid": 100_000},
    {"epsilon": Fraction(1, 3), "delta": Fraction(1, 10**9), "max_groups": 1, "max_rows": 1},
]


def parity(pair: Pair, query: str, options: dict[str, Any]) -> tuple[Outcome, Outcome]:
    d, d2 = pair.sessions
    return outcome(d, query, options), outcome(d2, query, options)


def _assert_parity(pair: Pair, query: str, options: dict[str, Any]) -> None:
    on_d, on_d2 = parity(pair, query, options)
    assert on_d == on_d2, f"{query!r} {options}: D gives {on_d}, D′ gives {on_d2}"
    assert not on_d[0].startswith("untyped"), f"{query!r}: untyped error {on_d}"


SETTINGS = settings(
    max_examples=220,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@SETTINGS
@given(
    template=st.sampled_from(TEMPLATES),
    column=st.sampled_from(list(COLUMNS)),
    options=st.sampled_from(OPTIONS),
)
def test_one_extreme_person_never_changes_the_outcome(
    pair: Pair, template: str, column: str, options: dict[str, Any]
) -> None:
    _assert_parity(pair, template.format(c=column), options)


@pytest.mark.parametrize("column", list(COLUMNS))
def test_group_by_every_column_type(pair: Pair, column: str) -> None:
    """Private keys of every type (the path of issue 20's free OverflowError), exhaustively."""
    _assert_parity(
        pair, f"SELECT {column} AS g, COUNT(*) AS n FROM t GROUP BY {column}", OPTIONS[0]
    )


@settings(
    max_examples=40,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    template=st.sampled_from(TEMPLATES[:12]),
    column=st.sampled_from(list(COLUMNS)),
    population=st.booleans(),
)
def test_sampled_tables_and_population_answers(
    sampled_pair: Pair, template: str, column: str, population: bool
) -> None:
    _assert_parity(
        sampled_pair, template.format(c=column), {**OPTIONS[0], "population": population}
    )


def test_control_a_pre_charge_conversion_is_caught(tmp_path: Path) -> None:
    """The same check must catch the planted defect (else this suite proves nothing)."""
    pair = _pair(tmp_path)  # fresh ledgers: no stored answer to replay
    with planted_pre_charge_conversion():
        for column in ("d", "ts", "tstz"):
            query = f"SELECT {column} AS g, COUNT(*) AS n FROM t GROUP BY {column}"
            on_d, on_d2 = parity(pair, query, OPTIONS[0])
            assert on_d[0] == "answer" and on_d2[0] == "untyped OverflowError", (on_d, on_d2)


# Graphs: D is a ring of 60 nodes with chords; D′ adds one node joined to 40 of them (a hub
# far above max_degree) whose attributes hold the extremes of COLUMNS' temporal and text
# types. Node ids are BIGINT; attributes are public (declared domains at node level).
GRAPH_QUERIES = [
    "SELECT COUNT(*) AS n FROM g",
    "SELECT degree, COUNT(*) AS n FROM degrees(g) GROUP BY degree",
    "SELECT COUNT(*) AS n FROM degrees(g) WHERE degree >= 3",
    "SELECT COUNT(*) AS n FROM triangles(g)",
    "SELECT p.{c}, COUNT(*) AS n FROM g e JOIN people p ON p.id IN (e.a, e.b) GROUP BY p.{c}",
]
GRAPH_ATTRIBUTES = {
    "d": ("DATE", "DATE '2020-01-01' + (id % 2)::INTEGER", "'infinity'::DATE"),
    "ts": ("TIMESTAMP", "TIMESTAMP '2020-01-01' + to_hours(id % 2)", "'-infinity'::TIMESTAMP"),
    "txt": ("VARCHAR", "'k' || (id % 2)", "repeat('x', 100000)"),
    "big": ("HUGEINT", "(id % 2)::HUGEINT", "170141183460469231731687303715884105727::HUGEINT"),
}
GRAPH_DOMAINS: dict[str, list[object]] = {
    "d": [dt.date(2020, 1, 1), dt.date(2020, 1, 2)],
    "ts": [dt.datetime(2020, 1, 1), dt.datetime(2020, 1, 1, 1)],
    "txt": ["k0", "k1"],
    "big": [0, 1],
}


def _graph_pair(tmp: Path, unit: str) -> Pair:
    sessions = []
    for with_person in (False, True):
        con = duckdb.connect()
        edges = "SELECT i AS a, (i + 1) % 60 AS b FROM range(60) r(i) UNION ALL "
        edges += "SELECT i, (i + 7) % 60 FROM range(0, 60, 3) r(i)"
        if with_person:
            edges += " UNION ALL SELECT 1000, i FROM range(40) r(i)"
        con.execute(f"CREATE TABLE g AS {edges}")
        cells = ", ".join(f"CAST({v} AS {t}) AS {c}" for c, (t, v, _) in GRAPH_ATTRIBUTES.items())
        nodes = f"SELECT id, {cells} FROM range(60) r(id)"
        if with_person:
            extremes = ", ".join(f"CAST({x} AS {t})" for _, (t, _, x) in GRAPH_ATTRIBUTES.items())
            nodes += f" UNION ALL SELECT 1000, {extremes}"
        con.execute(f"CREATE TABLE people AS {nodes}")
        session = Session(
            budget=EpsilonDelta(epsilon=10**9, delta=Fraction(1, 2)),
            ledger=tmp / f"graph-{unit}-{with_person}.sqlite",
        )
        session.add_graph(
            "g",
            con,
            source_col="a",
            target_col="b",
            unit=unit,
            max_degree=4,
            nodes=con,
            node_key="id",
            nodes_name="people",
            domains=GRAPH_DOMAINS,
        )
        sessions.append(session)
    return Pair((sessions[0], sessions[1]))


@pytest.mark.parametrize("unit", ["edge", "node"])
def test_graphs_at_edge_and_node_level(tmp_path: Path, unit: str) -> None:
    pair = _graph_pair(tmp_path, unit)
    for template in GRAPH_QUERIES:
        for column in GRAPH_ATTRIBUTES if "{c}" in template else ["-"]:
            _assert_parity(pair, template.format(c=column), {"epsilon": 1})
