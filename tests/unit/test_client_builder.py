"""Builder queries travel in the API's JSON form when the server rebuilds the same SQL."""

from __future__ import annotations

import pytest

from deniable.client.builder import builder_json, query_from_json
from deniable.query import builder as b
from deniable.server.models import BuilderQuery

INSIDE = [
    b.Query("t").agg(b.count()),
    b.Query("t").agg(b.count().alias("n"), b.sum_("x"), b.mean("x").alias("m")),
    b.Query("t")
    .where(b.col("x") > -1)
    .where(b.col("k").isin(["a", "b"]))
    .where(~b.col("k").isin(["c"]))
    .where(b.col("z").is_not_null())
    .where(b.col("w").is_null())
    .where(b.col("f") <= 0.5)
    .where(b.col("s") == "it's")
    .where(b.col("flag") != True)  # noqa: E712 - a SQL comparison, not a Python one
    .group_by("k", "j")
    .agg(
        b.count("x"),
        b.count_distinct("x"),
        b.variance("x"),
        b.stddev("x"),
        b.median("x").alias("med"),
        b.quantile("x", 0.25),
    )
    .order_by("med", descending=True)
    .order_by("k")
    .limit(3),
]

OUTSIDE = [
    b.Query("t").agg((b.count() + 1).alias("m")),  # arithmetic over aggregates
    b.Query("t").group_by("k").agg(b.count()).having(b.count() > 3),
    b.Query("t").where(b.col("x") + 1 > 3).agg(b.count()),  # a row expression
    b.Query("t").where((b.col("x") > 1) | (b.col("y") > 1)).agg(b.count()),
    b.Query("t").select(b.count(), "k").group_by("k"),  # keys not first
    b.Query("t").group_by(b.year("d").alias("y")).agg(b.count()),
    b.Query("t").agg(b.count()).join("p", on="k"),
    b.Query("t").agg(b.min_("x")),
    b.Query("t").agg(b.variance("x", population=True)),
    b.Query("t").agg(b.count().filter(b.col("x") > 0)),
    b.Query("t").agg(b.count()).offset(2),
]


@pytest.mark.parametrize("query", INSIDE, ids=repr)
def test_the_server_rebuilds_the_same_sql(query: b.Query) -> None:
    spec = builder_json(query)
    assert spec is not None
    # the server's own translation (pydantic model, strict) gives the builder's SQL
    assert BuilderQuery.model_validate(spec).to_query().to_sql() == query.to_sql()
    assert query_from_json(spec).to_sql() == query.to_sql()


@pytest.mark.parametrize("query", OUTSIDE, ids=repr)
def test_queries_outside_the_json_form_are_sent_as_sql(query: b.Query) -> None:
    assert builder_json(query) is None


def test_rendered_text_is_read_back() -> None:
    q = INSIDE[2]
    assert builder_json(q.to_sql()) == builder_json(q)
    assert builder_json("SELECT COUNT(*) FROM") is None  # does not parse: sent as SQL


def test_the_mirror_matches_the_server_translation_for_every_function() -> None:
    for function in ("count", "count_distinct", "sum", "mean", "variance", "stddev", "median"):
        spec = {"table": "t", "aggregates": [{"function": function, "column": "x"}]}
        server = BuilderQuery.model_validate(spec).to_query().to_sql()
        assert query_from_json(spec).to_sql() == server
        assert builder_json(server) == spec
