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

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from sqlglot import exp

from deniable.errors import InvalidParameter, SQLError, UnsafeQuery
from deniable.query import postprocess
from deniable.query.aggregates import Aggregate, CountDistinct, Quantile, Variance
from deniable.query.catalog import (
    MAX_ROWS,
    Bounds,
    Column,
    ColumnKind,
    TableInfo,
    integer_bounds,
    make_bounds,
)
from deniable.query.parse import (
    AGG_PREFIX,
    AggregateCall,
    ParsedQuery,
    Position,
    aggregate_index,
    position_of,
    refuse,
    refuse_at,
)

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

KEY_PREFIX = "__key"
"""Name prefix of the placeholder columns that stand for group keys after binding."""


@dataclass(frozen=True, slots=True)
class ResolvedOutput:
    """One output column, bound: an expression over ``__key<j>`` and ``__agg<i>``.

    Attributes:
        name: the output's name.
        expr: the bound expression (post-processing of released keys and aggregates).
        key: the key column when the output is exactly a group key.
        aggregate: the aggregate's index when the output is exactly one aggregate.
    """

    name: str
    expr: exp.Expression
    key: Column | None = None
    aggregate: int | None = None


@dataclass(frozen=True)
class ValidatedQuery:
    """A query whose every name is resolved and every construct accepted.

    Attributes:
        parsed: the parsed query.
        table: the table's catalog entry.
        keys: the GROUP BY columns, in order (``__key<j>`` is ``keys[j]``).
        aggregates: the distinct aggregates, each with its name (``__agg<i>`` is
            ``aggregates[i]``); a name is the output's when the output is exactly that
            aggregate, else a default such as ``sum_age``.
        outputs: the output columns, in order.
        where: the row predicate rewritten over quoted catalog column names (with HAVING's
            conditions on group keys moved in), or None.
        having: the post-processing filter over released values, or None.
        order_by: post-processing sort: (bound expression, descending).
        limit: post-processing limit.
        offset: post-processing offset.
        max_groups: per-unit partition cap used (query option or policy).
        max_rows: per-unit, per-partition row cap used.
    """

    parsed: ParsedQuery
    table: TableInfo
    keys: tuple[Column, ...]
    aggregates: tuple[tuple[str, Aggregate], ...]
    outputs: tuple[ResolvedOutput, ...]
    where: exp.Expression | None
    having: exp.Expression | None
    order_by: tuple[tuple[exp.Expression, bool], ...]
    limit: int | None
    offset: int | None
    max_groups: int
    max_rows: int


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


@dataclass(frozen=True)
class _Options:
    max_groups: int
    max_rows: int
    bounds: Mapping[str, Bounds]


