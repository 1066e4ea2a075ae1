"""A small SQL front over a registered graph (parsed with sqlglot, never executed as given).

``Session.sql`` sends a query here when its FROM names a graph. Five forms are understood
(names case-insensitive; ``g`` is the graph, ``nodes`` its node table's name; output aliases
are kept):

=====================================================================  =======================
``SELECT COUNT(*) FROM g``                                             edge count
``SELECT degree, COUNT(*) FROM degrees(g) GROUP BY degree``            degree histogram 1..D
``SELECT COUNT(*) FROM degrees(g) WHERE degree >= d``                  nodes with degree ≥ d
``SELECT COUNT(*) FROM triangles(g)``                                  triangle count
``SELECT n.attr, COUNT(*) FROM g e JOIN nodes n ON n.key IN (e.a, e.b)  edge ends per attribute
GROUP BY n.attr``  (or ``ON e.a = n.key OR e.b = n.key``)
=====================================================================  =======================

Anything else is refused with :class:`~deniable.errors.UnsafeQuery` naming the construct
and what to write instead. The privacy unit spans the two end columns: at node level a unit
is "either end", so a node's edges are all its rows under ``a`` *or* ``b``.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from deniable.errors import InvalidParameter, SQLError, UnsafeQuery
from deniable.graph.graph import Graph, GraphInfo
from deniable.graph.queries import GraphQuery, Kind
from deniable.query.answer import Answer

FORMS = (
    "SELECT COUNT(*) FROM g; "
    "SELECT degree, COUNT(*) FROM degrees(g) GROUP BY degree; "
    "SELECT COUNT(*) FROM degrees(g) WHERE degree >= d; "
    "SELECT COUNT(*) FROM triangles(g); "
    "SELECT n.attr, COUNT(*) FROM g e JOIN nodes n ON n.key IN (e.a, e.b) GROUP BY n.attr"
)
"""The forms understood, for refusal messages."""

_FUNCTIONS = ("degrees", "triangles")


def _function_name(node: exp.Func) -> str | None:
    if isinstance(node, exp.Anonymous):
        return str(node.this).lower()
    if isinstance(node, exp.Func):
        return str(node.sql_name()).lower()
    return None


def _from_target(select: exp.Select) -> tuple[str | None, str | None]:
    """``(graph name, function)`` named by the FROM clause (function None: the edge table)."""
    source = select.args.get("from_") or select.args.get("from")
    if not isinstance(source, exp.From) or not isinstance(source.this, exp.Table):
        return None, None
    table = source.this
    inner = table.this
    if isinstance(inner, exp.Identifier):
        return (None if table.args.get("db") else str(inner.this)), None
    if isinstance(inner, exp.Func):
        args = [a for a in inner.args.values() if isinstance(a, exp.Expression)]
        args += [a for v in inner.args.values() if isinstance(v, list) for a in v]
        cols = [a for a in args if isinstance(a, exp.Column)]
        if len(cols) == 1 and not cols[0].table:
            return cols[0].name, _function_name(inner)
    return None, None


def graph_of(query: object, graphs: Mapping[str, Graph]) -> Graph | None:
    """The graph a query's FROM names, or None (the query is not a graph query)."""
    if not isinstance(query, str) or not graphs:
        return None
    try:
        tree = sqlglot.parse_one(query, read="duckdb")
    except (ParseError, ValueError):
        return None
    if not isinstance(tree, exp.Select):
        return None
    name, _ = _from_target(tree)
    if name is None:
        return None
    with_ = tree.args.get("with") or tree.args.get("with_")
    if with_ is not None and any(c.alias.lower() == name.lower() for c in with_.expressions):
        return None  # the name is the query's own WITH table, not the graph
    by_lower = {g.lower(): graph for g, graph in graphs.items()}
    return by_lower.get(name.lower())


def _refuse(what: str) -> UnsafeQuery:
    return UnsafeQuery(f"{what}; graph queries take one of these forms: {FORMS}")


def _is_count_star(e: exp.Expression) -> bool:
    inner = e.this if isinstance(e, exp.Alias) else e
    return isinstance(inner, exp.Count) and isinstance(inner.this, exp.Star)


def _alias_or(e: exp.Expression, default: str) -> str:
    return e.alias if isinstance(e, exp.Alias) and e.alias else default


