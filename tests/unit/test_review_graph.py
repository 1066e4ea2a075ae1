"""Review findings on the graph release path (deniable.graph), each with its negative control.

* Under the zCDP accountant, the early refusal of a graph query asked the wrong question: it
  added the *converted* (ε, δ) of everything spent to the query's ε, as the basic accountant
  would, and so refused queries that the ledger's zCDP filter admits.
* The SQL generator of the graphs must use the compiler's public ``keyed_hash``, not its
  private ``_Sql`` class.
"""

from __future__ import annotations

import ast
import warnings
from fractions import Fraction
from pathlib import Path

import pandas as pd
import pytest

import deniable.graph.sqlgen as sqlgen_module
from deniable.accounting.loss import EpsilonDelta, Rho
from deniable.curator.session import Session
from deniable.errors import BudgetExceeded, PrivacyWarning
from deniable.noise.testing import SeededRandom

EDGES = pd.DataFrame({"a": [1, 2, 3, 4, 5], "b": [2, 3, 4, 5, 1]})
CAP = EpsilonDelta(epsilon=1, delta=Fraction(1, 10**6))


def _zcdp_session(tmp_path: Path) -> Session:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        s = Session(
            budget=CAP,
            ledger=tmp_path / "ledger.db",
            source=SeededRandom(5),
            accountant="zcdp",
            dataset="d",
        )
    s.add_graph("g", EDGES, source_col="a", target_col="b", unit="edge", max_degree=2)
    return s


def _spend_most_of_rho(session: Session) -> Fraction:
    """Spend 95% of the ρ cap directly in the ledger; return the ρ left.

    The spent ρ then converts to ε ≈ 0.973 of the cap's 1, while the ρ left admits any
    ε ≤ √(2ρ_left) ≈ 0.0479: an additive check in ε refuses ε = 0.04, the filter admits it.
    """
    ledger = session._ledger
    rho_max = ledger.budget_filter("d").rho_max  # type: ignore[union-attr]
    ledger.charge("d", Rho(rho=rho_max * 19 / 20), analyst="a", query_key="k", query_text="")
    return rho_max / 20


def test_graph_precheck_follows_the_zcdp_filter(tmp_path: Path) -> None:
    s = _zcdp_session(tmp_path)
    try:
        left = _spend_most_of_rho(s)
        eps = Fraction(1, 25)
        assert eps * eps / 2 < left  # the zCDP filter admits ε = 0.04 (ρ = ε²/2) ...
        spent = s._ledger.spent("d")
        assert isinstance(spent, EpsilonDelta)
        assert spent.epsilon + eps > CAP.epsilon  # (adding ε to the spent ε would refuse)
        assert s._ledger.can_charge("d", EpsilonDelta(epsilon=eps, delta=0))
        # ... and so must the graph's early refusal (it used to add ε to the converted spent ε)
        answer = s.graph("g").edge_count(epsilon=eps)
        assert answer.metadata.charge_id is not None
    finally:
        s.close()


def test_graph_precheck_still_refuses_what_the_filter_refuses(tmp_path: Path) -> None:
    # negative control: ε = 0.1 needs ρ = 0.005, more than what is left
    s = _zcdp_session(tmp_path)
    try:
        left = _spend_most_of_rho(s)
        eps = Fraction(1, 10)
        assert eps * eps / 2 > left
        before = len(s._ledger.history("d"))
        with pytest.raises(BudgetExceeded):
            s.graph("g").edge_count(epsilon=eps)
        assert len(s._ledger.history("d")) == before
    finally:
        s.close()


def test_sqlgen_uses_no_private_name_of_the_compiler() -> None:
    tree = ast.parse(Path(sqlgen_module.__file__).read_text(encoding="utf-8"))
    imported = [
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    ]
    assert not [name for name in imported if name.startswith("_")]


def test_graph_objects_given_to_analysts_have_no_public_unnoised_path(tmp_path: Path) -> None:
    # Session.graph(name) hands the Graph to analysts: every public method must charge and
    # noise. The exact statistic used to be a public `exact(query, secret)` (no noise, no
    # charge); like Session._exact for tables it is internal now.
    from deniable.graph.graph import Graph

    public = {n for n in dir(Graph) if not n.startswith("_")}
    assert public == {
        "edge_count",
        "degree_histogram",
        "nodes_with_degree_at_least",
        "triangle_count",
        "edge_count_by",
        "run",
        "replay_key",  # a hash of the question and the graph's declaration: reads no data
    }
    s = _zcdp_session(tmp_path)
    try:
        g = s.graph("g")
        assert {n for n in vars(g) if not n.startswith("_")} == {"info"}
    finally:
        s.close()