def _options(
    table: TableInfo,
    bounds: Mapping[str, object] | None,
    max_groups: int | None,
    max_rows: int | None,
) -> _Options:
    policy = table.policy
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
    if bounds is not None and not isinstance(bounds, Mapping):
        raise InvalidParameter("bounds must map column names to (lower, upper) pairs")
    override: dict[str, Bounds] = {}
    for name, pair in (bounds or {}).items():
        col = table.lookup(str(name))
        if col is None:
            raise InvalidParameter(f"bounds given for unknown column {name!r}")
        if not col.kind.numeric:
            raise InvalidParameter(f"bounds given for non-numeric column {col.name!r}")
        given = make_bounds(pair, col.name)
        override[col.name] = (
            integer_bounds(given, col.name) if col.kind is ColumnKind.INTEGER else given
        )
    return _Options(m, r, override)


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
    qualifiers = {table.name.lower()} | ({parsed.alias.lower()} if parsed.alias else set())

    def column(name: str, pos: Position | None) -> Column:
        col = table.lookup(name)
        if col is None:
            raise _sql_error(f"unknown column {name!r} in table {table.name!r}", pos)
        return col

    # Options first: they are public and checked before anything else.
    opts = _options(table, bounds, max_groups, max_rows)

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

    resolved = [_resolve_aggregate(call, table, opts, column) for call in parsed.aggregates]
    # Calls that resolve to the same aggregate are planned (and paid for) once.
    index: dict[tuple[object, ...], int] = {}
    remap: dict[int, int] = {}
    distinct: list[Aggregate] = []
    for i, agg in enumerate(resolved):
        j = index.setdefault(agg.signature, len(distinct))
        if j == len(distinct):
            distinct.append(agg)
        remap[i] = j

    def bind(node: exp.Expression, what: str) -> exp.Expression:
        def visit(n: exp.Expression) -> exp.Expression:
            if not isinstance(n, exp.Column):
                return n
            if n.name.startswith(AGG_PREFIX) and not n.table:
                return exp.column(f"{AGG_PREFIX}{remap[int(n.name[len(AGG_PREFIX) :])]}")
            qual = n.table
            if qual and qual.lower() not in qualifiers:
                raise _sql_error(f"unknown table or alias {qual!r} in {what}", position_of(n, text))
            col = table.lookup(n.name)
            if col is None:
                raise _sql_error(
                    f"unknown column {n.name!r} in {what} (table {table.name!r})",
                    position_of(n, text),
                )
            if col not in keys:
                raise refuse_at(
                    f"{what} uses the column {col.name!r}, which is neither a GROUP BY key nor "
                    "inside an aggregate; add it to GROUP BY or wrap it in an aggregate",
                    position_of(n, text),
                )
            return exp.column(f"{KEY_PREFIX}{keys.index(col)}")

        bound = node.copy().transform(visit, copy=False)
        postprocess.check(bound, text=text)
        return bound

    outputs: list[ResolvedOutput] = []
    for item in parsed.outputs:
        expr = bind(item.expr, f"output {item.name!r}")
        key = None
        plain = item.expr
        while isinstance(plain, exp.Paren):
            plain = plain.this
        if isinstance(plain, exp.Column) and not plain.name.startswith(AGG_PREFIX):
            key = column(plain.name, item.position)
        outputs.append(ResolvedOutput(item.name, expr, key=key, aggregate=aggregate_index(expr)))

    items = {o.name.lower(): o for o in parsed.outputs}

    def with_aliases(node: exp.Expression, *, prefer_columns: bool) -> exp.Expression:
        """Output names stand for their expressions (ORDER BY; HAVING unless a column)."""

        def visit(n: exp.Expression) -> exp.Expression:
            if isinstance(n, exp.Column) and not n.table and n.name.lower() in items:
                if prefer_columns and table.lookup(n.name) is not None:
                    return n
                target = items[n.name.lower()].expr
                if isinstance(target, exp.Column) and target.name.lower() == n.name.lower():
                    return n
                return exp.paren(target.copy())
            return n

        return node.copy().transform(visit)

    if not distinct and not keys:
        raise UnsafeQuery(
            "the query has no aggregate and no GROUP BY and would release rows; add an "
            "aggregate such as COUNT(*)"
        )

    where = None
    if parsed.where is not None:
        where = _validate_where(parsed.where, table, parsed, text)

    having = None
    if parsed.having is not None:
        bound_having = bind(with_aliases(parsed.having, prefer_columns=True), "HAVING")
        row_parts: list[exp.Expression] = []
        post_parts: list[exp.Expression] = []
        conjuncts: list[exp.Expression] = (
            [e for e in bound_having.flatten() if isinstance(e, exp.Expression)]
            if isinstance(bound_having, exp.And)
            else [bound_having]
        )
        for part in conjuncts:
            if not postprocess.placeholders(part, AGG_PREFIX):
                row_parts.append(part)
            post_parts.append(part)
        # Conditions on group keys alone are row conditions too: moved into WHERE, so that
        # rows of groups they drop are never read (the filter on the answer stays as well).
        for part in row_parts:
            as_rows = part.copy().transform(
                lambda n: (
                    exp.column(keys[int(n.name[len(KEY_PREFIX) :])].name, quoted=True)
                    if isinstance(n, exp.Column) and n.name.startswith(KEY_PREFIX)
                    else n
                )
            )
            as_rows = _validate_where(as_rows, table, parsed, text)
            where = as_rows if where is None else exp.And(this=where, expression=as_rows)
        having = post_parts[0]
        for part in post_parts[1:]:
            having = exp.And(this=having, expression=part)

    order: list[tuple[exp.Expression, bool]] = []
    for expr, desc in parsed.order_by:
        plain = expr
        while isinstance(plain, exp.Paren):
            plain = plain.this
        if isinstance(plain, exp.Literal) and not plain.is_string and plain.this.isdigit():
            pos_ = int(plain.this)
            if not 1 <= pos_ <= len(outputs):
                raise UnsafeQuery(f"ORDER BY {pos_} is not a position of the SELECT list")
            order.append((outputs[pos_ - 1].expr, desc))
            continue
        order.append((bind(with_aliases(expr, prefer_columns=False), "ORDER BY"), desc))
    named = _aggregate_names(outputs, distinct)
    return ValidatedQuery(
        parsed=parsed,
        table=table,
        keys=tuple(keys),
        aggregates=tuple(zip(named, distinct, strict=True)),
        outputs=tuple(outputs),
        where=where,
        having=having,
        order_by=tuple(order),
        limit=parsed.limit,
        offset=parsed.offset,
        max_groups=opts.max_groups,
        max_rows=opts.max_rows,
    )


