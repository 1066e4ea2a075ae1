"""Stage 1 of the SQL compiler: parse the analyst's text into a small logical query.

Only one shape is accepted::

    SELECT <group keys and aggregates, with aliases>
    FROM <one table> [AS alias]
    [WHERE <row predicate>]
    [GROUP BY <columns>]
    [ORDER BY <outputs>] [LIMIT n] [OFFSET n]

Aggregates: ``COUNT(*)``, ``COUNT(col)``, ``COUNT(DISTINCT col)``, ``SUM``, ``AVG``,
``VARIANCE``/``VAR_SAMP``, ``STDDEV``/``STDDEV_SAMP``, ``MEDIAN`` and
``QUANTILE(col, q)`` (also spelt ``QUANTILE_CONT``/``QUANTILE_DISC``/``PERCENTILE_CONT``).
Anything else — ``SELECT *``, several statements, DDL/DML, joins, subqueries, CTEs, set
operations, ``HAVING``, ``DISTINCT``, window functions, table functions, sampling clauses —
is refused here with :class:`~deniable.errors.UnsafeQuery` or, for text that does not parse,
:class:`~deniable.errors.SQLError` with the line and column sqlglot reports. Nothing here reads
data: this stage sees only the query text. Names are resolved against the catalog in
:mod:`deniable.query.catalog.validate`.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from deniable.errors import SQLError, UnsafeQuery

MAX_QUERY_CHARS = 20_000

AggregateFunc = Literal[
    "count", "count_distinct", "sum", "avg", "variance", "stddev", "median", "quantile"
]

_SIMPLE_AGGREGATES: dict[type[exp.Expression], AggregateFunc] = {
    exp.Sum: "sum",
    exp.Avg: "avg",
    exp.Variance: "variance",
    exp.VariancePop: "variance",
    exp.Stddev: "stddev",
    exp.StddevSamp: "stddev",
    exp.StddevPop: "stddev",
    exp.Median: "median",
}
_POPULATION = (exp.VariancePop, exp.StddevPop)
_QUANTILES: tuple[type[exp.Expression], ...] = (
    exp.Quantile,
    exp.PercentileCont,
    exp.PercentileDisc,
)

# Clauses of a SELECT that are refused outright, with what to do instead.
_REFUSED_CLAUSES = {
    "with_": "common table expressions (WITH) are not supported; query the table directly",
    "joins": "joins are not supported; query one table",
    "having": "HAVING is not supported; filter the noisy answer instead",
    "qualify": "QUALIFY is not supported",
    "windows": "window functions are not supported",
    "distinct": "SELECT DISTINCT would release rows; use GROUP BY with an aggregate",
    "into": "SELECT INTO writes data and is refused",
    "laterals": "LATERAL is not supported",
    "pivots": "PIVOT is not supported",
    "sample": "sampling clauses are not supported",
    "connect": "CONNECT BY is not supported",
    "prewhere": "PREWHERE is not supported",
    "distribute": "DISTRIBUTE BY is not supported",
    "sort": "SORT BY is not supported",
    "cluster": "CLUSTER BY is not supported",
    "locks": "locking clauses are not supported",
    "match": "MATCH_RECOGNIZE is not supported",
    "exclude": "EXCLUDE is not supported",
    "settings": "SETTINGS is not supported",
    "format": "FORMAT is not supported",
    "options": "OPTIONS is not supported",
    "for_": "FOR clauses are not supported",
    "kind": "SELECT AS STRUCT/VALUE is not supported",
    "hint": "hints are not supported",
    "operation_modifiers": "query modifiers are not supported",
}


@dataclass(frozen=True, slots=True)
class Position:
    """1-based line and column of a token in the query text."""

    line: int
    column: int


@dataclass(frozen=True, slots=True)
class AggregateCall:
    """One aggregate as written: ``func(column)`` (``column`` None for ``COUNT(*)``).

    Attributes:
        func: the aggregate.
        column: the column name as written (unresolved), or None for ``COUNT(*)``.
        q: the quantile for ``quantile`` (``1/2`` for ``median``), exact.
        population: VAR_POP/STDDEV_POP (True) rather than the sample versions.
        position: where the argument appears in the text, when known.
    """

    func: AggregateFunc
    column: str | None
    q: Fraction | None = None
    population: bool = False
    position: Position | None = None


@dataclass(frozen=True, slots=True)
class OutputItem:
    """One output column: a group key (``key``) or an aggregate (``aggregate``)."""

    name: str
    key: str | None = None
    aggregate: AggregateCall | None = None
    position: Position | None = None


@dataclass(frozen=True, slots=True)
class OrderItem:
    """``ORDER BY`` entry: an output name, a column name or a 1-based position."""

    ref: str | int
    descending: bool
    position: Position | None = None


@dataclass(frozen=True)
class ParsedQuery:
    """The logical query: what the analyst asked, before names are resolved.

    Attributes:
        table: the table name as written.
        alias: the table alias, if any.
        outputs: the output columns in order.
        where: the row predicate's AST (validated later), or None.
        group_by: group-key column names as written (positions already resolved).
        order_by: post-processing order.
        limit: post-processing row limit.
        offset: post-processing offset.
        normalized: the query re-rendered by sqlglot with normalised identifiers (cache key).
        text: the original text (recorded in the ledger; never executed).
    """

    table: str
    alias: str | None
    outputs: tuple[OutputItem, ...]
    where: exp.Expression | None
    group_by: tuple[str, ...]
    order_by: tuple[OrderItem, ...]
    limit: int | None
    offset: int | None
    normalized: str
    text: str


def position_of(node: object, text: str) -> Position | None:
    """The position of ``node`` (or of its first identifier) in ``text``, when sqlglot kept it."""
    if not isinstance(node, exp.Expression):
        return None
    candidates = [node] if isinstance(node, exp.Identifier) else []
    candidates += list(node.find_all(exp.Identifier))
    for ident in candidates:
        start = ident.meta.get("start") if ident.meta else None
        if isinstance(start, int):
            line = text.count("\n", 0, start) + 1
            column = start - (text.rfind("\n", 0, start) + 1) + 1
            return Position(line, column)
    return None


def refuse(message: str, node: object = None, text: str = "") -> UnsafeQuery:
    """Build an :class:`UnsafeQuery` naming the place in the text, when known."""
    pos = position_of(node, text) if text else None
    if pos is None:
        return UnsafeQuery(message)
    return UnsafeQuery(f"{message} (line {pos.line}, column {pos.column})")


def parse(text: str) -> ParsedQuery:
    """Parse one SELECT statement into a :class:`ParsedQuery`; no privacy loss (no data read).

    Raises:
        SQLError: the text does not parse, or holds zero or several statements.
        UnsafeQuery: a construct outside the supported shape (the message says what to do).

    Examples:
        >>> q = parse("SELECT editor, COUNT(*) AS n FROM students GROUP BY editor")
        >>> [o.name for o in q.outputs], q.group_by
        (['editor', 'n'], ('editor',))
    """
    if not isinstance(text, str):
        raise SQLError("the query must be a string")
    if len(text) > MAX_QUERY_CHARS:
        raise SQLError(f"the query is longer than {MAX_QUERY_CHARS} characters")
    try:
        statements = [s for s in sqlglot.parse(text, read="duckdb") if s is not None]
    except ParseError as e:
        first = e.errors[0] if e.errors else {}
        line, col = first.get("line"), first.get("col")
        desc = str(first.get("description") or "syntax error")
        raise SQLError(
            f"the query does not parse: {desc}",
            line=line if isinstance(line, int) else None,
            column=col if isinstance(col, int) else None,
        ) from None
    except TokenError:
        raise SQLError("the query does not parse: unterminated string or bad token") from None
    if len(statements) != 1:
        raise SQLError(
            f"send exactly one SELECT statement (found {len(statements)}); "
            "split several queries into separate calls"
        )
    stmt = statements[0]
    if not isinstance(stmt, exp.Select):
        kind = type(stmt).__name__.upper()
        if isinstance(stmt, exp.SetOperation):
            raise UnsafeQuery(f"{kind} is not supported; send each SELECT separately")
        raise UnsafeQuery(
            f"only SELECT queries are answered; a {kind} statement is refused "
            "(deniable never runs DDL, DML or commands)"
        )
    return _parse_select(stmt, text)


def _parse_select(stmt: exp.Select, text: str) -> ParsedQuery:
    for clause, message in _REFUSED_CLAUSES.items():
        value = stmt.args.get(clause)
        if value:
            node = value[0] if isinstance(value, list) else value
            raise refuse(message, node if isinstance(node, exp.Expression) else None, text)
    for sub in stmt.find_all(exp.Select, exp.Subquery, exp.SetOperation):
        if sub is not stmt:
            raise refuse("subqueries are not supported; query one table directly", sub, text)
    table, alias = _parse_from(stmt, text)
    group_by = _parse_group(stmt, text)
    outputs = tuple(_parse_output(e, text, i) for i, e in enumerate(stmt.expressions))
    if not outputs:
        raise SQLError("the SELECT list is empty")
    outputs = _unique_names(outputs, stmt.expressions)
    # GROUP BY may name outputs by 1-based position.
    resolved_groups: list[str] = []
    for g in group_by:
        if isinstance(g, int):
            if not 1 <= g <= len(outputs) or outputs[g - 1].key is None:
                raise refuse(f"GROUP BY {g} must point to a group-key column of the SELECT list")
            key = outputs[g - 1].key
            assert key is not None
            resolved_groups.append(key)
        else:
            resolved_groups.append(g)
    where_clause = stmt.args.get("where")
    where = where_clause.this if isinstance(where_clause, exp.Where) else None
    order = _parse_order(stmt, text)
    limit = _parse_count(stmt.args.get("limit"), "LIMIT", text)
    offset = _parse_count(stmt.args.get("offset"), "OFFSET", text)
    return ParsedQuery(
        table=table,
        alias=alias,
        outputs=outputs,
        where=where,
        group_by=tuple(resolved_groups),
        order_by=order,
        limit=limit,
        offset=offset,
        normalized=normalize(stmt),
        text=text,
    )


def _unique_names(
    outputs: tuple[OutputItem, ...], nodes: list[exp.Expression]
) -> tuple[OutputItem, ...]:
    """Refuse repeated aliases; number repeated default names (``variance_x_2``)."""
    aliased = [isinstance(n, exp.Alias) for n in nodes]
    seen: set[str] = set()
    for o, a in zip(outputs, aliased, strict=True):
        if a:
            if o.name.lower() in seen:
                raise refuse(f"the output name {o.name!r} is used twice; give each its own alias")
            seen.add(o.name.lower())
    out: list[OutputItem] = []
    taken = set(seen)
    for o, a in zip(outputs, aliased, strict=True):
        if a:
            out.append(o)
            continue
        name, i = o.name, 2
        while name.lower() in taken:
            name, i = f"{o.name}_{i}", i + 1
        taken.add(name.lower())
        out.append(OutputItem(name, o.key, o.aggregate, o.position))
    return tuple(out)


def normalize(stmt: exp.Expression) -> str:
    """Render ``stmt`` canonically: identifiers normalised, sqlglot's own spacing and case."""
    from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

    copy = normalize_identifiers(stmt.copy(), dialect="duckdb")
    return copy.sql(dialect="duckdb", normalize=True)


