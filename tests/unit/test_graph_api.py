"""Graphs through the Session: registration, the Python API, the SQL front, refusals, policy.

Exact statistics are checked against references computed here (networkx-free: the helpers of
deniable.graph.projection), through the internal hook ``Graph._exact``; answers are checked
for their shape, charge, replay and policy notes.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from deniable import ROW
from deniable.accounting.loss import Epsilon, EpsilonDelta, Rho
from deniable.curator.session import Session
from deniable.engines.base import DUCKDB_CAPABILITIES
from deniable.errors import BudgetExceeded, InvalidParameter, PrivacyWarning, SQLError, UnsafeQuery
from deniable.graph import GraphQuery, Kind, sqlgen
from deniable.graph.projection import (
    degrees,
    edge_addition_projection,
    mutual_top_d,
    triangle_count,
)
from deniable.noise.testing import SeededRandom

EDGES = pd.DataFrame(
    {
        "a": pd.array([1, 2, 1, 3, 2, 4, 1, 5, None, 6], dtype="Int64"),
        "b": [2, 3, 3, 4, 1, 4, 4, 1, 3, 7],
    }
)  # {1,2} twice, a self-loop (4,4) and a NULL end: 7 distinct edges
PEOPLE = pd.DataFrame({"id": [1, 2, 3, 4, 5, 6], "city": ["x", "y", "x", "y", "z", "x"]})
DISTINCT = [(1, 2), (2, 3), (1, 3), (3, 4), (1, 4), (1, 5), (6, 7)]


def _session(tmp_path: Path, budget: object = None) -> Session:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        return Session(
            budget=Epsilon(epsilon=100) if budget is None else budget,  # type: ignore[arg-type]
            ledger=tmp_path / "ledger.db",
            source=SeededRandom(11),
        )


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    s = _session(tmp_path)
    for unit in ("edge", "node"):
        s.add_graph(
            f"g_{unit}",
            EDGES,
            source_col="a",
            target_col="b",
            unit=unit,
            max_degree=2,
            nodes=PEOPLE,
            node_key="id",
            nodes_name="people",
            domains={"city": ["x", "y", "z", "w"]},
        )
    yield s
    s.close()


def _arrays() -> tuple[np.ndarray, np.ndarray]:
    return (
        np.array([p[0] for p in DISTINCT], dtype=np.int64),
        np.array([p[1] for p in DISTINCT], dtype=np.int64),
    )


def test_edge_level_exact_statistics(session: Session) -> None:
    g = session.graph("g_edge")
    u, w = _arrays()
    deg = degrees(u, w, 8)[1:]
    assert g._exact(GraphQuery(Kind.EDGE_COUNT), 1).values.tolist() == [7]
    hist = g._exact(GraphQuery(Kind.DEGREE_HISTOGRAM), 1)
    assert hist.keys == [1, 2]
    assert hist.values.tolist() == [int((deg == 1).sum()), int((deg >= 2).sum())]
    at3 = g._exact(GraphQuery(Kind.DEGREE_AT_LEAST, threshold=3), 1).values.tolist()
    assert at3 == [int((deg >= 3).sum())]
    ends = g._exact(GraphQuery(Kind.EDGE_ENDS_BY, attribute="city"), 1, ["x", "y", "z", "w"])
    city = dict(zip(PEOPLE.id, PEOPLE.city, strict=True))
    want = dict.fromkeys("xyzw", 0)
    for a, b in DISTINCT:
        for end in (a, b):
            if end in city:
                want[city[end]] += 1
    assert ends.values.tolist() == [want[c] for c in "xyzw"]


@pytest.mark.parametrize("secret", [1, 2, 3, 12345])
def test_engine_truncations_match_the_python_references(session: Session, secret: int) -> None:
    # The edge order the engine uses for the secret, then the references on that order.
    g = session.graph("g_node")
    table = g._run(sqlgen.ordered_edges(DUCKDB_CAPABILITIES, g._ends, secret))
    u = np.array(table.column(0).to_pylist(), dtype=np.int64)
    w = np.array(table.column(1).to_pylist(), dtype=np.int64)
    kept = edge_addition_projection(u, w, 2)
    assert g._exact(GraphQuery(Kind.EDGE_COUNT), secret).values.tolist() == [int(kept.sum())]
    deg = degrees(u[kept], w[kept], 8)
    hist = g._exact(GraphQuery(Kind.DEGREE_HISTOGRAM), secret).values.tolist()
    assert hist == [int((deg == 1).sum()), int((deg == 2).sum())]
    edge = session.graph("g_edge")
    top = mutual_top_d(u, w, 2)
    tri = edge._exact(GraphQuery(Kind.TRIANGLES), secret).values.tolist()
    assert tri == [triangle_count(u[top], w[top])]


def test_triangles_of_a_dense_graph_match_with_a_large_bound(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)  # test data only
    pairs = [(i, j) for i in range(30) for j in range(i + 1, 30) if rng.random() < 0.3]
    frame = pd.DataFrame(pairs, columns=["s", "t"])
    with _session(tmp_path) as s:
        s.add_graph("g", frame, source_col="s", target_col="t", max_degree=30)
        u, w = frame.s.to_numpy(), frame.t.to_numpy()
        got = s.graph("g")._exact(GraphQuery(Kind.TRIANGLES), 9).values.tolist()
        assert got == [triangle_count(u, w)]


def test_answers_have_values_intervals_loss_and_policy(session: Session) -> None:
    a = session.graph("g_node").degree_histogram(epsilon=0.5)
    assert a.columns == ["degree", "nodes", "nodes_low", "nodes_high"]
    assert a["degree"].tolist() == [1, 2]
    assert (a["nodes_low"] <= a["nodes"]).all() and (a["nodes"] <= a["nodes_high"]).all()
    assert a.loss == Epsilon(epsilon=Fraction(1, 2))
    assert a.metadata.privacy_unit == "node (a or b)"
    assert "sensitivity 5" in a.mechanisms["nodes"]  # 2D + 1 with D = 2
    policy = " ".join(a.metadata.row_policies)
    assert "edge-addition projection" in policy and "at most 2 edges" in policy
    e = session.graph("g_edge").edge_count(epsilon=0.5)
    assert e.columns == ["edges", "edges_low", "edges_high"]
    assert "sensitivity 1" in e.mechanisms["edges"]
    assert e.metadata.privacy_unit == "edge (a, b)"
    t = session.graph("g_edge").triangle_count(epsilon=0.5)
    assert "mutual top-2" in " ".join(t.metadata.row_policies)
    assert "sensitivity 2" in t.mechanisms["triangles"]


def test_charges_go_to_the_session_ledger_and_replays_are_free(session: Session) -> None:
    before = session.budget.spent
    g = session.graph("g_edge")
    first = g.edge_count_by("city", epsilon=1)
    assert first["city"].tolist() == ["x", "y", "z", "w"]
    again = g.edge_count_by("city", epsilon=1)
    assert again.cached and again["edges"].tolist() == first["edges"].tolist()
    spent = session.budget.spent
    assert isinstance(spent, Epsilon) and isinstance(before, Epsilon)
    assert spent.epsilon - before.epsilon == 1
    assert session.budget.history[-1].details["graph"] == "g_edge"


def test_over_budget_spends_nothing(tmp_path: Path) -> None:
    with _session(tmp_path, Epsilon(epsilon=1)) as s:
        s.add_graph("g", EDGES, source_col="a", target_col="b", max_degree=2)
        s.graph("g").edge_count(epsilon=0.75)
        with pytest.raises(BudgetExceeded):
            s.graph("g").degree_histogram(epsilon=0.5)
        assert s.budget.spent == Epsilon(epsilon=Fraction(3, 4))


def test_rho_and_epsilon_delta_budgets(tmp_path: Path) -> None:
    with _session(tmp_path, Rho(rho=1)) as s:
        s.add_graph("g", EDGES, source_col="a", target_col="b", unit="node", max_degree=2)
        a = s.graph("g").edge_count(rho=Fraction(1, 4))
        assert a.loss == Rho(rho=Fraction(1, 4)) and "discrete_gaussian" in a.mechanisms["edges"]
        with pytest.raises(InvalidParameter, match="rho"):
            s.graph("g").edge_count(epsilon=1)
    (tmp_path / "x").mkdir()
    with _session(tmp_path / "x", EpsilonDelta(epsilon=1, delta=Fraction(1, 10**6))) as s:
        s.add_graph("g", EDGES, source_col="a", target_col="b", max_degree=2)
        assert s.graph("g").edge_count(epsilon=0.5).loss == EpsilonDelta(
            epsilon=Fraction(1, 2), delta=0
        )


def test_sql_forms(session: Session) -> None:
    q = session.sql("SELECT COUNT(*) AS m FROM g_edge", epsilon=0.1)
    assert q.columns == ["m", "m_low", "m_high"]
    h = session.sql("SELECT degree, COUNT(*) FROM degrees(G_NODE) GROUP BY degree", epsilon=0.1)
    assert h.columns == ["degree", "n", "n_low", "n_high"]
    t = session.sql("SELECT COUNT(*) FROM degrees(g_node) WHERE degree >= 2", epsilon=0.1)
    assert len(t) == 1
    tri = session.sql("SELECT COUNT(*) AS t FROM triangles(g_edge)", epsilon=0.1)
    assert tri.columns == ["t", "t_low", "t_high"]
    # node level: the program's value (triangles 1-2-3 and 1-3-4 share the nodes 1 and 3,
    # each allowed Δ = 1 triangle with D = 2), noised with Δ + 1 = 2
    node_tri = session.sql("SELECT COUNT(*) AS t FROM triangles(g_node)", epsilon=0.1)
    assert "sensitivity 2" in node_tri.metadata.mechanisms["t"]
    assert any("Lipschitz extension" in p for p in node_tri.metadata.row_policies)
    assert session.graph("g_node")._exact(GraphQuery(Kind.TRIANGLES), 3).values.tolist() == [1]
    by = session.sql(
        "SELECT n.city, COUNT(*) AS e FROM g_node e JOIN people n ON n.id IN (e.a, e.b) "
        "GROUP BY n.city",
        epsilon=0.1,
    )
    assert by.columns == ["city", "e", "e_low", "e_high"] and len(by) == 4
    by2 = session.sql(
        "SELECT n.city, COUNT(*) FROM g_edge AS e JOIN people AS n ON e.a = n.id OR n.id = e.b "
        "GROUP BY n.city",
        epsilon=0.1,
    )
    assert len(by2) == 4
    assert "2D" not in by.metadata.query and by.metadata.query.startswith("SELECT n.city")


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("SELECT a FROM g_node", "exactly one COUNT"),
        ("SELECT a, COUNT(*) FROM g_node GROUP BY a", "GROUP BY on the edge table"),
        ("SELECT COUNT(*) FROM g_node WHERE a > 1", "WHERE on a graph"),
        ("SELECT SUM(a) FROM g_node", "exactly one COUNT"),
        ("SELECT COUNT(*) FROM g_node ORDER BY 1", "ORDER BY"),
        ("SELECT COUNT(*) FROM degrees(g_node) WHERE degree > 1", "degree >= d"),
        ("SELECT COUNT(*) FROM degrees(g_node) WHERE degree >= 9", "d ≤ 2"),
        ("SELECT COUNT(*) FROM neighbours(g_node)", "not a graph function"),
        (
            "SELECT n.city, COUNT(*) FROM g_node e JOIN people n ON n.id = e.a GROUP BY n.city",
            r"IN \(e.a, e.b\)",
        ),
        (
            (
                "SELECT n.city, COUNT(*) FROM g_node e LEFT JOIN people n ON n.id IN (e.a, e.b) "
                "GROUP BY n.city"
            ),
            "plain JOIN",
        ),
        (
            (
                "SELECT n.city, COUNT(*) FROM g_node e JOIN other n ON n.id IN (e.a, e.b) "
                "GROUP BY n.city"
            ),
            "node table 'people'",
        ),
    ],
)
def test_sql_refusals_name_the_construct_and_spend_nothing(
    session: Session, query: str, message: str
) -> None:
    before = session.budget.spent
    with pytest.raises((UnsafeQuery, InvalidParameter), match=message):
        session.sql(query, epsilon=0.1)
    assert session.budget.spent == before


def test_sql_that_does_not_parse_or_names_no_graph(session: Session) -> None:
    with pytest.raises(SQLError):
        session.sql("SELECT COUNT(*) FROM g_node WHERE", epsilon=0.1)
    with pytest.raises(SQLError):
        session.sql("SELECT COUNT(*) FROM nope", epsilon=0.1)


def test_node_level_refusals(session: Session) -> None:
    g = session.graph("g_node")
    with pytest.raises(InvalidParameter, match="d ≤ 2"):
        g.nodes_with_degree_at_least(3, epsilon=1)
    with pytest.raises(InvalidParameter, match="not an attribute"):
        g.edge_count_by("id", epsilon=1)


def test_node_level_needs_a_declared_domain(tmp_path: Path) -> None:
    with _session(tmp_path) as s:
        s.add_graph(
            "g", EDGES, source_col="a", target_col="b", unit="node", max_degree=2,
            nodes=PEOPLE, node_key="id",
        )  # fmt: skip
        with pytest.raises(InvalidParameter, match="domains="):
            s.graph("g").edge_count_by("city", epsilon=1)
        s.add_graph(
            "h", EDGES, source_col="a", target_col="b", unit="edge", max_degree=2,
            nodes=PEOPLE, node_key="id",
        )  # fmt: skip
        a = s.graph("h").edge_count_by("city", epsilon=1)  # edge level: public attributes
        assert a["city"].tolist() == ["x", "y", "z"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"unit": "person"}, "unit must be"),
        ({"max_degree": 0}, "max_degree"),
        ({"max_degree": True}, "max_degree"),
        ({"source_col": "nope"}, "source_col"),
        ({"target_col": "a"}, "two different columns"),
        ({"nodes": PEOPLE}, "both nodes"),
        ({"nodes": pd.DataFrame({"id": [1, 1]}), "node_key": "id"}, "unique"),
        ({"nodes": PEOPLE, "node_key": "id", "domains": {"zip": [1]}}, "not a node attribute"),
    ],
)
def test_registration_refusals(tmp_path: Path, kwargs: dict[str, object], message: str) -> None:
    options: dict[str, object] = {"source_col": "a", "target_col": "b", "max_degree": 2}
    options.update(kwargs)
    with _session(tmp_path) as s, pytest.raises(InvalidParameter, match=message):
        s.add_graph("g", EDGES, **options)  # type: ignore[arg-type]


def test_names_are_shared_with_tables(session: Session) -> None:
    with pytest.raises(InvalidParameter, match="already registered"):
        session.add_table("g_edge", EDGES, privacy_unit=ROW)
    session.add_table("t", EDGES, privacy_unit=ROW)
    with pytest.raises(InvalidParameter, match="already registered"):
        session.add_graph("T", EDGES, source_col="a", target_col="b", max_degree=2)
    with pytest.raises(InvalidParameter, match="no graph"):
        session.graph("t")


def test_string_node_ids(tmp_path: Path) -> None:
    frame = pd.DataFrame({"s": ["ann", "bob", "cat", "ann"], "t": ["bob", "cat", "ann", "dan"]})
    with _session(tmp_path) as s:
        s.add_graph("g", frame, source_col="s", target_col="t", unit="node", max_degree=5)
        g = s.graph("g")
        assert g._exact(GraphQuery(Kind.EDGE_COUNT), 3).values.tolist() == [4]
        hist = g._exact(GraphQuery(Kind.DEGREE_HISTOGRAM), 3).values.tolist()
        assert hist == [1, 2, 1, 0, 0]


def test_empty_and_degenerate_graphs(tmp_path: Path) -> None:
    frame = pd.DataFrame({"a": [1, None, 2], "b": [1, 3, None]})  # a self-loop, NULL ends
    with _session(tmp_path) as s:
        for unit in ("edge", "node"):
            s.add_graph(f"g_{unit}", frame, source_col="a", target_col="b", unit=unit, max_degree=2)
            g = s.graph(f"g_{unit}")
            assert g._exact(GraphQuery(Kind.EDGE_COUNT), 1).values.tolist() == [0]
            assert g._exact(GraphQuery(Kind.DEGREE_HISTOGRAM), 1).values.tolist() == [0, 0]
            a = g.degree_histogram(epsilon=1)
            assert len(a) == 2


def test_the_engine_returns_edges_in_the_stable_order(tmp_path: Path) -> None:
    # Stability of the node-level projection needs the engine to honour ORDER BY (hash, u, w)
    # on a multi-threaded scan: compare with the same keys sorted here.
    rng = np.random.default_rng(3)  # test data only
    frame = pd.DataFrame({"a": rng.integers(0, 5000, 200_000), "b": rng.integers(0, 5000, 200_000)})
    with _session(tmp_path) as s:
        s.add_graph("g", frame, source_col="a", target_col="b", unit="node", max_degree=3)
        g = s.graph("g")
        tree = sqlgen.ordered_edges(DUCKDB_CAPABILITIES, g._ends, 77)
        got = g._run(tree)
        keyed = tree.copy()
        keyed.set("order", None)
        keyed = keyed.select(sqlgen._order_hash(DUCKDB_CAPABILITIES, 77).as_("h"))
        table = g._run(keyed).to_pandas()
        want = table.sort_values(["h", "u", "w"], kind="mergesort")
        assert got.column(0).to_pylist() == want.u.tolist()
        assert got.column(1).to_pylist() == want.w.tolist()


def test_sparse_integer_ids_and_repeated_node_keys(tmp_path: Path) -> None:
    frame = pd.DataFrame({"a": [10**15, 5, 5], "b": [7, 10**15, 7]})  # a triangle, wide ids
    with _session(tmp_path) as s:
        s.add_graph("g", frame, source_col="a", target_col="b", unit="node", max_degree=2)
        g = s.graph("g")
        assert g._exact(GraphQuery(Kind.DEGREE_HISTOGRAM), 1).values.tolist() == [0, 3]
    nodes = pd.DataFrame({"id": [5, 5, 7], "c": ["p", "q", "p"]})
    import duckdb

    con = duckdb.connect()
    con.register("nodes", nodes)
    sql = sqlgen.render(
        sqlgen.node_attributes(
            DUCKDB_CAPABILITIES,
            "nodes",
            sqlgen.node_column("id", "BIGINT"),
            "c",
            sqlgen.IdMode.INTEGER,
        ),
        DUCKDB_CAPABILITIES,
    )
    assert sorted(con.execute(sql).fetchall()) == [(5, "p"), (7, "p")]  # one row per key


@pytest.mark.parametrize(
    "option",
    [
        {"bounds": {"a": [0, 1]}},
        {"max_rows": 2},
        {"max_groups": 2},
        {"split": {"n": 1}},
        {"quantile_grid": 64},
        {"population": True},
    ],
    ids=lambda o: next(iter(o)),
)
def test_table_options_on_a_graph_query_are_refused_not_ignored(
    session: Session, option: dict[str, object]
) -> None:
    name = next(iter(option))
    with pytest.raises(InvalidParameter, match=f"{name}= applies to table queries"):
        session.sql("SELECT COUNT(*) FROM g_node", epsilon=0.1, **option)  # type: ignore[arg-type]
    assert session.budget.spent == Epsilon(epsilon=0)


@pytest.mark.parametrize("secret", [3, 2**40 + 1])
def test_text_ids_are_numbered_in_the_engine_and_match_the_references(
    tmp_path: Path, secret: int
) -> None:
    # Text ids reach Python as dense node numbers (sqlgen.numbered): the projection on them,
    # and the attribute lookup through the same numbers, equal the references computed here
    # from the identities the engine orders by.
    rng = np.random.default_rng(secret % 97)  # test data only
    names = [f"nœud-{i}" for i in range(40)]
    pairs = [(names[i], names[j]) for i, j in rng.integers(0, 40, (200, 2)) if i != j]
    frame = pd.DataFrame(pairs, columns=["a", "b"])
    people = pd.DataFrame({"id": names, "city": [("x", "y", "z")[i % 3] for i in range(40)]})
    with _session(tmp_path) as s:
        s.add_graph(
            "g",
            frame,
            source_col="a",
            target_col="b",
            unit="node",
            max_degree=3,
            nodes=people,
            node_key="id",
            domains={"city": ["x", "y", "z"]},
        )
        g = s.graph("g")
        assert sqlgen.numbered(g._ends)
        caps = g._engine.capabilities
        order = g._run(sqlgen.ordered_edges(caps, g._ends, secret))
        u = np.array(order.column(0).to_pylist(), dtype=np.int64)
        w = np.array(order.column(1).to_pylist(), dtype=np.int64)
        assert len(u) == len({(min(a, b), max(a, b)) for a, b in pairs})
        kept = edge_addition_projection(u, w, 3)
        assert g._exact(GraphQuery(Kind.EDGE_COUNT), secret).values.tolist() == [int(kept.sum())]
        # the numbers follow the identities' order: number k is the k-th name in byte order
        ordered_names = sorted({n.encode() for p in pairs for n in p})
        deg = degrees(u[kept], w[kept], len(ordered_names))
        city = {n.encode(): c for n, c in zip(people.id, people.city, strict=True)}
        want = [
            sum(int(deg[k]) for k, n in enumerate(ordered_names) if city[n] == c)
            for c in ("x", "y", "z")
        ]
        q = GraphQuery(Kind.EDGE_ENDS_BY, attribute="city")
        assert g._exact(q, secret, ["x", "y", "z"]).values.tolist() == want
