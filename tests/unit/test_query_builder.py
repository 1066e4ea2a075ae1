"""The Python query builder writes the SQL an analyst would type: same tree, same normalised
text (the cache key's SQL part), same output names, same answer and same charge."""

from __future__ import annotations

import datetime as dt
import warnings
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import pandas as pd
import pytest
import sqlglot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlglot import exp

from deniable.accounting.loss import Epsilon
from deniable.errors import InvalidParameter, PrivacyWarning
from deniable.noise.testing import SeededRandom
from deniable.query.builder import (
    Expr,
    Query,
    abs_,
    asc,
    ceil,
    coalesce,
    col,
    count,
    count_distinct,
    date_trunc,
    day,
    desc,
    floor,
    length,
    lit,
    lower,
    max_,
    mean,
    median,
    min_,
    month,
    quantile,
    round_,
    sqrt,
    stddev,
    substr,
    sum_,
    upper,
    variance,
    when,
    year,
)
from deniable.query.parse import normalize, parse

if TYPE_CHECKING:
    from deniable.curator.session import Session

Build = Callable[[], Query]

# (builder, equivalent SQL as a person would type it) for shapes parse() accepts today.
PARSED_PAIRS: list[tuple[str, Build, str]] = [
    (
        "brief_example",
        lambda: (
            Query("events").where(col("value") > 0).group_by("category").agg(count(), mean("value"))
        ),
        "SELECT category, COUNT(*), AVG(value) FROM events WHERE value > 0 GROUP BY category",
    ),
    (
        "alias",
        lambda: Query("t").agg(count().alias("n")),
        "select count(*) as n from t",
    ),
    (
        "sum_and_count_column",
        lambda: Query("t").agg(sum_("x"), count("x")),
        "SELECT SUM(x), COUNT(x) FROM t",
    ),
    (
        "count_distinct_unit",
        lambda: Query("t").group_by("k").agg(count_distinct("uid").alias("people")),
        "SELECT k, COUNT(DISTINCT uid) AS people FROM t GROUP BY k",
    ),
    (
        "quantile_and_median",
        lambda: Query("t").agg(quantile("x", 0.9), median("x")),
        "SELECT QUANTILE(x, 0.9), MEDIAN(x) FROM t",
    ),
    (
        "quantile_fraction",
        lambda: Query("t").agg(quantile(col("x"), Fraction(1, 4)).alias("q1")),
        "SELECT QUANTILE(x, 0.25) AS q1 FROM t",
    ),
    (
        "variance_stddev_sample",
        lambda: Query("t").agg(variance("x"), stddev("x")),
        "SELECT VAR_SAMP(x), STDDEV(x) FROM t",
    ),
    (
        "variance_stddev_population",
        lambda: Query("t").agg(variance("x", population=True), stddev("x", population=True)),
        "SELECT VAR_POP(x), STDDEV_POP(x) FROM t",
    ),
    (
        "order_limit_offset",
        lambda: (
            Query("t")
            .group_by("k")
            .agg(count().alias("n"))
            .order_by("n", descending=True)
            .limit(5)
            .offset(2)
        ),
        "SELECT k, COUNT(*) AS n FROM t GROUP BY k ORDER BY n DESC LIMIT 5 OFFSET 2",
    ),
    (
        "order_mixed_and_position",
        lambda: (
            Query("t")
            .group_by("k", "j")
            .agg(sum_("x").alias("s"))
            .order_by(desc("s"), asc("k"))
            .order_by(2)
        ),
        "SELECT k, j, SUM(x) AS s FROM t GROUP BY k, j ORDER BY s DESC, k, 2",
    ),
    (
        "where_called_twice_ands",
        lambda: Query("t").where(col("x") > 0).where(col("x") < 10).agg(count()),
        "SELECT COUNT(*) FROM t WHERE x > 0 AND x < 10",
    ),
    (
        "where_or_and_not_in",
        lambda: (
            Query("t")
            .where(((col("x") > 0) | (col("k") == "a")) & ~col("k").isin(["b", "c"]))
            .agg(count())
        ),
        "SELECT COUNT(*) FROM t WHERE (x > 0 OR k = 'a') AND k NOT IN ('b', 'c')",
    ),
    (
        "where_between_like_not_null",
        lambda: (
            Query("t")
            .where(col("x").between(1, 5) & col("k").like("a%") & col("k").is_not_null())
            .agg(sum_("x"))
        ),
        "SELECT SUM(x) FROM t WHERE x BETWEEN 1 AND 5 AND k LIKE 'a%' AND k IS NOT NULL",
    ),
    (
        "where_arithmetic_precedence",
        lambda: (
            Query("t")
            .where((col("x") * 2 + 1 > 3) & (-col("x") < 0) & ((col("x") + 1) * 2 != 8))
            .agg(count())
        ),
        "SELECT COUNT(*) FROM t WHERE x * 2 + 1 > 3 AND -x < 0 AND (x + 1) * 2 <> 8",
    ),
    (
        "where_not_of_and",
        lambda: Query("t").where(~((col("x") > 1) & (col("x") < 5))).agg(count()),
        "SELECT COUNT(*) FROM t WHERE NOT (x > 1 AND x < 5)",
    ),
    (
        "where_functions",
        lambda: (
            Query("t")
            .where(
                (col("x").cast("INT") == 3)
                & (lower("k") == "a")
                & (coalesce("x", 0) >= 1)
                & (abs_("x") < 10)
                & (round_("x", 1) != 2)
            )
            .agg(count())
        ),
        (
            "SELECT COUNT(*) FROM t WHERE CAST(x AS INT) = 3 AND LOWER(k) = 'a' "
            "AND COALESCE(x, 0) >= 1 AND ABS(x) < 10 AND ROUND(x, 1) != 2"
        ),
    ),
    (
        "where_more_functions",
        lambda: (
            Query("t")
            .where(
                (upper(substr("k", 1, 2)) == "AB")
                & (length("k") > 1)
                & (floor("x") < ceil("x"))
                & (sqrt("x") <= 3)
            )
            .agg(count())
        ),
        (
            "SELECT COUNT(*) FROM t WHERE UPPER(SUBSTR(k, 1, 2)) = 'AB' AND LENGTH(k) > 1 "
            "AND FLOOR(x) < CEILING(x) AND SQRT(x) <= 3"
        ),
    ),
    (
        "where_dates",
        lambda: (
            Query("t")
            .where(
                (year("d") == 2020)
                & (month("d") >= 6)
                & (day("d") != 1)
                & (col("d") >= dt.date(2020, 1, 31))
                & (date_trunc("month", "d") < dt.datetime(2021, 1, 1, 12, 30))
            )
            .agg(count())
        ),
        (
            "SELECT COUNT(*) FROM t WHERE YEAR(d) = 2020 AND MONTH(d) >= 6 AND DAY(d) <> 1 "
            "AND d >= DATE '2020-01-31' AND DATE_TRUNC('month', d) < TIMESTAMP '2021-01-01 12:30:00'"
        ),
    ),
    (
        "where_case",
        lambda: (
            Query("t")
            .where(when(col("x") > 0, "pos").when(col("x") < 0, "neg").otherwise(None) == "pos")
            .agg(count())
        ),
        (
            "SELECT COUNT(*) FROM t WHERE CASE WHEN x > 0 THEN 'pos' WHEN x < 0 THEN 'neg' "
            "ELSE NULL END = 'pos'"
        ),
    ),
    (
        "where_literals",
        lambda: (
            Query("t")
            .where((col("x") > -1.5) & (col("k") == "it's") & (col("b") == True))  # noqa: E712
            .agg(count())
        ),
        "SELECT COUNT(*) FROM t WHERE x > -1.5 AND k = 'it''s' AND b = TRUE",
    ),
    (
        "where_isin_or_null",
        lambda: Query("t").where(col("x").isin([1, 2, 3]) | col("k").is_null()).agg(count()),
        "SELECT COUNT(*) FROM t WHERE x IN (1, 2, 3) OR k IS NULL",
    ),
    (
        "not_like_and_not_between",
        lambda: (
            Query("t")
            .where(~col("k").like("a%") & ~col("x").between(1, 2) & ~(col("x") == 3))
            .agg(count())
        ),
        "SELECT COUNT(*) FROM t WHERE k NOT LIKE 'a%' AND x NOT BETWEEN 1 AND 2 AND NOT x = 3",
    ),
    (
        "reverse_operands",
        lambda: Query("t").where((10 - col("x") > 2) & (2 * col("x") < 5)).agg(count()),
        "SELECT COUNT(*) FROM t WHERE 10 - x > 2 AND 2 * x < 5",
    ),
    (
        "select_explicit_order",
        lambda: Query("t").group_by("k").select(count().alias("n"), "k"),
        "SELECT COUNT(*) AS n, k FROM t GROUP BY k",
    ),
    (
        "case_insensitive_names",
        lambda: Query("t").group_by("K").agg(sum_(col("X"))),
        "select K, sum(X) from t group by K",  # default names keep the spelling
    ),
    (
        "quoted_names",
        lambda: Query("t").group_by("my key").agg(mean("the value")),
        'SELECT "my key", AVG("the value") FROM t GROUP BY "my key"',
    ),
    (
        "repeated_default_names",
        lambda: Query("t").agg(sum_("x"), sum_("x").alias("s2"), count(), count()),
        "SELECT SUM(x), SUM(x) AS s2, COUNT(*), COUNT(*) FROM t",
    ),
]