def parse(query: str, graph: Graph) -> GraphQuery:
    """The :class:`GraphQuery` of a SQL text over ``graph``.

    Raises:
        SQLError: the text does not parse.
        UnsafeQuery: a construct outside the forms above (the message says what to write).
        InvalidParameter: two output columns would have one name.
    """
    parsed = _parse(query, graph)
    v = parsed.value_name
    taken = {v.lower(), f"{v}_low".lower(), f"{v}_high".lower()}
    if parsed.key_name is not None and parsed.key_name.lower() in taken:
        raise InvalidParameter(
            f"the output column {parsed.key_name!r} would collide with {v!r} or its interval "
            f"columns ({v}_low, {v}_high): rename one with AS"
        )
    return parsed


def _parse(query: str, graph: Graph) -> GraphQuery:
    try:
        trees = sqlglot.parse(query, read="duckdb")
    except ParseError as e:
        first = e.errors[0] if e.errors else {}
        raise SQLError(
            "the graph query does not parse", line=first.get("line"), column=first.get("col")
        ) from None
    if len(trees) != 1 or not isinstance(trees[0], exp.Select):
        raise _refuse("one SELECT statement is expected")
    tree = trees[0]
    for clause, label in (
        ("having", "HAVING"),
        ("order", "ORDER BY"),
        ("limit", "LIMIT"),
        ("offset", "OFFSET"),
        ("with", "WITH"),
        ("with_", "WITH"),
        ("distinct", "DISTINCT"),
        ("qualify", "QUALIFY"),
    ):
        if tree.args.get(clause):
            raise _refuse(f"{label} is not supported on a graph")
    _, function = _from_target(tree)
    if function is not None and function not in _FUNCTIONS:
        raise _refuse(f"{function}(…) is not a graph function (use degrees(g) or triangles(g))")
    outputs = list(tree.expressions)
    joins = tree.args.get("joins") or []
    group = tree.args.get("group")
    where = tree.args.get("where")
    keys = list(group.expressions) if group is not None else []
    counts = [o for o in outputs if _is_count_star(o)]
    if len(counts) != 1:
        raise _refuse(
            "a graph query releases exactly one COUNT(*) (no SUM, AVG, or raw columns such "
            "as edge ends, which would release rows)"
        )
    count_name = _alias_or(counts[0], "n")
    others = [o for o in outputs if not _is_count_star(o)]
    if function == "triangles":
        if others or keys or where is not None or joins:
            raise _refuse("triangles(g) takes only SELECT COUNT(*)")
        return GraphQuery(Kind.TRIANGLES, value_name=count_name)
    if function == "degrees":
        if joins:
            raise _refuse("degrees(g) cannot be joined")
        if where is not None:
            if others or keys:
                raise _refuse("with WHERE degree >= d, select only COUNT(*) (no GROUP BY)")
            return GraphQuery(
                Kind.DEGREE_AT_LEAST, threshold=_threshold(where.this), value_name=count_name
            )
        if len(others) != 1 or len(keys) != 1 or not all(_is_degree(e) for e in (*others, *keys)):
            raise _refuse(
                "a degree histogram is SELECT degree, COUNT(*) FROM degrees(g) GROUP BY degree"
            )
        return GraphQuery(
            Kind.DEGREE_HISTOGRAM,
            value_name=count_name,
            key_name=_alias_or(others[0], "degree"),
        )
    if where is not None:
        raise _refuse(
            "WHERE on a graph's edges is not supported (a filter on edges or ends would need "
            "its own sensitivity analysis)"
        )
    if not joins:
        if others or keys:
            raise _refuse(
                "GROUP BY on the edge table is not supported: for edges per node attribute "
                "join the node table on either end"
            )
        return GraphQuery(Kind.EDGE_COUNT, value_name=count_name)
    return _edge_ends(tree, graph, joins, others, keys, count_name)


def _is_degree(e: exp.Expression) -> bool:
    inner = e.this if isinstance(e, exp.Alias) else e
    return isinstance(inner, exp.Column) and inner.name.lower() == "degree"


def _threshold(cond: exp.Expression) -> int:
    if (
        isinstance(cond, exp.GTE)
        and isinstance(cond.this, exp.Column)
        and cond.this.name.lower() == "degree"
        and isinstance(cond.expression, exp.Literal)
        and not cond.expression.is_string
    ):
        value = Fraction(cond.expression.this)
        if value.denominator == 1 and value >= 1:
            return int(value)
    raise _refuse("the only filter on degrees(g) is WHERE degree >= d, d a positive integer")


