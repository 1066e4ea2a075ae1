"""Graphs read in place from a real PostgreSQL server (started here: initdb + pg_ctl).

The same edge and node tables are registered twice in one session: in place in PostgreSQL
(``add_graph(name, "postgresql://…", table=…, nodes=…, nodes_table=…)``, as a read-only
role granted SELECT on those two tables only) and from DataFrames in DuckDB. Statistics
that do not depend on the keyed-hash order are equal on both engines (edge level: counts,
histograms, thresholds, edge ends; node level: the triangle program); the truncations,
whose order is each engine's keyed hash, equal the Python references run on the order
PostgreSQL returns (mutual top-D triangles at edge level, the projection's counts at node
level). An answer through SQL is charged to the session's one budget. Tables of two engines
are refused as one graph.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))

from _postgres import (
    PostgresServer,
    create_reader,
    load_table,
    shared_server,
    stop_shared_server,
)

psycopg = pytest.importorskip("psycopg")

from deniable.accounting.loss import Epsilon  # noqa: E402
from deniable.curator.session import Session  # noqa: E402
from deniable.errors import InvalidParameter  # noqa: E402
from deniable.graph import GraphQuery, Kind, sqlgen  # noqa: E402
from deniable.graph.projection import (  # noqa: E402
    degrees,
    edge_addition_projection,
    mutual_top_d,
    triangle_count,
)

D = 4
CITIES = ["north", "south", "east"]


def _edges() -> pd.DataFrame:
    """A skewed graph with triangles, a hub, repeats, both orientations and self-loops."""
    rng = np.random.default_rng(14)  # test data only
    n, m = 60, 400
    w = (np.arange(n) + 3.0) ** -1.0
    a = rng.choice(n, m, p=w / w.sum())
    b = rng.integers(0, n, m)
    return pd.DataFrame({"src": a.astype(np.int64), "dst": b.astype(np.int64)})


EDGES = _edges()
NAMED = EDGES.astype(str).radd("né-")  # text ids (non-ASCII: NFC, then UTF-8 bytes)
NODES = pd.DataFrame(
    {"id": np.arange(60, dtype=np.int64), "city": [CITIES[i % 3] for i in range(60)]}
)


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    s = shared_server()
    load_table(s.dsn(), "follows", pa.Table.from_pandas(EDGES, preserve_index=False), schema="soc")
    load_table(s.dsn(), "people", pa.Table.from_pandas(NODES, preserve_index=False), schema="soc")
    load_table(s.dsn(), "named", pa.Table.from_pandas(NAMED, preserve_index=False), schema="soc")
    create_reader(
        s.dsn(), "graph_reader", [("soc", "follows"), ("soc", "people"), ("soc", "named")]
    )
    yield s
    stop_shared_server()


def _declaration(unit: str) -> dict[str, Any]:
    """The graph's declaration (all but its tables), as both engines register it."""
    return {
        "source_col": "src",
        "target_col": "dst",
        "unit": unit,
        "max_degree": D,
        "node_key": "id",
        "domains": {"city": CITIES},
    }


ORDER_FREE = {
    "edge": [
        GraphQuery(Kind.EDGE_COUNT),
        GraphQuery(Kind.DEGREE_HISTOGRAM),
        GraphQuery(Kind.DEGREE_AT_LEAST, threshold=3),
        GraphQuery(Kind.EDGE_ENDS_BY, attribute="city"),
    ],
    "node": [GraphQuery(Kind.TRIANGLES)],  # the linear program: no edge order
}


def assert_truncations_follow_the_engines_order(graph: Any, unit: str, secret: int) -> None:
    """``graph``'s truncated statistics equal the Python references on its engine's order.

    The truncations follow each engine's keyed hash (PostgreSQL's hashint8extended chain,
    Spark's xxhash64, DuckDB's hash), so the references run on the order the engine itself
    returns for ``secret``: mutual top-D triangles at edge level, the projection's edge
    count and degree histogram at node level.
    """
    order = graph._run(sqlgen.ordered_edges(graph._engine.capabilities, graph._ends, secret))
    u = np.array(order.column(0).to_pylist(), dtype=np.int64)
    w = np.array(order.column(1).to_pylist(), dtype=np.int64)
    pairs = {(min(a, b), max(a, b)) for a, b in zip(EDGES.src, EDGES.dst, strict=True) if a != b}
    assert len(u) == len(pairs)
    if unit == "edge":
        top = mutual_top_d(u, w, D)
        got = graph._exact(GraphQuery(Kind.TRIANGLES), secret).values.tolist()
        assert got == [triangle_count(u[top], w[top])] and got[0] > 0
        return
    kept = edge_addition_projection(u, w, D)
    deg = degrees(u[kept], w[kept], 60)
    count = graph._exact(GraphQuery(Kind.EDGE_COUNT), secret).values.tolist()
    assert count == [int(kept.sum())]
    hist = graph._exact(GraphQuery(Kind.DEGREE_HISTOGRAM), secret).values.tolist()
    assert hist == [int((deg == k).sum()) for k in range(1, D + 1)]