# Shapes parse() may still refuse: compared as sqlglot trees and normalised text.
NEW_PAIRS: list[tuple[str, Build, str]] = [
    (
        "having",
        lambda: Query("t").group_by("k").agg(count()).having(count() > 10),
        "SELECT k, COUNT(*) FROM t GROUP BY k HAVING COUNT(*) > 10",
    ),
    (
        "having_twice_ands",
        lambda: (
            Query("t")
            .group_by("k")
            .agg(sum_("x").alias("s"))
            .having(count() > 10)
            .having(sum_("x") / count() < 3)
        ),
        "SELECT k, SUM(x) AS s FROM t GROUP BY k HAVING COUNT(*) > 10 AND SUM(x) / COUNT(*) < 3",
    ),
    (
        "ratio_of_aggregates",
        lambda: Query("t").agg((sum_("x") / count()).alias("m")),
        "SELECT SUM(x) / COUNT(*) AS m FROM t",
    ),
    (
        "arithmetic_over_aggregates",
        lambda: Query("t").group_by("k").agg(((sum_("x") - 1) * 2).alias("y"), -mean("x")),
        "SELECT k, (SUM(x) - 1) * 2 AS y, -AVG(x) FROM t GROUP BY k",
    ),
    (
        "filter",
        lambda: Query("t").agg(count().filter(col("x") > 0).alias("pos")),
        "SELECT COUNT(*) FILTER (WHERE x > 0) AS pos FROM t",
    ),
    (
        "filter_twice_ands",
        lambda: Query("t").agg(count().filter(col("x") > 0).filter(col("k") == "a")),
        "SELECT COUNT(*) FILTER (WHERE x > 0 AND k = 'a') FROM t",
    ),
    (
        "filter_ratio",
        lambda: Query("t").agg((count("x").filter(col("k") == "a") / count()).alias("share")),
        "SELECT COUNT(x) FILTER (WHERE k = 'a') / COUNT(*) AS share FROM t",
    ),
    (
        "case_in_aggregate",
        lambda: Query("t").agg(sum_(when(col("x") > 0, 1).otherwise(0))),
        "SELECT SUM(CASE WHEN x > 0 THEN 1 ELSE 0 END) FROM t",
    ),
    (
        "case_without_else",
        lambda: Query("t").agg(
            mean(when(col("k") == "a", col("x")).when(col("k") == "b", -col("x"))).alias("m")
        ),
        "SELECT AVG(CASE WHEN k = 'a' THEN x WHEN k = 'b' THEN -x END) AS m FROM t",
    ),
    (
        "aggregate_of_expression",
        lambda: Query("t").agg(sum_(col("x") * 2), mean(col("x").cast("DOUBLE"))),
        "SELECT SUM(x * 2), AVG(CAST(x AS DOUBLE)) FROM t",
    ),
    (
        "group_by_aliased_expression",
        lambda: Query("t").group_by(year("d").alias("y")).agg(count()),
        "SELECT YEAR(d) AS y, COUNT(*) FROM t GROUP BY YEAR(d)",
    ),
    (
        "group_by_plain_expression",
        lambda: Query("t").group_by(date_trunc("month", "d"), "k").agg(count()),
        "SELECT DATE_TRUNC('month', d), k, COUNT(*) FROM t GROUP BY DATE_TRUNC('month', d), k",
    ),
    (
        "group_by_case",
        lambda: (
            Query("t")
            .group_by(when(col("x") >= 10, "big").otherwise("small").alias("size"))
            .agg(count())
        ),
        (
            "SELECT CASE WHEN x >= 10 THEN 'big' ELSE 'small' END AS size, COUNT(*) FROM t "
            "GROUP BY CASE WHEN x >= 10 THEN 'big' ELSE 'small' END"
        ),
    ),
    (
        "inner_join",
        lambda: Query("sales").join("stores", on="store").group_by("region").agg(count()),
        "SELECT region, COUNT(*) FROM sales JOIN stores USING (store) GROUP BY region",
    ),
    (
        "left_join_two_columns",
        lambda: Query("t").join("p", on=["a", "b"], how="left").agg(sum_("x")),
        "SELECT SUM(x) FROM t LEFT JOIN p USING (a, b)",
    ),
    (
        "case_over_aggregates",
        lambda: (
            Query("t").group_by("k").agg(when(count() >= 10, sum_("x")).otherwise(None).alias("s"))
        ),
        "SELECT k, CASE WHEN COUNT(*) >= 10 THEN SUM(x) ELSE NULL END AS s FROM t GROUP BY k",
    ),
    (
        "min_max",
        lambda: Query("t").agg(min_("x"), max_("x")),
        "SELECT MIN(x), MAX(x) FROM t",
    ),
    (
        "everything",
        lambda: (
            Query("sales")
            .join("stores", on="store")
            .where(col("amount") > 0)
            .group_by(year("day").alias("y"), "region")
            .agg(count().alias("n"), (sum_("amount") / count()).alias("avg"))
            .having(count() >= 5)
            .order_by(desc("n"))
            .limit(10)
        ),
        (
            "SELECT YEAR(day) AS y, region, COUNT(*) AS n, SUM(amount) / COUNT(*) AS avg "
            "FROM sales JOIN stores USING (store) WHERE amount > 0 GROUP BY YEAR(day), region "
            "HAVING COUNT(*) >= 5 ORDER BY n DESC LIMIT 10"
        ),
    ),
]