def _edge_ends(
    tree: exp.Select,
    graph: Graph,
    joins: list[exp.Join],
    others: list[exp.Expression],
    keys: list[exp.Expression],
    count_name: str,
) -> GraphQuery:
    info = graph.info
    nodes_name = info.nodes_name
    if len(joins) != 1 or nodes_name is None:
        raise _refuse(
            "join exactly one table, the graph's node table"
            + ("" if nodes_name is None else f" {nodes_name!r}")
        )
    join = joins[0]
    if join.args.get("kind") or join.args.get("side") or join.args.get("method"):
        raise _refuse("use a plain JOIN with the node table")
    target = join.this
    if not isinstance(target, exp.Table) or target.name.lower() != nodes_name.lower():
        raise _refuse(f"the only table a graph joins is its node table {nodes_name!r}")
    node_alias = target.alias_or_name
    source = tree.args.get("from_") or tree.args.get("from")
    assert isinstance(source, exp.From) and isinstance(source.this, exp.Table)
    edge_alias = source.this.alias_or_name
    on = join.args.get("on")
    if on is None or not _either_end(on, node_alias, edge_alias, info):
        raise _refuse(
            f"a node attribute counts each edge at both its ends: write ON "
            f"n.{info.node_key} IN (e.{info.source_col}, e.{info.target_col}) (one end alone "
            "has no bounded node-level sensitivity, and the graph is undirected)"
        )
    if len(others) != 1 or len(keys) != 1:
        raise _refuse("select one node attribute, COUNT(*), and GROUP BY that attribute")
    out = others[0].this if isinstance(others[0], exp.Alias) else others[0]
    if not (
        isinstance(out, exp.Column)
        and isinstance(keys[0], exp.Column)
        and out.name.lower() == keys[0].name.lower()
        and out.table.lower() in ("", node_alias.lower())
    ):
        raise _refuse("GROUP BY one node attribute, the one selected")
    attr = _column_of(out.name, info.node_columns)
    return GraphQuery(
        Kind.EDGE_ENDS_BY,
        attribute=attr,
        value_name=count_name,
        key_name=_alias_or(others[0], attr),
    )


def _column_of(name: str, columns: tuple[str, ...]) -> str:
    for c in columns:
        if c.lower() == name.lower():
            return c
    raise _refuse(f"{name!r} is not a column of the node table")


def _refers(col: exp.Expression, alias: str, name: str) -> bool:
    return (
        isinstance(col, exp.Column)
        and col.table.lower() == alias.lower()
        and col.name.lower() == name.lower()
    )


def _either_end(on: exp.Expression, node_alias: str, edge_alias: str, info: GraphInfo) -> bool:
    assert info.node_key is not None
    key, a, b = info.node_key, info.source_col, info.target_col

    def end_pair(x: exp.Expression, y: exp.Expression) -> str | None:
        if _refers(x, node_alias, key):
            x, y = y, x
        if not _refers(y, node_alias, key):
            return None
        for end in (a, b):
            if _refers(x, edge_alias, end):
                return end
        return None

    if isinstance(on, exp.In) and _refers(on.this, node_alias, key):
        ends = {e for e in (end_pair(on.this, x) for x in on.expressions) if e is not None}
        return len(on.expressions) == 2 and ends == {a, b}
    if isinstance(on, exp.Or):
        left, right = on.this, on.expression
        if isinstance(left, exp.EQ) and isinstance(right, exp.EQ):
            pair = {end_pair(left.this, left.expression), end_pair(right.this, right.expression)}
            return pair == {a, b}
    return False


def answer(
    graph: Graph,
    query: str,
    *,
    epsilon: float | Fraction | None = None,
    rho: float | Fraction | None = None,
    delta: float | Fraction | None = None,
    level: float = 0.95,
    analyst: str | None = None,
    cache_scope: str | None = None,
    idempotency_key: str | None = None,
) -> Answer:
    """Answer a SQL text over ``graph`` (charged as :meth:`Graph.run`, which see)."""
    parsed = parse(query, graph)
    return graph.run(
        parsed,
        epsilon=epsilon,
        rho=rho,
        delta=delta,
        level=level,
        analyst=analyst,
        text=query,
        cache_scope=cache_scope,
        idempotency_key=idempotency_key,
    )
