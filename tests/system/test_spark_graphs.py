"""Graphs on a real local Spark: the same statistics as DuckDB, and the references.

The edge and node tables of ``tests/system/test_postgres_graphs.py`` are registered in a
session whose engine is Spark (``Session(engine=SparkEngine(spark))``) and, for comparison,
in a DuckDB session. Statistics that do not depend on the keyed-hash order are equal on
both engines (edge level: counts, histograms, thresholds, edge ends; node level: the
triangle program, whose heavy-node patterns Spark computes); the truncations, whose order
is Spark's keyed hash, equal the Python references run on the order Spark returns. An
answer through SQL is charged to the session's budget.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from deniable.accounting.loss import Epsilon
from deniable.curator.session import Session
from deniable.graph import Kind

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_postgres_graphs import (
    CITIES,
    EDGES,
    NODES,
    ORDER_FREE,
    assert_truncations_follow_the_engines_order,
)
from test_spark_engine import engine, spark  # noqa: F401 (the local Spark fixtures)

D = 4


@pytest.mark.parametrize("unit", ["edge", "node"])
def test_spark_graphs_match_duckdb_and_the_references(
    engine: Any,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
    unit: str,
) -> None:
    common: dict[str, Any] = {
        "source_col": "src",
        "target_col": "dst",
        "unit": unit,
        "max_degree": D,
        "nodes": NODES,
        "node_key": "id",
        "domains": {"city": CITIES},
    }
    with (
        Session(budget=Epsilon(epsilon=10), ledger=tmp_path / "s.db", engine=engine) as s,
        Session(budget=Epsilon(epsilon=10), ledger=tmp_path / "d.db") as d,
    ):
        s.add_graph("g", EDGES, **common)
        d.add_graph("g", EDGES, **common)
        sg, dg = s.graph("g"), d.graph("g")
        for q in ORDER_FREE[unit]:
            keys = CITIES if q.kind is Kind.EDGE_ENDS_BY else None
            assert sg._exact(q, 3, keys).values.tolist() == dg._exact(q, 3, keys).values.tolist()
        assert_truncations_follow_the_engines_order(sg, unit, 2**40 + 7)
        answer = s.sql("SELECT COUNT(*) AS t FROM triangles(g)", epsilon=1)
        assert answer.columns == ["t", "t_low", "t_high"]
        assert s.budget.spent == Epsilon(epsilon=1)


def test_spark_matches_node_attributes_against_the_domain_like_duckdb(
    engine: Any,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
) -> None:
    # Node level: the text attribute is matched against the declared domain in the engine
    # (sqlgen.attribute_groups: UTF-8 bytes, a VALUES table joined); with a bound no degree
    # reaches, the projection keeps every edge in any order, so Spark's counts are DuckDB's
    from deniable.graph import GraphQuery

    common: dict[str, Any] = {
        "source_col": "src",
        "target_col": "dst",
        "unit": "node",
        "max_degree": 1000,
        "nodes": NODES,
        "node_key": "id",
        "domains": {"city": [*CITIES, "nowhere"]},
    }
    q = GraphQuery(Kind.EDGE_ENDS_BY, attribute="city")
    keys = [*CITIES, "nowhere"]
    with (
        Session(budget=Epsilon(epsilon=10), ledger=tmp_path / "s.db", engine=engine) as s,
        Session(budget=Epsilon(epsilon=10), ledger=tmp_path / "d.db") as d,
    ):
        s.add_graph("g", EDGES, **common)
        d.add_graph("g", EDGES, **common)
        got = s.graph("g")._exact(q, 3, keys).values.tolist()
        assert got == d.graph("g")._exact(q, 3, keys).values.tolist()
        assert got[-1] == 0 and sum(got) > 0
        assert s.graph("g").edge_count_by("city", epsilon=1).metadata.charge_id is not None