def _parse_one(sql: str) -> exp.Expression:
    node = sqlglot.parse_one(sql, read="duckdb")
    assert isinstance(node, exp.Expression)
    return node


def _ids(pairs: list[tuple[str, Build, str]]) -> list[str]:
    return [p[0] for p in pairs]


def test_there_are_enough_pairs() -> None:
    assert len(PARSED_PAIRS) + len(NEW_PAIRS) >= 25
    assert len({p[0] for p in PARSED_PAIRS + NEW_PAIRS}) == len(PARSED_PAIRS + NEW_PAIRS)


@pytest.mark.parametrize(("name", "build", "sql"), PARSED_PAIRS, ids=_ids(PARSED_PAIRS))
def test_same_parsed_query_as_sql(name: str, build: Build, sql: str) -> None:
    q = build()
    ours, theirs = parse(q.to_sql()), parse(sql)
    assert ours.normalized == theirs.normalized  # the cache key's SQL part
    assert [o.name for o in ours.outputs] == [o.name for o in theirs.outputs]
    assert ours.group_by == theirs.group_by and ours.order_by == theirs.order_by
    assert (ours.limit, ours.offset) == (theirs.limit, theirs.offset)
    # The builder's own tree is the parser's tree (the lead may compile it directly).
    assert q.to_expression() == sqlglot.parse_one(sql, read="duckdb")
    assert normalize(q.to_expression()) == theirs.normalized


