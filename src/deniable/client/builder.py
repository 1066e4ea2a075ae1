"""Builder queries sent to the server in the API's JSON form.

The HTTP API takes a query either as SQL text or in the builder's JSON form (a closed
subset: one table, ANDed filters ``column op value``, group-key columns, aggregates of
columns, ORDER BY output names, LIMIT), which the server turns back into
:mod:`deniable.query.builder` calls. A builder query inside that subset is sent as JSON;
any other (HAVING, joins, row expressions, arithmetic over aggregates…) is sent as the SQL
the builder renders. Either way the server compiles the same SQL, so the plan, the charge
and the replay of a stored answer are the same.

A query is sent as JSON only after checking that the server's translation rebuilds exactly
the SQL the builder wrote (:func:`builder_json`); otherwise its SQL is sent. Building and
translating a query reads no data and has no privacy loss.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from deniable.errors import DeniableError
from deniable.query import builder as b

__all__ = ["builder_json", "query_from_json"]

Scalar = int | float | str | bool | None

_COMPARISONS: Mapping[type[exp.Expression], str] = {
    exp.EQ: "=",
    exp.NEQ: "!=",
    exp.LT: "<",
    exp.LTE: "<=",
    exp.GT: ">",
    exp.GTE: ">=",
}

_AGGREGATES: Mapping[type[exp.Expression], str] = {
    exp.Sum: "sum",
    exp.Avg: "mean",
    exp.Variance: "variance",
    exp.Stddev: "stddev",
    exp.Median: "median",
}


class _Outside(Exception):
    """The query is outside the JSON form's subset (it is sent as SQL)."""


def builder_json(query: b.Query | str) -> dict[str, Any] | None:
    """The API's JSON form of a builder query, or None when it has none.

    None means: send the query's SQL (:meth:`~deniable.query.builder.Query.to_sql`). The
    JSON form is returned only when the server's translation of it
    (:func:`query_from_json`, the same calls as ``BuilderQuery.to_query``) renders exactly
    the query's SQL. No data is read and nothing is charged.

    Args:
        query: a builder query, or the SQL text a builder query rendered.

    Examples:
        >>> from deniable.query.builder import Query, col, count
        >>> q = Query("t").where(col("x") > 0).group_by("k").agg(count().alias("n"))
        >>> builder_json(q)
        {'table': 't', 'where': [{'column': 'x', 'op': '>', 'value': 0}], 'group_by': ['k'], \
'aggregates': [{'function': 'count', 'alias': 'n'}]}
        >>> builder_json(Query("t").agg((count() + 1).alias("m"))) is None
        True
    """
    try:
        text = query.to_sql() if isinstance(query, b.Query) else query
        spec = _spec(sqlglot.parse_one(text, dialect=b.DIALECT))
        if query_from_json(spec).to_sql() != text:
            return None
    except (_Outside, SqlglotError, DeniableError, ValueError, TypeError):
        return None
    return spec


def query_from_json(spec: Mapping[str, Any]) -> b.Query:
    """The builder query the server makes of a JSON form (``BuilderQuery.to_query``).

    Raises:
        InvalidParameter: a malformed part, as the server would refuse it.
    """
    q = b.Query(spec["table"])
    for f in spec.get("where", ()):
        q = q.where(_condition(f))
    if spec.get("group_by"):
        q = q.group_by(*spec["group_by"])
    q = q.agg(*(_aggregate(a) for a in spec["aggregates"]))
    for o in spec.get("order_by", ()):
        q = q.order_by(b.desc(o["name"]) if o.get("descending") else b.asc(o["name"]))
    if spec.get("limit") is not None:
        q = q.limit(spec["limit"])
    return q


def _condition(f: Mapping[str, Any]) -> b.Expr:
    c = b.col(f["column"])
    op = f["op"]
    if op in ("is_null", "is_not_null"):
        return c.is_null() if op == "is_null" else c.is_not_null()
    if op in ("in", "not_in"):
        cond = c.isin(f["value"])
        return ~cond if op == "not_in" else cond
    ops: Mapping[str, Callable[[Any], b.Expr]] = {
        "=": c.__eq__,
        "!=": c.__ne__,
        "<": c.__lt__,
        "<=": c.__le__,
        ">": c.__gt__,
        ">=": c.__ge__,
    }
    return ops[op](f["value"])


def _aggregate(a: Mapping[str, Any]) -> b.Expr:
    column: str = a.get("column") or ""
    function = a["function"]
    agg: b.Expr
    if function == "count":
        agg = b.count() if not column else b.count(column)
    elif function == "quantile":
        agg = b.quantile(column, a["q"])
    else:
        fn: Mapping[str, Callable[[str], b.Aggregate]] = {
            "count_distinct": b.count_distinct,
            "sum": b.sum_,
            "mean": b.mean,
            "variance": b.variance,
            "stddev": b.stddev,
            "median": b.median,
        }
        agg = fn[function](column)
    alias = a.get("alias")
    return agg if alias is None else agg.alias(alias)