def test_a_nan_id_names_no_node_at_either_level(tmp_path: Path) -> None:
    # Float ids with NaN. The node-level path once mapped NaN to pandas' sentinel −1 and
    # raised after the projection, before the charge — a free error whose occurrence
    # depended on the private edges; later NaN was one node, but NaN ≠ NaN in Python split
    # it across the triangle program's rows. Node ids are now canonical in the engine, as
    # privacy units are for tables: NaN identifies no node (its rows are dropped like rows
    # with a NULL end) and -0.0 is 0.0.
    import pyarrow as pa

    from deniable.accounting.loss import Epsilon
    from deniable.graph import GraphQuery, Kind

    nan = float("nan")
    table = pa.table({"a": [1.0, 2.0, nan, 3.0, nan, -0.0], "b": [2.0, 3.0, 1.0, nan, nan, 1.0]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        s = Session(budget=Epsilon(epsilon=10), ledger=tmp_path / "l.db", source=SeededRandom(1))
    try:
        for unit in ("edge", "node"):
            s.add_graph(f"g_{unit}", table, source_col="a", target_col="b", unit=unit, max_degree=9)
        q = GraphQuery(Kind.EDGE_COUNT)
        # 3 edges: {1,2}, {2,3}, {0,1}; every row with a NaN end is dropped
        assert s.graph("g_edge")._exact(q, 3).values.tolist() == [3]
        assert s.graph("g_node")._exact(q, 3).values.tolist() == [3]  # D = 9 keeps all
        hist = s.graph("g_node")._exact(GraphQuery(Kind.DEGREE_HISTOGRAM), 3).values.tolist()
        assert hist[:3] == [2, 2, 0]  # 0 and 3 have degree 1; 1 and 2 degree 2
        answer = s.graph("g_node").edge_count(epsilon=1)
        assert answer.metadata.charge_id is not None
    finally:
        s.close()


def _collated_graph() -> object:
    """A DuckDB connection whose edge columns compare case-insensitively (COLLATE NOCASE)."""
    import duckdb

    con = duckdb.connect()
    con.execute("CREATE TABLE g (a VARCHAR COLLATE NOCASE, b VARCHAR COLLATE NOCASE)")
    rows = []
    for i, hub in enumerate(["hub", "HUB", "Hub", "hUb"]):  # one node to the engine's '='
        k = f"k{i}"
        for j in range(4):
            c = f"c{i}_{j}"
            rows += [(hub, k), (hub, c), (k, c)]
    con.executemany("INSERT INTO g VALUES (?, ?)", rows)
    con.execute("CREATE VIEW ge AS SELECT * FROM g")  # a connection's tables are bound by
    con.execute("CREATE VIEW gn AS SELECT * FROM g")  # the graph's name
    return con


def test_node_ids_compare_byte_for_byte_in_the_engine_and_in_python(tmp_path: Path) -> None:
    # Review finding: with a case-insensitive collation the engine made 'hub' and 'HUB' one
    # node while Python (the triangle program, the projection) saw two, so that node got a
    # triangle budget per spelling — a release moving by several times its sensitivity.
    # Node ids are now the UTF-8 bytes of their NFC text in the engine: every spelling is
    # its own node everywhere, and the engine's statistics equal the byte-wise references.
    from deniable.accounting.loss import Epsilon
    from deniable.graph import GraphQuery, Kind, lipschitz, sqlgen
    from deniable.graph.projection import triangle_count

    con = _collated_graph()
    rows = con.execute("SELECT a, b FROM g").fetchall()  # type: ignore[attr-defined]
    pairs = {(min(a, b), max(a, b)) for a, b in rows if a != b}
    u = [p[0] for p in pairs]
    w = [p[1] for p in pairs]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        s = Session(budget=Epsilon(epsilon=10), ledger=tmp_path / "l.db", source=SeededRandom(1))
    try:
        s.add_graph("ge", con, source_col="a", target_col="b", unit="edge", max_degree=50)
        s.add_graph("gn", con, source_col="a", target_col="b", unit="node", max_degree=3)
        edge, node = s.graph("ge"), s.graph("gn")
        assert edge._exact(GraphQuery(Kind.EDGE_COUNT), 1).values.tolist() == [len(pairs)]
        assert edge._exact(GraphQuery(Kind.TRIANGLES), 1).values.tolist() == [triangle_count(u, w)]
        # the triangle program sees four hubs, each allowed Δ = 3 triangles of its four
        patterns = node._run(sqlgen.triangle_structure(node._engine.capabilities, node._ends, 3))
        hubs = {h for h in patterns.column(0).to_pylist() + patterns.column(1).to_pylist() if h}
        assert len({h for h in hubs if h.lower() == b"hub"}) == 4
        assert node._exact(GraphQuery(Kind.TRIANGLES), 1).values.tolist() == [12]
        assert lipschitz.sensitivity(3) == 4
    finally:
        s.close()


def test_list_node_ids_are_compared_as_text_not_hashed_in_python(tmp_path: Path) -> None:
    # Review finding: LIST ids reached Python as lists, and the triangle program raised
    # TypeError (unhashable) before the charge only when some node was heavy — a free bit
    # about the data. Non-scalar ids are now compared as the bytes of their text.
    import duckdb

    from deniable.accounting.loss import Epsilon

    con = duckdb.connect()
    con.execute("CREATE TABLE g (a INTEGER[], b INTEGER[])")
    k6 = [([i], [j]) for i in range(6) for j in range(i + 1, 6)]  # every node in 10 triangles
    con.executemany("INSERT INTO g VALUES (?, ?)", k6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        s = Session(budget=Epsilon(epsilon=10), ledger=tmp_path / "l.db", source=SeededRandom(1))
    try:
        s.add_graph("g", con, source_col="a", target_col="b", unit="node", max_degree=2)
        answer = s.graph("g").triangle_count(epsilon=1)
        assert answer.metadata.charge_id is not None
        assert s.budget.spent == Epsilon(epsilon=1)
    finally:
        s.close()