@pytest.mark.parametrize(("name", "build", "sql"), NEW_PAIRS, ids=_ids(NEW_PAIRS))
def test_same_tree_as_sql_for_new_constructs(name: str, build: Build, sql: str) -> None:
    q = build()
    typed, reparsed = _parse_one(sql), _parse_one(q.to_sql())
    assert normalize(q.to_expression()) == normalize(typed)
    assert normalize(reparsed) == normalize(typed)
    assert q.to_expression() == typed == reparsed


def test_cache_key_ignores_identifier_case_but_names_keep_it() -> None:
    ours = parse(Query("T").group_by("K").agg(sum_("X")).to_sql())
    theirs = parse("SELECT k, SUM(x) FROM t GROUP BY k")
    assert ours.normalized == theirs.normalized
    assert [o.name for o in ours.outputs] == ["K", "sum_X"]  # as SQL spelt that way would


def test_builder_example_renders_as_documented() -> None:
    q = Query("events").where(col("value") > 0).group_by("category").agg(count(), mean("value"))
    assert q.to_sql() == (
        "SELECT category, COUNT(*), AVG(value) FROM events WHERE value > 0 GROUP BY category"
    )
    assert isinstance(q.to_expression(), exp.Select)
    assert q.to_expression() is not q.to_expression()  # a fresh tree each time


def test_minimal_parentheses() -> None:
    a, b, c = col("a"), col("b"), col("c")
    cases: list[tuple[Expr, str]] = [
        ((a + b) * c, "(a + b) * c"),
        (a + b * c, "a + b * c"),
        (a - (b - c), "a - (b - c)"),
        ((a - b) - c, "a - b - c"),
        (a / (b * c), "a / (b * c)"),
        (-(a + b), "-(a + b)"),
        (-a * b, "-a * b"),
        (a - -1, "a - -1"),
        (-lit(-1), "- -1"),
        (~(a == 1), "NOT a = 1"),
        (~((a > 1) | (b > 1)), "NOT (a > 1 OR b > 1)"),
        ((~a) == b, "(NOT a) = b"),
        ((a == b) > c, "(a = b) > c"),
        ((a > b) == c, "(a > b) = c"),  # duckdb refuses chained comparisons
        ((a == b) != (b < c), "(a = b) <> (b < c)"),
        ((a | b) & c, "(a OR b) AND c"),
        (a | (b & c), "a OR b AND c"),
        ((a + 1).between(b - 1, c * 2), "a + 1 BETWEEN b - 1 AND c * 2"),
        ((a > 1).is_null(), "(a > 1) IS NULL"),
        ((a + b).isin([1, b + c]), "a + b IN (1, b + c)"),
    ]
    for e, text in cases:
        assert e.sql() == text
        assert sqlglot.parse_one(text, read="duckdb") == e.to_sqlglot()


