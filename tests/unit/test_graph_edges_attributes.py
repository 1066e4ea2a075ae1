"""Node-level edge counts by a node attribute: private attribute values never reach Python.

The attribute of every node is matched against the declared (public) domain in the engine
(``sqlgen.attribute_groups``); Python receives each node's index in the domain or NULL.
Before, every node's attribute was converted to a Python value before the charge, so one
isolated node with ``DATE 'infinity'`` or a year beyond 9999 raised (OverflowError /
ValueError) where its absence was answered: a free, data-dependent outcome. Neighbour
parity, D vs D' = D + one node with an extreme attribute: both answered and charged, with
the same counts when the node is isolated. Matching semantics (equal as Python values,
per column type) are checked against a reference, on DuckDB.
"""

from __future__ import annotations

import datetime
import decimal
import warnings
from pathlib import Path

import duckdb
import pytest

from deniable.accounting.loss import Epsilon
from deniable.curator.session import Session
from deniable.engines.base import DUCKDB_CAPABILITIES
from deniable.errors import PrivacyWarning
from deniable.graph import GraphQuery, Kind, sqlgen
from deniable.noise.testing import SeededRandom

EDGE_ROWS = "(values (1,2),(2,3),(1,3),(3,4)) t(a,b)"
# ends per node: 1→2, 2→2, 3→3, 4→1

D1, D2 = datetime.date(2020, 1, 1), datetime.date(2021, 6, 30)
T1, T2 = datetime.datetime(2020, 1, 1, 12), datetime.datetime(2021, 6, 30)
UTC = datetime.UTC
Z1, Z2 = datetime.datetime(2020, 1, 1, tzinfo=UTC), datetime.datetime(2021, 1, 1, tzinfo=UTC)

# (column type, two in-domain SQL values, the domain, extreme SQL values of that type)
CASES: list[tuple[str, tuple[str, str], list[object], list[str]]] = [
    (
        "DATE",
        ("DATE '2020-01-01'", "DATE '2021-06-30'"),
        [D1, D2],
        ["'infinity'::DATE", "'-infinity'::DATE", "DATE '10000-01-01'", "DATE '5877642-06-25'"],
    ),
    (
        "TIMESTAMP",
        ("TIMESTAMP '2020-01-01 12:00:00'", "TIMESTAMP '2021-06-30 00:00:00'"),
        [T1, T2],
        ["'infinity'::TIMESTAMP", "'-infinity'::TIMESTAMP", "TIMESTAMP '20000-01-01'"],
    ),
    (
        "TIMESTAMPTZ",
        ("TIMESTAMPTZ '2020-01-01 00:00:00+00'", "TIMESTAMPTZ '2021-01-01 01:00:00+01'"),
        [Z1, Z2],
        ["'infinity'::TIMESTAMPTZ", "TIMESTAMPTZ '20000-01-01 00:00:00+00'"],
    ),
    (
        "DOUBLE",
        ("1.5", "-0.0"),
        [1.5, 0.0],
        ["'inf'::DOUBLE", "'nan'::DOUBLE", "1e308", "5e-324"],
    ),
    (
        "DECIMAL(38, 2)",
        ("1.50", "2.00"),
        [decimal.Decimal("1.5"), 2],
        ["99999999999999999999999999999999999.99", "-0.01"],
    ),
    (
        "VARCHAR",
        ("'x'", "'Y'"),
        ["x", "Y"],
        ["repeat('é', 100000)", "'y'", "'X'", "chr(0)"],
    ),
]


def _session(tmp_path: Path, name: str) -> Session:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        return Session(budget=Epsilon(epsilon=10), ledger=tmp_path / name, source=SeededRandom(3))