@pytest.mark.parametrize("unit", ["edge", "node"])
def test_postgres_graphs_match_duckdb_and_the_references(
    server: PostgresServer, tmp_path: Path, unit: str
) -> None:
    url = server.dsn("graph_reader")
    with Session(budget=Epsilon(epsilon=10), ledger=tmp_path / "l.db") as s:
        common = _declaration(unit)
        s.add_graph("pg", url, table="soc.follows", nodes=url, nodes_table="soc.people", **common)
        s.add_graph("duck", EDGES, nodes=NODES, nodes_name="people2", **common)
        pg, duck = s.graph("pg"), s.graph("duck")
        # statistics that do not depend on the keyed-hash order: equal on both engines
        for q in ORDER_FREE[unit]:
            keys = CITIES if q.kind is Kind.EDGE_ENDS_BY else None
            got = pg._exact(q, 3, keys).values.tolist()
            assert got == duck._exact(q, 3, keys).values.tolist(), q.kind
        for secret in (3, 2**40 + 7):
            assert_truncations_follow_the_engines_order(pg, unit, secret)
        answer = s.sql("SELECT COUNT(*) AS t FROM triangles(pg)", epsilon=1)
        assert answer.columns == ["t", "t_low", "t_high"]
        assert s.budget.spent == Epsilon(epsilon=1)


def test_edges_and_nodes_of_two_engines_are_refused(server: PostgresServer, tmp_path: Path) -> None:
    url = server.dsn("graph_reader")
    with Session(budget=Epsilon(epsilon=1), ledger=tmp_path / "l.db") as s:
        with pytest.raises(InvalidParameter, match="one engine"):
            s.add_graph(
                "g",
                url,
                table="soc.follows",
                source_col="src",
                target_col="dst",
                unit="node",
                max_degree=D,
                nodes=NODES,
                node_key="id",
            )
        with pytest.raises(InvalidParameter, match="needs table="):
            s.add_graph("g", url, source_col="src", target_col="dst", max_degree=D)


def test_text_ids_match_duckdb(server: PostgresServer, tmp_path: Path) -> None:
    url = server.dsn("graph_reader")
    with Session(budget=Epsilon(epsilon=10), ledger=tmp_path / "l.db") as s:
        for unit in ("edge", "node"):
            common: dict[str, Any] = {
                "source_col": "src",
                "target_col": "dst",
                "unit": unit,
                "max_degree": D,
            }
            s.add_graph(f"pg_{unit}", url, table="soc.named", **common)
            s.add_graph(f"duck_{unit}", NAMED, **common)
        for unit, q in (
            ("edge", GraphQuery(Kind.EDGE_COUNT)),
            ("edge", GraphQuery(Kind.DEGREE_HISTOGRAM)),
            ("node", GraphQuery(Kind.TRIANGLES)),
        ):
            got = s.graph(f"pg_{unit}")._exact(q, 3).values.tolist()
            assert got == s.graph(f"duck_{unit}")._exact(q, 3).values.tolist(), q.kind
        assert s.graph("duck_node")._exact(GraphQuery(Kind.TRIANGLES), 3).values.tolist()[0] > 0
        # node level with a bound no degree reaches: the projection keeps every edge in any
        # order, so PostgreSQL's numbered ends (sqlgen.numbered) give DuckDB's statistics
        big = {"source_col": "src", "target_col": "dst", "unit": "node", "max_degree": 1000}
        s.add_graph("pg_big", url, table="soc.named", **big)
        s.add_graph("duck_big", NAMED, **big)
        for q in (GraphQuery(Kind.EDGE_COUNT), GraphQuery(Kind.DEGREE_HISTOGRAM)):
            got = s.graph("pg_big")._exact(q, 5).values.tolist()
            assert got == s.graph("duck_big")._exact(q, 5).values.tolist(), q.kind


def test_an_unqualified_table_resolves_in_the_roles_search_path(
    server: PostgresServer, tmp_path: Path
) -> None:
    # The catalog look-up of an unqualified name used deniable's fixed search_path
    # (pg_catalog and the schemas of tables bound so far), so a table of `public`, which the
    # role's own search_path reaches, was reported as not visible.
    load_table(server.dsn(), "plain", pa.Table.from_pandas(EDGES, preserve_index=False))
    create_reader(server.dsn(), "plain_reader", [("public", "plain")])
    url = server.dsn("plain_reader")
    with Session(budget=Epsilon(epsilon=1), ledger=tmp_path / "l.db") as s:
        s.add_graph("g", url, table="plain", source_col="src", target_col="dst", max_degree=D)
        s.add_graph("h", EDGES, source_col="src", target_col="dst", max_degree=D)
        q = GraphQuery(Kind.EDGE_COUNT)
        assert (
            s.graph("g")._exact(q, 1).values.tolist() == s.graph("h")._exact(q, 1).values.tolist()
        )