# -- property: whatever the builder renders parses back to the builder's own tree ---------

_leaves = st.one_of(
    st.sampled_from(["a", "b", "c", "My Col"]).map(col),
    st.integers(-(10**6), 10**6).map(lit),
    st.floats(allow_nan=False, allow_infinity=False, width=64).map(lit),
    st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=5).map(lit),
    st.sampled_from([True, False, None]).map(lit),
    st.fractions(max_denominator=1).map(lit),
)


def _extend(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    binary = st.sampled_from(
        [
            lambda x, y: x + y,
            lambda x, y: x - y,
            lambda x, y: x * y,
            lambda x, y: x / y,
            lambda x, y: x % y,
            lambda x, y: x == y,
            lambda x, y: x != y,
            lambda x, y: x < y,
            lambda x, y: x <= y,
            lambda x, y: x > y,
            lambda x, y: x >= y,
            lambda x, y: x & y,
            lambda x, y: x | y,
            lambda x, y: x.isin([y, x]),
            lambda x, y: coalesce(x, y),
            lambda x, y: when(x, y).otherwise(x),
        ]
    )
    unary = st.sampled_from(
        [
            lambda x: -x,
            lambda x: ~x,
            lambda x: x.is_null(),
            lambda x: x.is_not_null(),
            lambda x: x.like("a%"),
            lambda x: x.cast("DOUBLE"),
            lambda x: abs_(x),
            lambda x: lower(substr(x, 2, 3)),
            lambda x: date_trunc("week", x),
            lambda x: round_(x, 2),
            lambda x: year(x),
            lambda x: x if x.is_aggregate else sum_(x),
            lambda x: x if x.is_aggregate else count(x).filter(x > 0),
        ]
    )
    return st.one_of(
        st.tuples(binary, children, children).map(lambda t: t[0](t[1], t[2])),
        st.tuples(unary, children).map(lambda t: t[0](t[1])),
        st.tuples(children, children, children).map(lambda t: t[0].between(t[1], t[2])),
    )


_exprs = st.recursive(_leaves, _extend, max_leaves=12)


@settings(max_examples=400, deadline=None)
@given(_exprs)
def test_rendering_parses_back_to_the_same_tree(e: Expr) -> None:
    # Covers both failure modes of parenthesisation: a missing pair changes the tree's
    # shape (wrong semantics); a pair the parser does not keep changes it too.
    text = e.sql()
    assert sqlglot.parse_one(text, read="duckdb") == e.to_sqlglot(), text


def _fully_parenthesised(node: exp.Expression) -> exp.Expression:
    """The reference rendering: every operator operand in parentheses (no precedence needed)."""
    atoms = (exp.Column, exp.Literal, exp.Boolean, exp.Null, exp.Paren, exp.Identifier)
    node = node.copy()
    for n in list(node.walk()):
        for key, value in list(n.args.items()):
            if isinstance(value, exp.Expression) and not isinstance(value, atoms):
                n.set(key, exp.Paren(this=value))
    return node


_boolean_and_numeric = st.recursive(
    st.one_of(
        st.sampled_from(["a", "b", "c"]).map(col),
        st.integers(-5, 5).map(lit),
        st.sampled_from([None, True, False]).map(lit),
    ),
    lambda children: st.one_of(
        st.tuples(
            st.sampled_from(
                [
                    lambda x, y: x + y,
                    lambda x, y: x - y,
                    lambda x, y: x * y,
                    lambda x, y: x == y,
                    lambda x, y: x != y,
                    lambda x, y: x < y,
                    lambda x, y: x >= y,
                    lambda x, y: x & y,
                    lambda x, y: x | y,
                    lambda x, y: x.isin([y]),
                    lambda x, y: x.between(y, x),
                ]
            ),
            children,
            children,
        ).map(lambda t: t[0](t[1], t[2])),
        st.tuples(
            st.sampled_from(
                [lambda x: -x, lambda x: ~x, lambda x: x.is_null(), lambda x: x.is_not_null()]
            ),
            children,
        ).map(lambda t: t[0](t[1])),
    ),
    max_leaves=8,
)


@pytest.fixture(scope="module")
def tiny_duckdb() -> Iterator[duckdb.DuckDBPyConnection]:
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE t AS SELECT * FROM (VALUES (1, -2, 3), (0, 0, NULL), (2, 2, -1), "
        "(NULL, 1, 1)) v(a, b, c)"
    )
    yield con
    con.close()


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(e=_boolean_and_numeric)
def test_duckdb_evaluates_the_rendering_as_built(
    tiny_duckdb: duckdb.DuckDBPyConnection, e: Expr
) -> None:
    # The engine, not only sqlglot, reads the minimal parentheses as the builder meant them:
    # same rows as the fully parenthesised rendering (duckdb refuses e.g. a = b < c).
    reference = _fully_parenthesised(e.to_sqlglot()).sql(dialect="duckdb")
    try:
        expected = tiny_duckdb.execute(f"SELECT {reference} FROM t").fetchall()
    except duckdb.Error:
        return  # ill-typed (e.g. a boolean plus an integer): nothing to compare
    assert tiny_duckdb.execute(f"SELECT {e.sql()} FROM t").fetchall() == expected


def test_dropping_parentheses_is_caught_by_the_roundtrip() -> None:
    # Negative control for the property above: the same tree without the Paren the builder
    # inserts renders text that parses to a different tree.
    built = ((col("a") + col("b")) * col("c")).to_sqlglot()
    broken = built.transform(lambda n: n.this if isinstance(n, exp.Paren) else n)
    assert sqlglot.parse_one(broken.sql(dialect="duckdb"), read="duckdb") != broken
    assert sqlglot.parse_one(built.sql(dialect="duckdb"), read="duckdb") == built


# -- immutability ---------------------------------------------------------------------------


def test_queries_and_expressions_are_immutable() -> None:
    base = Query("t").where(col("x") > 0)
    grouped = base.group_by("k")
    one = grouped.agg(count())
    two = grouped.agg(sum_("x"))
    assert one.to_sql() == "SELECT k, COUNT(*) FROM t WHERE x > 0 GROUP BY k"
    assert two.to_sql() == "SELECT k, SUM(x) FROM t WHERE x > 0 GROUP BY k"
    assert one.limit(3).to_sql().endswith("LIMIT 3") and not one.to_sql().endswith("LIMIT 3")
    assert base.where(col("x") < 9).agg(count()).to_sql().endswith("WHERE x > 0 AND x < 9")
    assert base.agg(count()).to_sql() == "SELECT COUNT(*) FROM t WHERE x > 0"
    assert one.limit(3).limit(4).to_sql().endswith("LIMIT 4")  # limit replaces
    with pytest.raises(InvalidParameter, match="immutable"):
        one._limit = 5
    x = col("x")
    y = x + 1
    _ = y * 2, y.alias("z"), sum_(y), y.isin([1])
    assert x.sql() == "x" and y.sql() == "x + 1"
    tree = one.to_expression()
    tree.set("limit", exp.Limit(expression=exp.Literal.number(1)))
    assert "LIMIT" not in one.to_sql()  # the returned tree is a copy


def test_agg_accumulates_and_puts_keys_first() -> None:
    q = Query("t").group_by("k").agg(count()).group_by("j").agg(sum_("x"))
    assert q.to_sql() == "SELECT k, j, COUNT(*), SUM(x) FROM t GROUP BY k, j"
    assert Query("t").group_by("k").agg().to_sql() == "SELECT k FROM t GROUP BY k"


# -- validation -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Query("t").agg(count()).limit(-1), "non-negative integer"),
        (lambda: Query("t").agg(count()).limit("5"), "not a str"),  # type: ignore[arg-type]
        (lambda: Query("t").agg(count()).limit(True), "not a bool"),
        (lambda: Query("t").agg(count()).offset(1.5), "not a float"),  # type: ignore[arg-type]
        (lambda: Query("t").where(count() > 1), "use .having"),
        (lambda: Query("t").where("x > 0"), "not SQL text"),  # type: ignore[arg-type]
        (lambda: Query("t").where(True), "not a bool"),  # type: ignore[arg-type]
        (lambda: Query("t").where((col("x") > 0).alias("c")), "aliased"),
        (lambda: Query("t").having("COUNT(*) > 1"), "expression"),  # type: ignore[arg-type]
        (lambda: col("x") + object(), "a object cannot be used"),  # type: ignore[operator]
        (lambda: col("x") + [1], "a list cannot be used"),  # type: ignore[operator]  # noqa: RUF005
        (lambda: col("x") & 1, "combines conditions"),  # type: ignore[operator]
        (lambda: 1 | col("x"), "combines conditions"),  # type: ignore[operator]
        (lambda: bool(col("x") > 0), "no Python truth value"),
        (lambda: 0 < col("x") < 5, "no Python truth value"),
        (lambda: (col("x") > 0) and (col("y") > 0), "no Python truth value"),
        (lambda: col("x") == None, "is_null"),  # noqa: E711
        (lambda: col("x") != None, "is_not_null"),  # noqa: E711
        (lambda: sum_(count()), "do not nest"),
        (lambda: sum_(3), "column name or an expression"),  # type: ignore[arg-type]
        (lambda: count().filter(count() > 1), "cannot contain an aggregate"),
        (lambda: count().filter("x > 0"), "not SQL text"),  # type: ignore[arg-type]
        (lambda: Query("t").where(when(count() > 1, 1).otherwise(0) == 1), "use .having"),
        (lambda: sum_(when(count() > 1, 1).otherwise(0)), "do not nest"),
        (lambda: when("x > 0", 1), "condition"),  # type: ignore[arg-type]
        (lambda: Query("t").group_by(count()), "cannot group by an aggregate"),
        (lambda: Query("t").group_by(), "at least one key"),
        (lambda: Query("t").group_by("k").agg("k", count()).to_sql(), "already selects"),
        (lambda: Query("t").agg(count()).select(count()), "not both"),
        (lambda: Query("t").to_sql(), "no outputs"),
        (lambda: Query("t").agg().to_sql(), "no outputs"),
        (lambda: Query("t").select(), "at least one output"),
        (
            lambda: Query("t").agg(count().alias("n"), sum_("x").alias("N")).to_sql(),
            "used twice",
        ),
        (lambda: Query("t").agg(count()).order_by(0), "1-based"),
        (lambda: Query("t").agg(count()).order_by(), "at least one"),
        (lambda: Query("t").agg(count()).order_by("n", descending="yes"), "True or False"),  # type: ignore[arg-type]
        (lambda: Query("t").agg(count()).order_by(1.5), "column name or an expression"),  # type: ignore[arg-type]
        (lambda: Query("t").join("p", on=[]), "non-empty list"),
        (lambda: Query("t").join("p", on=["a", "A"]), "twice"),
        (lambda: Query("t").join("p", on="a", how="right"), "how='inner'"),  # type: ignore[arg-type]
        (lambda: Query("t").join(3, on="a"), "non-empty string"),  # type: ignore[arg-type]
        (lambda: Query(""), "non-empty string"),
        (lambda: Query("t").agg(count()).to_sql(dialect="nope"), "dialect"),
        (lambda: (col("x") + 1).alias("y") * 2, "apply .alias"),
        (lambda: col("x").alias(""), "non-empty string"),
        (lambda: col(3), "non-empty string"),  # type: ignore[arg-type]
        (lambda: col("x").cast("NOT A TYPE AT ALL("), "not a SQL type"),
        (lambda: col("x").cast(3), "type name"),  # type: ignore[arg-type]
        (lambda: col("x").isin([]), "at least one value"),
        (lambda: col("x").isin("ab"), "list of values"),
        (lambda: col("x").like(3), "string pattern"),  # type: ignore[arg-type]
        (lambda: lit(float("nan")), "NaN"),
        (lambda: lit(float("inf")), "infinite"),
        (lambda: lit(Fraction(1, 3)), "no exact decimal"),
        (lambda: lit(col("x")), "already an expression"),  # type: ignore[arg-type]
        (lambda: lit(object()), "cannot be used"),  # type: ignore[arg-type]
        (lambda: lit(dt.datetime(2020, 1, 1, tzinfo=dt.UTC)), "timezone"),
        (lambda: quantile("x", 1.5), "between 0 and 1"),
        (lambda: quantile("x", "0.5"), "not a str"),  # type: ignore[arg-type]
        (lambda: quantile("x", float("nan")), "between 0 and 1"),
        (lambda: variance("x", population=1), "True or False"),  # type: ignore[arg-type]
        (lambda: date_trunc("fortnight", "d"), "unit among"),
        (lambda: round_("x", 1.5), "integer"),  # type: ignore[arg-type]
        (lambda: substr("x", "1"), "integer start"),  # type: ignore[arg-type]
        (lambda: substr("x", 1, -1), "non-negative length"),
        (lambda: coalesce("x"), "at least two"),
        (lambda: Expr("x"), "sqlglot node"),  # type: ignore[arg-type]
    ],
)
def test_misuse_raises_invalid_parameter(make: Callable[[], object], message: str) -> None:
    with pytest.raises(InvalidParameter, match=message):
        make()