def _parse_from(stmt: exp.Select, text: str) -> tuple[str, str | None]:
    src = stmt.args.get("from_")
    if not isinstance(src, exp.From):
        raise refuse("the query needs FROM <table>")
    table = src.this
    if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
        raise refuse(
            "FROM must name one registered table (no table functions or subqueries)",
            src.this,
            text,
        )
    for arg in ("db", "catalog"):
        if table.args.get(arg):
            raise refuse("FROM must name a registered table without schema or catalog", table, text)
    for arg, value in table.args.items():
        if arg not in ("this", "alias", "db", "catalog") and value:
            raise refuse(f"FROM {table.name} has an unsupported modifier ({arg})", table, text)
    alias_node = table.args.get("alias")
    alias = None
    if isinstance(alias_node, exp.TableAlias):
        if alias_node.args.get("columns"):
            raise refuse("column aliases on the table are not supported", table, text)
        alias = alias_node.name or None
    return table.this.name, alias


def _parse_group(stmt: exp.Select, text: str) -> list[str | int]:
    group = stmt.args.get("group")
    if group is None:
        return []
    for arg in ("grouping_sets", "cube", "rollup", "totals", "all"):
        if group.args.get(arg):
            raise refuse("GROUPING SETS, CUBE, ROLLUP and GROUP BY ALL are not supported", group)
    out: list[str | int] = []
    for e in group.expressions:
        if isinstance(e, exp.Column) and not e.args.get("db"):
            out.append(e.name)
        elif isinstance(e, exp.Literal) and not e.is_string and e.this.isdigit():
            out.append(int(e.this))
        else:
            raise refuse(
                "GROUP BY accepts column names (or output positions) only; "
                "to group by an expression, ask the curator for a column holding it",
                e,
                text,
            )
    return out


