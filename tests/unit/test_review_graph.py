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
from deniable import ROW
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


# -- second review (service and node identity): each test failed before its fix ---------------


def _session(tmp_path: Path) -> Session:
    from deniable.accounting.loss import Epsilon

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        return Session(budget=Epsilon(epsilon=10), ledger=tmp_path / "l.db", source=SeededRandom(2))


def _con(*statements: str) -> object:
    import duckdb

    con = duckdb.connect()
    for sql in statements:
        con.execute(sql)
    return con


EDGE_ROWS = "(values (1,2),(2,3),(1,3),(3,4)) t(a,b)"


def _add_with_people(s: Session, name: str, con: object, **extra: object) -> None:
    """Register the connection's table ``name`` as a graph with its ``people`` node table."""
    s.add_graph(
        name,
        con,
        source_col="a",
        target_col="b",
        max_degree=5,
        nodes=con,
        node_key="id",
        nodes_name="people",
        **extra,  # type: ignore[arg-type]
    )


def test_decimal_ids_and_integer_real_mixes_are_refused(tmp_path: Path) -> None:
    # As doubles, distinct integers above 2^53 would be one node; as text, 5 and 5.0 two.
    import pandas as pd

    from deniable.errors import InvalidParameter

    decimal = _con(
        f"create table g as select a::DECIMAL(20,0) a, b::DECIMAL(20,0) b from {EDGE_ROWS}"
    )
    mixed = pd.DataFrame({"a": [1.0, None, 3.0], "b": [2, 3, 1]})  # float64 through a NULL
    with _session(tmp_path) as s:
        with pytest.raises(InvalidParameter, match="DECIMAL ids"):
            s.add_graph("g", decimal, source_col="a", target_col="b", max_degree=3)
        with pytest.raises(InvalidParameter, match="'Int64' dtype"):
            s.add_graph("h", mixed, source_col="a", target_col="b", max_degree=3)
        nullable = mixed.assign(a=pd.array([1, None, 3], dtype="Int64"))
        s.add_graph("h", nullable, source_col="a", target_col="b", max_degree=3)


def test_wide_integer_ids_work_at_node_level(tmp_path: Path) -> None:
    # A HUGEINT node key with BIGINT ends reached Python as Decimal objects and matched no
    # end (an all-zero answer, charged); UBIGINT ids at or above 2^63 overflowed int64 (a
    # free error). Wide integers are now compared as their exact text.
    from deniable.graph import GraphQuery, Kind

    con = _con(
        f"create table g as select a::BIGINT a, b::BIGINT b from {EDGE_ROWS}",
        "create table people as select id::HUGEINT id, c from "
        "(values (1,'x'),(2,'y'),(3,'x'),(4,'y')) t(id,c)",
        "create table u as select (a::UBIGINT + 9223372036854775807) a, "
        f"(b::UBIGINT + 9223372036854775807) b from {EDGE_ROWS}",
    )
    with _session(tmp_path) as s:
        _add_with_people(s, "g", con, unit="node", domains={"c": ["x", "y"]})
        s.add_graph("u", con, source_col="a", target_col="b", unit="node", max_degree=5)
        q = GraphQuery(Kind.EDGE_ENDS_BY, attribute="c", value_name="n", key_name="c")
        assert s.graph("g")._exact(q, 7, ["x", "y"]).values.tolist() == [5, 3]
        assert s.graph("u")._exact(GraphQuery(Kind.EDGE_COUNT), 7).values.tolist() == [4]
        assert s.graph("u").edge_count(epsilon=1).metadata.charge_id is not None


def test_output_names_that_collide_are_refused_before_the_charge(tmp_path: Path) -> None:
    import pandas as pd

    from deniable.accounting.loss import Epsilon
    from deniable.errors import InvalidParameter

    with _session(tmp_path) as s:
        s.add_graph(
            "g",
            pd.DataFrame({"a": [1, 2], "b": [2, 3]}),
            source_col="a",
            target_col="b",
            max_degree=3,
        )
        for sql in (
            "SELECT degree AS n, COUNT(*) AS n FROM degrees(g) GROUP BY degree",
            "SELECT degree AS N_HIGH, COUNT(*) AS n FROM degrees(g) GROUP BY degree",
        ):
            with pytest.raises(InvalidParameter, match="collide"):
                s.sql(sql, epsilon=1)
        assert s.budget.spent == Epsilon(epsilon=0)


def test_attributes_must_be_scalar_and_nan_is_one_group(tmp_path: Path) -> None:
    from deniable.errors import InvalidParameter
    from deniable.graph import GraphQuery, Kind

    con = _con(
        f"create table g as select * from {EDGE_ROWS}",
        "create table people as select id, [id % 2] l, "
        "CASE WHEN id = 1 THEN 'nan'::DOUBLE ELSE 1.5 END c from (values (1),(2),(3),(4)) t(id)",
        "create view h as select * from g",
    )
    with _session(tmp_path) as s:
        _add_with_people(s, "g", con)
        with pytest.raises(InvalidParameter, match="only scalar attributes"):
            s.sql(
                "SELECT p.l, COUNT(*) FROM g e JOIN people p ON p.id IN (e.a, e.b) GROUP BY p.l",
                epsilon=1,
            )
        g = s.graph("g")
        q = GraphQuery(Kind.EDGE_ENDS_BY, attribute="c", value_name="n", key_name="c")
        assert sorted(g._exact(q, 7, g._domain(q)).values.tolist()) == [2, 6]  # NaN: node 1
        for bad in ("xy", [["x"], ["y"]]):
            with pytest.raises(InvalidParameter, match="domain of 'c'"):
                _add_with_people(s, "h", con, domains={"c": bad})


def test_max_degree_is_capped_and_a_with_table_is_not_the_graph(tmp_path: Path) -> None:
    import pandas as pd

    from deniable.errors import InvalidParameter
    from deniable.graph.queries import MAX_DEGREE

    frame = pd.DataFrame({"a": [1, 2], "b": [2, 3]})
    with _session(tmp_path) as s:
        with pytest.raises(InvalidParameter, match="at most"):
            s.add_graph("g", frame, source_col="a", target_col="b", max_degree=MAX_DEGREE + 1)
        s.add_graph("g", frame, source_col="a", target_col="b", max_degree=MAX_DEGREE)
        s.add_table("t", frame, privacy_unit=ROW)
        # the query's own WITH table named like the graph goes to the table path
        answer = s.sql("WITH g AS (SELECT * FROM t) SELECT COUNT(*) AS n FROM g", epsilon=1)
        assert list(answer.to_pandas().columns) == ["n", "n_low", "n_high"]