def _graph(
    s: Session, sql_type: str, values: tuple[str, str], domain: list[object], extra: str | None
) -> duckdb.DuckDBPyConnection:
    """Nodes 1..4 (attribute: the first value for 1 and 3, the second for 2 and 4), and
    node 9 with the value ``extra`` (isolated), if given; text ids if the type says so."""
    con = duckdb.connect()
    con.execute(f"create table g as select a, b from {EDGE_ROWS}")
    rows = [f"(1, {values[0]})", f"(2, {values[1]})", f"(3, {values[0]})", f"(4, {values[1]})"]
    if extra is not None:
        rows.append(f"(9, {extra})")
    con.execute(f"create table people (id BIGINT, c {sql_type})")
    con.execute(f"insert into people values {', '.join(rows)}")
    s.add_graph(
        "g",
        con,
        source_col="a",
        target_col="b",
        unit="node",
        max_degree=5,
        nodes=con,
        node_key="id",
        nodes_name="people",
        domains={"c": domain},
    )
    return con


QUERY = GraphQuery(Kind.EDGE_ENDS_BY, attribute="c", value_name="n", key_name="c")


@pytest.mark.parametrize(
    ("sql_type", "values", "domain", "extreme"),
    [(t, v, d, x) for t, v, d, xs in CASES for x in xs],
    ids=lambda p: p if isinstance(p, str) else None,
)
def test_an_isolated_node_with_an_extreme_attribute_changes_no_outcome(
    tmp_path: Path, sql_type: str, values: tuple[str, str], domain: list[object], extreme: str
) -> None:
    outcomes = []
    for name, extra in (("d.db", None), ("d_prime.db", extreme)):
        with _session(tmp_path, name) as s:
            _graph(s, sql_type, values, domain, extra)
            g = s.graph("g")
            exact = g._exact(QUERY, 7, domain).values.tolist()
            answer = g.edge_count_by("c", epsilon=1)
            assert answer.metadata.charge_id is not None  # answered, and charged
            assert s.budget.spent == Epsilon(epsilon=1)
            outcomes.append(exact)
    # nodes 1, 3 (first value) carry 2 + 3 edge ends, nodes 2, 4 (second) 2 + 1; node 9 none
    assert outcomes == [[5, 3], [5, 3]]


@pytest.mark.parametrize("sql_type", ["DATE", "TIMESTAMP", "DOUBLE", "VARCHAR"])
def test_a_connected_node_with_an_extreme_attribute_is_answered_and_counted_nowhere(
    tmp_path: Path, sql_type: str
) -> None:
    extreme = {
        "DATE": "'infinity'::DATE",
        "TIMESTAMP": "'infinity'::TIMESTAMP",
        "DOUBLE": "'-inf'::DOUBLE",
        "VARCHAR": "'zzz'",
    }[sql_type]
    t, values, domain, _ = next(c for c in CASES if c[0] == sql_type)
    with _session(tmp_path, "l.db") as s:
        con = _graph(s, t, values, domain, extreme)
        con.execute("insert into g values (9, 1)")  # node 9 joins node 1
        g = s.graph("g")
        # node 1 now has 3 ends (first value: 3 + 3); node 9's end is in no group
        assert g._exact(QUERY, 7, domain).values.tolist() == [6, 3]
        assert g.edge_count_by("c", epsilon=1).metadata.charge_id is not None


def test_text_ids_numbered_in_the_engine_match_the_domain_there_too(tmp_path: Path) -> None:
    con = duckdb.connect()
    con.execute("create table g as select 'n' || a a, 'n' || b b from " + EDGE_ROWS)
    con.execute(
        "create table people as select * from (values ('n1', DATE '2020-01-01'), "
        "('n2', 'infinity'::DATE), ('n3', DATE '2020-01-01'), ('n4', DATE '10000-01-01'), "
        "('n9', '-infinity'::DATE)) t(id, c)"
    )
    with _session(tmp_path, "l.db") as s:
        s.add_graph(
            "g",
            con,
            source_col="a",
            target_col="b",
            unit="node",
            max_degree=5,
            nodes=con,
            node_key="id",
            nodes_name="people",
            domains={"c": [D1, D2]},
        )
        g = s.graph("g")
        assert sqlgen.numbered(g._ends)
        assert g._exact(QUERY, 7, [D1, D2]).values.tolist() == [5, 0]
        assert g.edge_count_by("c", epsilon=1).metadata.charge_id is not None