def _parse_output(node: exp.Expression, text: str, index: int) -> OutputItem:
    if isinstance(node, exp.Star) or (isinstance(node, exp.Column) and node.is_star):
        raise refuse(
            "SELECT * would release rows; select group keys and aggregates such as COUNT(*)",
            node,
            text,
        )
    name: str | None = None
    inner = node
    if isinstance(node, exp.Alias):
        name = node.alias
        inner = node.this
    pos = position_of(inner, text)
    if isinstance(inner, exp.Column):
        if inner.is_star:
            raise refuse("SELECT t.* would release rows; select aggregates", inner, text)
        return OutputItem(name=name or inner.name, key=inner.name, position=pos)
    agg = _parse_aggregate(inner, text)
    if agg is None:
        if inner.find(exp.AggFunc) is not None:
            raise refuse(
                "arithmetic on aggregates is not supported; select the aggregates and "
                "compute on the answer (post-processing is free)",
                inner,
                text,
            )
        raise refuse(
            "every output must be a GROUP BY column or an aggregate (COUNT, SUM, AVG, "
            "VARIANCE, STDDEV, MEDIAN, QUANTILE); a row-level expression would release rows",
            inner,
            text,
        )
    return OutputItem(name=name or _default_name(agg, index), aggregate=agg, position=pos)