def test_literals_render_exactly() -> None:
    assert lit(Fraction(-3, 8)).sql() == "-0.375"
    assert lit(10**30).sql() == "1" + "0" * 30
    assert lit(1e-10).sql() == "1e-10"
    assert lit(dt.date(2020, 2, 29)).sql() == "CAST('2020-02-29' AS DATE)"
    from decimal import Decimal

    assert lit(Decimal("-1.50")).sql() == "-1.50"
    assert lit(False).sql() == "FALSE"


# -- end to end: same answer, same charge, same cache entry ------------------------------------


def _frame(n: int = 300) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "uid": [f"u{i % 60}" for i in range(n)],
            "k": [["a", "b", "c"][i % 3] for i in range(n)],
            "x": [float(i % 17) for i in range(n)],
        }
    )


def _session(path: Path) -> Session:
    # Imported here: the session pulls in the whole compiler, which the rest does not need.
    from deniable.curator.session import Session

    with pytest.warns(PrivacyWarning):
        s = Session(budget=Epsilon(epsilon=10), ledger=path, source=SeededRandom(11))
    s.add_table(
        "t",
        _frame(),
        privacy_unit="uid",
        bounds={"x": (0, 20)},
        public_keys={"k": ["a", "b", "c"]},
        max_groups=1,
        max_rows=1,
    )
    return s