def _groups(sql_type: str, values: list[str], domain: list[object]) -> list[int | None]:
    con = duckdb.connect()
    rows = ", ".join(f"({i}, {v})" for i, v in enumerate(values))
    con.execute(f"create table people (id BIGINT, c {sql_type})")
    con.execute(f"insert into people values {rows}")
    tree = sqlgen.attribute_groups(
        DUCKDB_CAPABILITIES,
        "people",
        sqlgen.node_column("id", "BIGINT"),
        sqlgen.node_column("c", sql_type),
        domain,
        sqlgen.IdMode.INTEGER,
    )
    got = dict(con.execute(sqlgen.render(tree, DUCKDB_CAPABILITIES)).fetchall())
    return [got[i] for i in range(len(values))]


def test_declared_values_match_as_python_values_per_column_type() -> None:
    # the reference is Python equality of the converted value with the declared one
    # (what the release path compared before), without ever converting in Python
    assert _groups("BIGINT", ["1", "2", "3", "NULL"], [2.0, True, decimal.Decimal(3), "1"]) == [
        1,
        0,
        2,
        None,
    ]
    # doubles: NaN is one group, -0.0 is 0.0, a Decimal/int only if exactly that double
    got = _groups(
        "DOUBLE",
        ["'nan'::DOUBLE", "-0.0", "0.1", "9007199254740992"],
        [float("nan"), 0, decimal.Decimal("0.1"), 2**53 + 1],
    )
    assert got == [0, 1, None, None]
    assert _groups("REAL", ["0.5", "0.1"], [0.5, 0.1]) == [0, None]  # float32 0.1 ≠ 0.1
    # text byte for byte (no collation, no case folding); an integer never equals text
    assert _groups("VARCHAR COLLATE NOCASE", ["'a'", "'A'", "'1'"], ["a", 1]) == [0, None, None]
    # a date is not a datetime (Python: date(2020, 1, 1) != datetime(2020, 1, 1))
    assert _groups("DATE", ["DATE '2020-01-01'", "'infinity'::DATE"], [T1, D1]) == [1, None]
    assert _groups("TIMESTAMP", ["TIMESTAMP '2020-01-01 12:00'"], [D1, T1, Z1]) == [1]
    assert _groups("TIME", ["TIME '12:30:00.5'"], [datetime.time(12, 30, 0, 500000)]) == [0]
    assert _groups("BOOLEAN", ["true", "false"], [0, 1.0]) == [1, 0]
    assert _groups("DECIMAL(10, 2)", ["1.50", "0.10"], [1.5, 0.1, decimal.Decimal("0.1")]) == [
        0,
        2,
    ]
    assert _groups("ENUM('p', 'q')", ["'q'"], ["p", "q"]) == [1]
    assert _groups("INTERVAL", ["INTERVAL 1 DAY"], ["1 day"]) == [None]


def test_control_converting_the_attributes_in_python_raises_on_the_extreme_value() -> None:
    # the path this file replaces: the node table's attribute column, read by the engine
    # and converted to Python values, raises on one node's DATE 'infinity'
    con = duckdb.connect()
    con.execute("create table people as select 1 id, 'infinity'::DATE c")
    tree = sqlgen.node_attributes(
        DUCKDB_CAPABILITIES,
        "people",
        sqlgen.node_column("id", "INTEGER"),
        "c",
        sqlgen.IdMode.INTEGER,
    )
    table = con.sql(sqlgen.render(tree, DUCKDB_CAPABILITIES)).to_arrow_table()
    with pytest.raises((OverflowError, ValueError)):
        table.column(1).to_pylist()
