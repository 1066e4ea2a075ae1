"""Stage 2 of the SQL compiler: resolve names against the catalog and refuse what is unsafe.

Every decision here depends only on the query text, the analyst's options and the curator's
declared metadata (:mod:`deniable.query.catalog`): no row is read, so whether a query is
refused can never depend on the data (a refusal releases nothing and costs nothing).

The row predicate (``WHERE``) is checked against a whitelist of node types — comparisons,
``AND``/``OR``/``NOT``, arithmetic, ``IN`` over literal lists, ``BETWEEN``, ``LIKE``,
``IS [NOT] NULL`` and a few scalar functions — and re-rendered later from this AST, never from
the analyst's text. Columns are replaced by quoted identifiers of the catalog's spelling.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from types import MappingProxyType

from sqlglot import exp

from deniable.errors import InvalidParameter, SQLError, UnsafeQuery
from deniable.query.catalog import (
    MAX_ROWS,
    Bounds,
    Column,
    ColumnKind,
    TableInfo,
    integer_bounds,
    make_bounds,
)
from deniable.query.parse import AggregateFunc, ParsedQuery, Position, position_of, refuse

# Node types a WHERE clause may contain (their arguments are checked recursively).
_WHERE_NODES: tuple[type[exp.Expression], ...] = (
    exp.Column,
    exp.Identifier,
    exp.Literal,
    exp.Boolean,
    exp.Null,
    exp.Paren,
    exp.Neg,
    exp.Not,
    exp.And,
    exp.Or,
    exp.EQ,
    exp.NEQ,
    exp.GT,
    exp.GTE,
    exp.LT,
    exp.LTE,
    exp.NullSafeEQ,
    exp.NullSafeNEQ,
    exp.Is,
    exp.In,
    exp.Between,
    exp.Like,
    exp.ILike,
    exp.Add,
    exp.Sub,
    exp.Mul,
    exp.Div,
    exp.Mod,
    exp.IntDiv,
    exp.Abs,
    exp.Lower,
    exp.Upper,
    exp.Length,
    exp.Year,
    exp.Month,
    exp.Day,
    exp.Round,
    exp.Floor,
    exp.Ceil,
    exp.Coalesce,
    exp.Cast,
    exp.TryCast,
    exp.DataType,
)
_CAST_TARGETS = {
    exp.DataType.Type.BIGINT,
    exp.DataType.Type.INT,
    exp.DataType.Type.SMALLINT,
    exp.DataType.Type.DOUBLE,
    exp.DataType.Type.FLOAT,
    exp.DataType.Type.DECIMAL,
    exp.DataType.Type.VARCHAR,
    exp.DataType.Type.TEXT,
    exp.DataType.Type.DATE,
    exp.DataType.Type.TIMESTAMP,
    exp.DataType.Type.BOOLEAN,
}
_WHERE_HELP = (
    "WHERE may use columns, literals, comparisons, AND/OR/NOT, + - * / %, IN (literal list), "
    "BETWEEN, LIKE, IS [NOT] NULL, CAST and the functions ABS, LOWER, UPPER, LENGTH, YEAR, "
    "MONTH, DAY, ROUND, FLOOR, CEIL, COALESCE"
)

NEEDS_BOUNDS: frozenset[AggregateFunc] = frozenset(
    {"sum", "avg", "variance", "stddev", "median", "quantile"}
)


@dataclass(frozen=True, slots=True)
class ResolvedAggregate:
    """An aggregate bound to a catalog column, with the clamping bounds it will use."""

    func: AggregateFunc
    column: Column | None
    q: Fraction | None
    population: bool
    bounds: Bounds | None


@dataclass(frozen=True, slots=True)
class ResolvedOutput:
    """One output column: ``key`` (a group-key column) or ``aggregate``."""

    name: str
    key: Column | None = None
    aggregate: ResolvedAggregate | None = None


@dataclass(frozen=True)
class ValidatedQuery:
    """A query whose every name is resolved and every construct accepted.

    Attributes:
        parsed: the parsed query.
        table: the table's catalog entry.
        keys: the GROUP BY columns, in order.
        outputs: the output columns, in order.
        where: the row predicate rewritten over quoted catalog column names, or None.
        order_by: post-processing sort: (output or key name, descending).
        limit: post-processing limit.
        offset: post-processing offset.
        max_groups: per-unit partition cap used (query option or policy).
        max_rows: per-unit, per-partition row cap used.
    """

    parsed: ParsedQuery
    table: TableInfo
    keys: tuple[Column, ...]
    outputs: tuple[ResolvedOutput, ...]
    where: exp.Expression | None
    order_by: tuple[tuple[str, bool], ...]
    limit: int | None
    offset: int | None
    max_groups: int
    max_rows: int

    @property
    def aggregates(self) -> tuple[tuple[str, ResolvedAggregate], ...]:
        """(output name, aggregate) pairs in output order."""
        return tuple((o.name, o.aggregate) for o in self.outputs if o.aggregate is not None)


def _sql_error(message: str, pos: Position | None) -> SQLError:
    if pos is None:
        return SQLError(message)
    return SQLError(message, line=pos.line, column=pos.column)


def resolve_table(catalog: Mapping[str, TableInfo], name: str) -> TableInfo:
    """Find ``name`` in the catalog (exact, else unique case-insensitive match).

    Raises:
        SQLError: unknown table (the message lists the registered ones: their names are
            public).
    """
    if name in catalog:
        return catalog[name]
    folded = [t for n, t in catalog.items() if n.lower() == name.lower()]
    if len(folded) == 1:
        return folded[0]
    known = ", ".join(sorted(catalog)) or "none"
    raise SQLError(f"unknown table {name!r}; registered tables: {known}")


def validate(
    parsed: ParsedQuery,
    catalog: Mapping[str, TableInfo],
    *,
    bounds: Mapping[str, object] | None = None,
    max_groups: int | None = None,
    max_rows: int | None = None,
) -> ValidatedQuery:
    """Resolve ``parsed`` against ``catalog`` with the analyst's options; no privacy loss.

    Args:
        parsed: output of :func:`deniable.query.parse.parse`.
        catalog: registered tables by name.
        bounds: per-column clamping bounds overriding the curator's (public choices).
        max_groups: per-unit partition cap overriding the policy's.
        max_rows: per-unit, per-partition row cap overriding the policy's.

    Raises:
        SQLError: unknown table or column.
        UnsafeQuery: a construct that would release rows or unbounded values.
        InvalidParameter: malformed options.
    """
    table = resolve_table(catalog, parsed.table)
    policy = table.policy
    text = parsed.text

    def column(name: str, pos: Position | None) -> Column:
        col = table.lookup(name)
        if col is None:
            raise _sql_error(f"unknown column {name!r} in table {table.name!r}", pos)
        return col

    # Options first: they are public and checked before anything else.
    m, r = policy.max_groups, policy.max_rows
    if policy.privacy_unit is None and (max_groups not in (None, 1) or max_rows not in (None, 1)):
        raise InvalidParameter(
            f"table {table.name!r} has row-level privacy: max_groups and max_rows are 1"
        )
    if max_groups is not None:
        if isinstance(max_groups, bool) or not isinstance(max_groups, int) or max_groups < 1:
            raise InvalidParameter("max_groups must be a positive integer")
        m = max_groups
    if max_rows is not None:
        if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
            raise InvalidParameter("max_rows must be a positive integer")
        if max_rows > MAX_ROWS:
            raise InvalidParameter(f"max_rows must be at most {MAX_ROWS}")
        r = max_rows
    override: dict[str, Bounds] = {}
    for name, pair in (bounds or {}).items():
        col = table.lookup(name)
        if col is None:
            raise InvalidParameter(f"bounds given for unknown column {name!r}")
        if not col.kind.numeric:
            raise InvalidParameter(f"bounds given for non-numeric column {col.name!r}")
        given = make_bounds(pair, col.name)
        override[col.name] = (
            integer_bounds(given, col.name) if col.kind is ColumnKind.INTEGER else given
        )

    keys: list[Column] = []
    for g in parsed.group_by:
        col = column(g, None)
        if col.name == policy.privacy_unit:
            raise UnsafeQuery(
                f"grouping by the privacy unit {col.name!r} would release one group per "
                "person; group by another column"
            )
        if col in keys:
            raise UnsafeQuery(f"GROUP BY lists {col.name!r} twice")
        if col.kind is ColumnKind.OTHER:
            raise UnsafeQuery(f"cannot group by {col.name!r} of type {col.sql_type}")
        keys.append(col)

    outputs: list[ResolvedOutput] = []
    for item in parsed.outputs:
        if item.key is not None:
            col = column(item.key, item.position)
            if col not in keys:
                raise _unsafe(
                    f"output {item.name!r} is neither an aggregate nor a GROUP BY column; "
                    "add it to GROUP BY or wrap it in an aggregate",
                    item.position,
                )
            outputs.append(ResolvedOutput(item.name, key=col))
            continue
        call = item.aggregate
        assert call is not None
        agg_col = None if call.column is None else column(call.column, call.position)
        b: Bounds | None = None
        if call.func == "count_distinct":
            assert agg_col is not None
            if policy.privacy_unit is None:
                raise _unsafe(
                    "COUNT(DISTINCT ...) needs a table with a privacy unit; use COUNT(*) "
                    "(each row is a unit here)",
                    call.position,
                )
            if agg_col.name != policy.privacy_unit:
                raise _unsafe(
                    f"COUNT(DISTINCT ...) is supported on the privacy unit "
                    f"{policy.privacy_unit!r} only",
                    call.position,
                )
        elif call.func in NEEDS_BOUNDS:
            assert agg_col is not None
            if not agg_col.kind.numeric:
                raise _unsafe(
                    f"{call.func.upper()}({agg_col.name}) needs a numeric column; "
                    f"{agg_col.name!r} is {agg_col.sql_type}",
                    call.position,
                )
            b = override.get(agg_col.name) or policy.bounds.get(agg_col.name)
            if b is None:
                raise _unsafe(
                    f"{call.func.upper()}({agg_col.name}) needs clamping bounds: the curator "
                    f"can declare bounds={{'{agg_col.name}': (lower, upper)}} in add_table, "
                    f"or pass bounds={{'{agg_col.name}': (lower, upper)}} to sql() "
                    "(bounds must not be derived from the data)",
                    call.position,
                )
        outputs.append(
            ResolvedOutput(
                item.name,
                aggregate=ResolvedAggregate(call.func, agg_col, call.q, call.population, b),
            )
        )
    if not any(o.aggregate is not None for o in outputs):
        raise UnsafeQuery(
            "the query has no aggregate and would release rows or keys as they are; "
            "add an aggregate such as COUNT(*)"
        )

    where = None
    if parsed.where is not None:
        where = _validate_where(parsed.where, table, parsed, text)

    order: list[tuple[str, bool]] = []
    names = {o.name.lower(): o.name for o in outputs}
    key_names = {k.name.lower(): k.name for k in keys}
    for o in parsed.order_by:
        if isinstance(o.ref, int):
            if not 1 <= o.ref <= len(outputs):
                raise UnsafeQuery(f"ORDER BY {o.ref} is not a position of the SELECT list")
            order.append((outputs[o.ref - 1].name, o.descending))
        elif o.ref.lower() in names:
            order.append((names[o.ref.lower()], o.descending))
        elif o.ref.lower() in key_names:
            order.append((key_names[o.ref.lower()], o.descending))
        else:
            raise _sql_error(f"ORDER BY {o.ref!r} names no output column or group key", o.position)
    return ValidatedQuery(
        parsed=parsed,
        table=table,
        keys=tuple(keys),
        outputs=tuple(outputs),
        where=where,
        order_by=tuple(order),
        limit=parsed.limit,
        offset=parsed.offset,
        max_groups=m,
        max_rows=r,
    )


def effective_bounds(query: ValidatedQuery) -> Mapping[str, Bounds]:
    """The bounds each aggregated column will be clamped to (public; for the answer)."""
    out: dict[str, Bounds] = {}
    for _, agg in query.aggregates:
        if agg.bounds is not None and agg.column is not None:
            out[agg.column.name] = agg.bounds
    return MappingProxyType(out)


def _unsafe(message: str, pos: Position | None) -> UnsafeQuery:
    if pos is None:
        return UnsafeQuery(message)
    return UnsafeQuery(f"{message} (line {pos.line}, column {pos.column})")


def _validate_where(
    node: exp.Expression, table: TableInfo, parsed: ParsedQuery, text: str
) -> exp.Expression:
    qualifiers = {table.name.lower()} | ({parsed.alias.lower()} if parsed.alias else set())
    for n in node.walk():
        if isinstance(n, exp.Select | exp.Subquery):
            raise refuse("subqueries are not supported in WHERE", n, text)
        if not isinstance(n, _WHERE_NODES) or type(n) is exp.Anonymous:
            raise refuse(f"{_WHERE_HELP}; {_node_name(n)} is not allowed", n, text)
        if isinstance(n, exp.In) and any(
            n.args.get(a) for a in ("query", "unnest", "field", "is_global")
        ):
            raise refuse("IN takes a list of literals in WHERE", n, text)
        if isinstance(n, exp.In):
            for v in n.expressions:
                if not isinstance(v, exp.Literal | exp.Boolean | exp.Null | exp.Neg):
                    raise refuse("IN takes a list of literals in WHERE", v, text)
        if isinstance(n, exp.Cast | exp.TryCast):
            to = n.args.get("to")
            if not isinstance(to, exp.DataType) or to.this not in _CAST_TARGETS:
                raise refuse(
                    "CAST in WHERE supports numeric, text, date, timestamp, boolean", n, text
                )
        if isinstance(n, exp.Column):
            if n.is_star:
                raise refuse("* is not allowed in WHERE", n, text)
            if n.args.get("db") or n.args.get("catalog"):
                raise refuse("qualify columns with the table name or alias only", n, text)
            qual = n.table
            if qual and qual.lower() not in qualifiers:
                raise _sql_error(f"unknown table or alias {qual!r} in WHERE", position_of(n, text))
            if table.lookup(n.name) is None:
                raise _sql_error(
                    f"unknown column {n.name!r} in table {table.name!r}", position_of(n, text)
                )
    rewritten = node.copy()

    def quote(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Column):
            col = table.lookup(n.name)
            assert col is not None
            return exp.column(col.name, quoted=True)
        if isinstance(n, exp.Cast) and not isinstance(n, exp.TryCast):
            # A failing cast would raise on some datasets and not on others: use TRY_CAST.
            return exp.TryCast(this=n.this, to=n.args["to"])
        return n

    return rewritten.transform(quote)


def _node_name(n: object) -> str:
    if isinstance(n, exp.Func):
        return n.sql_name().upper() if not isinstance(n, exp.Anonymous) else str(n.this).upper()
    return type(n).__name__