SESSION_PAIRS: list[tuple[str, Build, str]] = [
    (
        "grouped",
        lambda: (
            Query("t")
            .where(col("x") > 2)
            .group_by("k")
            .agg(count().alias("n"), mean("x"))
            .order_by("k")
        ),
        "select k, count(*) as n, avg(x)\nfrom T\nwhere X>2 group by k order by k",
    ),
    (
        "quantiles",
        lambda: Query("t").agg(median("x"), quantile("x", 0.9).alias("p90"), sum_("x")),
        "SELECT median(x),  quantile(x, 0.9) AS p90,\n  sum(x) FROM t",
    ),
]


@pytest.mark.parametrize(("name", "build", "sql"), SESSION_PAIRS, ids=_ids(SESSION_PAIRS))
def test_session_answers_builder_and_sql_alike(
    tmp_path: Path, name: str, build: Build, sql: str
) -> None:
    text = build().to_sql()
    assert text != sql  # not the same text: only the normalised form agrees
    s1, s2 = _session(tmp_path / "one.db"), _session(tmp_path / "two.db")
    try:
        a = s1.sql(text, epsilon=1)
        b = s2.sql(sql, epsilon=1)
        assert not a.cached and not b.cached
        assert list(a.frame.columns) == list(b.frame.columns)
        pd.testing.assert_frame_equal(a.frame, b.frame)  # same seed, same plan: same noise
        assert a.loss == b.loss == Epsilon(epsilon=1)
        # The other spelling is served from the cache at no cost: the same cache key.
        spent = s1.budget.spent
        c = s1.sql(sql, epsilon=1)
        d = s2.sql(text, epsilon=1)
        assert c.cached and d.cached
        assert c.loss == d.loss == Epsilon(epsilon=0)
        assert s1.budget.spent == spent == s2.budget.spent == Epsilon(epsilon=1)
        pd.testing.assert_frame_equal(c.frame, a.frame)
        # Negative control: a genuinely different query is not served from the cache.
        e = s1.sql(build().limit(1).to_sql(), epsilon=1)
        assert not e.cached and s1.budget.spent == Epsilon(epsilon=2)
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PrivacyWarning)
            s1.close()
            s2.close()