# -- reading the SQL tree ------------------------------------------------------------------


def _spec(tree: object) -> dict[str, Any]:
    if not isinstance(tree, exp.Select):
        raise _Outside
    allowed = {"expressions", "from_", "from", "where", "group", "order", "limit"}
    if any(v for k, v in tree.args.items() if k not in allowed):
        raise _Outside
    source = tree.args.get("from_") or tree.args.get("from")
    if not isinstance(source, exp.From) or not isinstance(source.this, exp.Table):
        raise _Outside
    table = source.this
    if table.args.get("db") or table.args.get("catalog") or table.args.get("alias"):
        raise _Outside
    spec: dict[str, Any] = {"table": _name(table.this)}
    where = tree.args.get("where")
    if where is not None:
        spec["where"] = [_filter(c) for c in _conjuncts(where.this)]
    group = tree.args.get("group")
    keys = [_column(k) for k in group.expressions] if group is not None else []
    if keys:
        spec["group_by"] = keys
    outputs = list(tree.expressions)
    if [_column_or_none(o) for o in outputs[: len(keys)]] != keys:
        raise _Outside
    spec["aggregates"] = [_aggregate_spec(o) for o in outputs[len(keys) :]]
    order = tree.args.get("order")
    if order is not None:
        spec["order_by"] = [_order(o) for o in order.expressions]
    limit = tree.args.get("limit")
    if limit is not None:
        value = _literal(limit.expression)
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Outside
        spec["limit"] = value
    return spec


def _name(node: object) -> str:
    if not isinstance(node, exp.Identifier) or node.quoted:
        raise _Outside
    return str(node.this)


def _column(node: exp.Expression) -> str:
    if not isinstance(node, exp.Column) or node.args.get("table"):
        raise _Outside
    return _name(node.this)


def _column_or_none(node: exp.Expression) -> str | None:
    try:
        return _column(node)
    except _Outside:
        return None


def _conjuncts(node: exp.Expression) -> list[exp.Expression]:
    if isinstance(node, exp.And):
        return _conjuncts(node.this) + _conjuncts(node.expression)
    return [node]


def _filter(node: exp.Expression) -> dict[str, Any]:
    negated = isinstance(node, exp.Not)
    inner = node.this if negated else node
    if isinstance(inner, exp.Is) and isinstance(inner.expression, exp.Null):
        return {"column": _column(inner.this), "op": "is_not_null" if negated else "is_null"}
    if isinstance(inner, exp.In) and not inner.args.get("query"):
        values = [_literal(v) for v in inner.expressions]
        if not values:
            raise _Outside
        return {"column": _column(inner.this), "op": "not_in" if negated else "in", "value": values}
    op = _COMPARISONS.get(type(node))
    if op is None:
        raise _Outside
    return {"column": _column(node.this), "op": op, "value": _literal(node.expression)}


def _literal(node: exp.Expression) -> Scalar:
    if isinstance(node, exp.Neg):
        value = _literal(node.this)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _Outside
        return -value
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Null):
        return None
    if not isinstance(node, exp.Literal):
        raise _Outside
    if node.is_string:
        return str(node.this)
    text = str(node.this)
    try:
        return int(text)
    except ValueError:
        return float(text)


def _aggregate_spec(node: exp.Expression) -> dict[str, Any]:
    alias = None
    if isinstance(node, exp.Alias):
        alias = _name(node.args.get("alias"))
        node = node.this
    spec: dict[str, Any]
    if isinstance(node, exp.Count):
        arg = node.this
        if isinstance(arg, exp.Star):
            spec = {"function": "count"}
        elif isinstance(arg, exp.Distinct):
            if len(arg.expressions) != 1:
                raise _Outside
            spec = {"function": "count_distinct", "column": _column(arg.expressions[0])}
        else:
            spec = {"function": "count", "column": _column(arg)}
    elif isinstance(node, exp.Quantile):
        q = _literal(node.args["quantile"])
        if isinstance(q, bool) or not isinstance(q, int | float):
            raise _Outside
        spec = {"function": "quantile", "column": _column(node.this), "q": float(q)}
    else:
        function = _AGGREGATES.get(type(node))
        if function is None or len(node.args) != 1:
            raise _Outside
        spec = {"function": function, "column": _column(node.this)}
    if alias is not None:
        spec["alias"] = alias
    return spec


def _order(node: exp.Expression) -> dict[str, Any]:
    if not isinstance(node, exp.Ordered):
        raise _Outside
    spec: dict[str, Any] = {"name": _column(node.this)}
    if node.args.get("desc"):
        spec["descending"] = True
    return spec