def _aggregate_names(outputs: list[ResolvedOutput], aggregates: list[Aggregate]) -> list[str]:
    """Each aggregate's name: the output's when an output is exactly it, else a default."""
    names: list[str | None] = [None] * len(aggregates)
    taken = {o.name.lower() for o in outputs}
    for o in outputs:
        if o.aggregate is not None and names[o.aggregate] is None:
            names[o.aggregate] = o.name
    out: list[str] = []
    for i, agg in enumerate(aggregates):
        name = names[i]
        if name is None:
            base, n = agg.default_name, 2
            name = base
            while name.lower() in taken:
                name, n = f"{base}_{n}", n + 1
            taken.add(name.lower())
        out.append(name)
    return out


def _resolve_aggregate(
    call: AggregateCall,
    table: TableInfo,
    opts: _Options,
    column: Callable[[str, Position | None], Column],
) -> Aggregate:
    policy = table.policy
    agg_col = None if call.column is None else column(call.column, call.position)
    kind = call.kind
    if kind is CountDistinct:
        assert agg_col is not None
        if policy.privacy_unit is None:
            raise refuse_at(
                "COUNT(DISTINCT ...) needs a table with a privacy unit; use COUNT(*) "
                "(each row is a unit here)",
                call.position,
            )
        if agg_col.name != policy.privacy_unit:
            raise refuse_at(
                f"COUNT(DISTINCT ...) is supported on the privacy unit "
                f"{policy.privacy_unit!r} only",
                call.position,
            )
        return CountDistinct(agg_col, None)
    if not kind.needs_bounds:
        return kind(agg_col, None)
    assert agg_col is not None
    name = call.func.upper()
    if not agg_col.kind.numeric:
        raise refuse_at(
            f"{name}({agg_col.name}) needs a numeric column; {agg_col.name!r} is "
            f"{agg_col.sql_type}",
            call.position,
        )
    b = opts.bounds.get(agg_col.name) or policy.bounds.get(agg_col.name)
    if b is None:
        raise refuse_at(
            f"{name}({agg_col.name}) needs clamping bounds: the curator can declare "
            f"bounds={{'{agg_col.name}': (lower, upper)}} in add_table, or pass "
            f"bounds={{'{agg_col.name}': (lower, upper)}} to sql() (bounds must not be "
            "derived from the data)",
            call.position,
        )
    if issubclass(kind, Variance):
        return kind(agg_col, b, population=call.population)
    if issubclass(kind, Quantile):
        assert call.q is not None
        return kind(agg_col, b, q=call.q)
    return kind(agg_col, b)


def effective_bounds(query: ValidatedQuery) -> Mapping[str, Bounds]:
    """The bounds each aggregated column will be clamped to (public; for the answer)."""
    out: dict[str, Bounds] = {}
    for _, agg in query.aggregates:
        if agg.bounds is not None and agg.column is not None:
            out[agg.column.name] = agg.bounds
    return MappingProxyType(out)


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