def test_session_table_builds_the_same_program_as_sql(tmp_path: Path) -> None:
    """``session.table(...)``: the same QueryProgram (cache key, events, loss) as the SQL."""
    from deniable.accounting.loss import Epsilon
    from deniable.curator.session import Session

    frame = pd.DataFrame(
        {
            "u": [1, 1, 2, 3, 3, 3],
            "category": ["a", "b", "a", "b", "b", "a"],
            "value": [1.0, 2, 3, 4, 5, 6],
        }
    )
    s = Session(budget=Epsilon(epsilon=2), ledger=tmp_path / "l.db")
    s.add_table(
        "events",
        frame,
        privacy_unit="u",
        bounds={"value": (0, 10)},
        public_keys={"category": ["a", "b"]},
        max_rows=2,
        max_groups=1,
    )
    q = s.table("events").where(col("value") > 0).group_by("category").agg(count(), mean("value"))
    text = "SELECT category, COUNT(*), AVG(value) FROM events WHERE value > 0 GROUP BY category"
    built, typed = q.compile(epsilon=0.5), s.compile(text, epsilon=0.5)
    assert built.cache_key == typed.cache_key
    assert built.events == typed.events and built.loss == typed.loss
    first = q.run(epsilon=0.5)
    again = s.sql(text, epsilon=0.5)
    assert not first.cached and again.cached and again.loss == Epsilon(epsilon=0)
    assert s.sql(q, epsilon=0.5).cached  # a Query passed to sql() is the same question
    with pytest.raises(InvalidParameter, match="not bound to a session"):
        Query("events").agg(count()).run(epsilon=0.5)
    s.close()