def _default_name(agg: AggregateCall, index: int) -> str:
    if agg.func == "count" and agg.column is None:
        return "count"
    if agg.func == "quantile":
        return f"quantile_{agg.column}_{float(agg.q or 0):g}".replace(".", "_")
    if agg.func == "count_distinct":
        return f"count_distinct_{agg.column}"
    return f"{agg.func}_{agg.column}" if agg.column else f"col{index}"


def _column_arg(node: exp.Expression | None, func: str, text: str) -> str:
    if isinstance(node, exp.Column) and not node.is_star and not node.args.get("db"):
        return node.name
    raise refuse(
        f"{func} takes a plain column (an expression cannot be bounded); "
        "ask the curator for a column holding it",
        node,
        text,
    )


def _parse_aggregate(node: exp.Expression, text: str) -> AggregateCall | None:
    if isinstance(node, exp.Filter | exp.Window | exp.WithinGroup):
        raise refuse("FILTER, OVER and WITHIN GROUP on aggregates are not supported", node, text)
    if isinstance(node, exp.Count):
        arg = node.this
        if isinstance(arg, exp.Star) or arg is None:
            return AggregateCall("count", None)
        if isinstance(arg, exp.Distinct):
            cols = arg.expressions
            if len(cols) != 1:
                raise refuse("COUNT(DISTINCT ...) takes one column", node, text)
            col = _column_arg(cols[0], "COUNT(DISTINCT ...)", text)
            return AggregateCall("count_distinct", col, position=position_of(cols[0], text))
        col = _column_arg(arg, "COUNT", text)
        return AggregateCall("count", col, position=position_of(arg, text))
    for cls, func in _SIMPLE_AGGREGATES.items():
        if type(node) is cls:
            _no_extra_args(node, ("this",), text)
            col = _column_arg(node.this, func.upper(), text)
            q = Fraction(1, 2) if func == "median" else None
            return AggregateCall(
                func,
                col,
                q=q,
                population=isinstance(node, _POPULATION),
                position=position_of(node.this, text),
            )
    if isinstance(node, _QUANTILES):
        arg_name = "quantile" if isinstance(node, exp.Quantile) else "expression"
        _no_extra_args(node, ("this", arg_name), text)
        col = _column_arg(node.this, "QUANTILE", text)
        q = _quantile_literal(node.args.get(arg_name), text)
        return AggregateCall("quantile", col, q=q, position=position_of(node.this, text))
    if isinstance(node, exp.AggFunc | exp.Anonymous):
        fname = node.sql_name() if isinstance(node, exp.AggFunc) else str(node.this)
        raise refuse(
            f"the aggregate {fname.upper()} is not supported; use COUNT, SUM, AVG, VARIANCE, "
            "STDDEV, MEDIAN or QUANTILE",
            node,
            text,
        )
    return None


def _no_extra_args(node: exp.Expression, allowed: tuple[str, ...], text: str) -> None:
    for k, v in node.args.items():
        if k not in allowed and v:
            raise refuse(f"{type(node).__name__.upper()} has an unsupported argument", node, text)


def _quantile_literal(node: exp.Expression | None, text: str) -> Fraction:
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            q = Fraction(node.this)
        except (ValueError, ZeroDivisionError):
            q = Fraction(-1)
        if 0 <= q <= 1:
            return q
    raise refuse("QUANTILE(col, q) needs a numeric literal q between 0 and 1", node, text)


def _parse_order(stmt: exp.Select, text: str) -> tuple[OrderItem, ...]:
    order = stmt.args.get("order")
    if order is None:
        return ()
    out: list[OrderItem] = []
    for o in order.expressions:
        if not isinstance(o, exp.Ordered):
            raise refuse("unsupported ORDER BY entry", o, text)
        e = o.this
        desc = bool(o.args.get("desc"))
        if isinstance(e, exp.Column) and not e.args.get("db"):
            out.append(OrderItem(e.name, desc, position_of(e, text)))
        elif isinstance(e, exp.Literal) and not e.is_string and e.this.isdigit():
            out.append(OrderItem(int(e.this), desc))
        else:
            raise refuse(
                "ORDER BY accepts output names, group keys or positions (it sorts the noisy "
                "answer)",
                e,
                text,
            )
    return tuple(out)


def _parse_count(node: exp.Expression | None, what: str, text: str) -> int | None:
    if node is None:
        return None
    value = node.args.get("expression") if isinstance(node, exp.Limit | exp.Offset) else node
    if isinstance(value, exp.Literal) and not value.is_string and value.this.isdigit():
        return int(value.this)
    raise refuse(f"{what} needs a non-negative integer literal", node, text)