def test_the_service_serves_a_graph_only_postgresql_dataset(
    server: PostgresServer, tmp_path: Path
) -> None:
    from deniable.ledger.analysts import Principal
    from deniable.server.config import load_config
    from deniable.server.service import Service

    url = server.dsn("graph_reader")
    (tmp_path / "service.toml").write_text(
        f'ledger = "l.db"\n[datasets.social]\nengine = "postgresql"\nsource = "{url}"\n'
        "budget = { epsilon = 10 }\n"
        '[[datasets.social.graphs]]\nname = "friends"\nsource = "soc.follows"\n'
        'source_col = "src"\ntarget_col = "dst"\nunit = "node"\nmax_degree = 4\n'
        'nodes = "soc.people"\nnode_key = "id"\ndomains = { city = ["north", "south", "east"] }\n'
    )
    ann = Principal(name="ann", role="analyst")
    with (
        Service(load_config(tmp_path / "service.toml")) as service,
        Session(budget=Epsilon(epsilon=10), ledger=tmp_path / "d.db") as duck,
    ):
        duck.add_graph("friends", EDGES, nodes=NODES, **_declaration("node"))
        pg = service._session("social").graph("friends")
        q = GraphQuery(Kind.TRIANGLES)
        assert pg._exact(q, 1).values.tolist() == duck.graph("friends")._exact(q, 1).values.tolist()
        answer = service.query(
            ann, "social", "SELECT COUNT(*) AS t FROM triangles(friends)", epsilon=1
        )
        assert answer.columns == ["t", "t_low", "t_high"]
        by = service.query(
            ann,
            "social",
            "SELECT n.city, COUNT(*) AS e FROM friends g JOIN nodes n ON n.id IN (g.src, g.dst) "
            "GROUP BY n.city",
            epsilon=1,
        )
        assert sorted(by.to_pandas().city) == sorted(CITIES)
        assert service.budget("social").spent == Epsilon(epsilon=2)
        assert service.metadata("social").table is None


def test_node_attributes_are_matched_in_postgresql_and_extreme_dates_change_nothing(
    server: PostgresServer, tmp_path: Path
) -> None:
    # Node-level edge_count_by: PostgreSQL matches the date attribute against the declared
    # domain itself (sqlgen.attribute_groups). Isolated nodes with DATE 'infinity',
    # '-infinity' or a year beyond 9999 — which Python cannot represent, and which once
    # raised before the charge — are in no group: answered and charged like their absence.
    import datetime

    with psycopg.connect(server.dsn(), autocommit=True) as con:
        con.execute("create table soc.days (id bigint, day date)")
        con.execute(
            "insert into soc.days select i, date '2020-01-01' + (i % 3) "
            "from generate_series(0, 59) i"
        )
        con.execute("create table soc.days_x as select * from soc.days")
        con.execute(
            "insert into soc.days_x values (1000, 'infinity'), (1001, '-infinity'), "
            "(1002, '10000-01-01')"
        )
    create_reader(
        server.dsn(), "days_reader", [("soc", "follows"), ("soc", "days"), ("soc", "days_x")]
    )
    url = server.dsn("days_reader")
    domain = [datetime.date(2020, 1, 1) + datetime.timedelta(days=k) for k in range(3)]
    # a bound no degree reaches: the projection keeps every edge in any engine's order
    common: dict[str, Any] = {
        "source_col": "src",
        "target_col": "dst",
        "unit": "node",
        "max_degree": 1000,
        "node_key": "id",
        "domains": {"day": domain},
    }
    frame = pd.DataFrame({"id": np.arange(60, dtype=np.int64), "day": domain * 20})
    q = GraphQuery(Kind.EDGE_ENDS_BY, attribute="day")
    with Session(budget=Epsilon(epsilon=10), ledger=tmp_path / "l.db") as s:
        s.add_graph("d", url, table="soc.follows", nodes=url, nodes_table="soc.days", **common)
        s.add_graph("dx", url, table="soc.follows", nodes=url, nodes_table="soc.days_x", **common)
        s.add_graph("duck", EDGES, nodes=frame, nodes_name="days3", **common)
        want = s.graph("duck")._exact(q, 3, domain).values.tolist()
        assert sum(want) > 0
        assert s.graph("d")._exact(q, 3, domain).values.tolist() == want
        assert s.graph("dx")._exact(q, 3, domain).values.tolist() == want
        for name in ("d", "dx"):
            assert s.graph(name).edge_count_by("day", epsilon=1).metadata.charge_id is not None
        assert s.budget.spent == Epsilon(epsilon=2)
