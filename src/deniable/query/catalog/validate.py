"""Stage 2 of the SQL compiler: resolve names against the catalog and refuse what is unsafe.

Every decision here depends only on the query text, the analyst's options and the curator's
declared metadata (:mod:`deniable.query.catalog`): no row is read, so whether a query is
refused can never depend on the data (a refusal releases nothing and costs nothing).

**The source.** ``FROM`` resolves to one private table (the *main* table, aliased ``__t`` in
the generated statement), optionally joined with

* public tables (declared with a unique key): the join must equate every column of the
  public table's unique key, so that a private row matches at most one public row and the
  join never multiplies it;
* other private tables sharing the privacy unit, joined on it (``a.unit = b.unit``): the
  joined rows of one person stay that person's, and contribution bounding applies to them
  after the join (with the main table's ``max_groups``/``max_rows``).

``WITH`` tables and subqueries in ``FROM`` that filter and project rows are flattened into
the same source: their ``WHERE`` joins the row predicate and their output columns stand for
the row expressions that define them. A subquery that aggregates, groups, sorts, limits or
deduplicates is refused.

**Row expressions** (:mod:`deniable.query.rowexpr`) are checked against a whitelist and
re-rendered later from trees qualified with the generated statement's aliases, never from
the analyst's text. An aggregate's argument that is not a plain column of the main table
becomes a derived :class:`~deniable.query.catalog.Column` with bounds derived by interval
arithmetic (or given per query); a grouping expression gets a public domain where one
follows from the declarations, else its keys go through partition selection. One rule for
integer columns with declared bounds: ``GROUP BY age`` is public like ``GROUP BY age + 0``
(every integer of the bounds is a key, the column clamped to them). A key taken from a
table joined with LEFT JOIN has NULL in its domain (the unmatched rows' group, as in DuckDB).

**Post-processing** (HAVING, ORDER BY, expressions over aggregates) is bound to ``__key<j>``
and ``__agg<i>`` placeholders and checked as DuckDB's binder would: text mixed with numbers
outside ``=``/``<>``/``IN`` (``zip + 1``, ``zip < 5``) is refused, naming the construct. In
HAVING an output alias means its expression unless the name is a GROUP BY column (DuckDB's
rule); LIMIT or OFFSET without ORDER BY keeps the first groups in key order (numbers as
numbers). Output names that would overwrite an interval column (``k AS c_low`` beside
``COUNT(*) AS c``) are refused. All of this happens before anything is charged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from sqlglot import exp

from deniable.errors import InvalidParameter, Remedy, SQLError, UnsafeQuery, remedied
from deniable.query import postprocess, rowexpr
from deniable.query.aggregates import (
    Aggregate,
    CountDistinct,
    DistinctCount,
    Quantile,
    Variance,
)
from deniable.query.catalog import (
    MAX_PUBLIC_KEYS,
    MAX_ROWS,
    Bounds,
    Column,
    ColumnKind,
    TableInfo,
    integer_bounds,
    make_bounds,
    near_matches,
)
from deniable.query.parse import (
    AggregateCall,
    ParsedQuery,
    Position,
    aggregate_index,
    normalize,
    place,
    position_of,
    refuse,
    refuse_at,
)
from deniable.query.postprocess import AGG_PREFIX, KEY_PREFIX
from deniable.sqlnames import identifier

MAIN_ALIAS = "__t"
"""Alias of the main private table in the generated statement."""


@dataclass(frozen=True, slots=True)
class JoinSpec:
    """One table joined to the main table.

    Attributes:
        table: the joined table's catalog entry.
        alias: its alias in the generated statement (``__j1``, ``__j2``, …).
        kind: ``INNER`` or ``LEFT`` (main rows kept).
        on: the join condition over qualified columns.
    """

    table: TableInfo
    alias: str
    kind: str
    on: exp.Expression


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
        table: the main (private) table's catalog entry.
        keys: the GROUP BY columns (catalog or derived), in order (``__key<j>`` is
            ``keys[j]``).
        key_domains: each key's public domain, or None when its keys are private.
        aggregates: the distinct aggregates, each with its name (``__agg<i>`` is
            ``aggregates[i]``); a name is the output's when the output is exactly that
            aggregate, else a default such as ``sum_age``.
        outputs: the output columns, in order.
        where: the row predicate over qualified columns (with the predicates of WITH tables
            and subqueries, and HAVING's conditions on group keys), or None.
        having: the post-processing filter over released values, or None.
        order_by: post-processing sort: (bound expression, descending).
        limit: post-processing limit.
        offset: post-processing offset.
        max_groups: per-unit partition cap used (query option or policy).
        max_rows: per-unit, per-partition row cap used.
        joins: the tables joined to the main table.
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
    key_domains: tuple[tuple[object, ...] | None, ...] = ()
    joins: tuple[JoinSpec, ...] = ()


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
    max_groups: int | None
    max_rows: int | None
    bounds: Mapping[str, tuple[object, object]]


def _options(
    bounds: Mapping[str, object] | None,
    max_groups: int | None,
    max_rows: int | None,
) -> _Options:
    if max_groups is not None and (
        isinstance(max_groups, bool) or not isinstance(max_groups, int) or max_groups < 1
    ):
        raise InvalidParameter("max_groups must be a positive integer")
    if max_rows is not None:
        if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
            raise InvalidParameter("max_rows must be a positive integer")
        if max_rows > MAX_ROWS:
            raise InvalidParameter(f"max_rows must be at most {MAX_ROWS}")
    if bounds is not None and not isinstance(bounds, Mapping):
        raise InvalidParameter("bounds must map column or output names to (lower, upper) pairs")
    pairs: dict[str, tuple[object, object]] = {}
    for name, pair in (bounds or {}).items():
        make_bounds(pair, str(name))  # shape and values checked now, resolved below
        assert isinstance(pair, tuple | list)
        pairs[str(name)] = (pair[0], pair[1])
    return _Options(max_groups, max_rows, pairs)


@dataclass
class _Name:
    """What a visible column name stands for."""

    expr: exp.Expression  # qualified tree over base columns
    kind: ColumnKind
    bounds: Bounds | None
    domain: tuple[object, ...] | None
    label: str
    base: Column | None = None  # the catalog column when this is a main-table column
    unit: bool = False  # the main table's privacy unit


@dataclass
class _Scope:
    """Names visible in one SELECT: relation alias → column name → :class:`_Name`."""

    relations: dict[str, dict[str, _Name]] = field(default_factory=dict)

    def lookup(self, col: exp.Column) -> _Name | None:
        name = col.name.lower()
        if col.table:
            rel = self.relations.get(col.table.lower())
            if rel is None:
                raise SQLError(f"unknown table or alias {col.table!r}")
            return rel.get(name)
        hits = [rel[name] for rel in self.relations.values() if name in rel]
        if len(hits) > 1 and any(h.expr != hits[0].expr for h in hits[1:]):
            raise SQLError(f"column {col.name!r} is ambiguous; qualify it with a table alias")
        return hits[0] if hits else None


class _Binder:
    """Resolves the FROM clause (tables, joins, WITH, subqueries) into one source."""

    def __init__(
        self,
        parsed: ParsedQuery,
        catalog: Mapping[str, TableInfo],
        opts: _Options,
    ) -> None:
        self.parsed = parsed
        self.catalog = catalog
        self.opts = opts
        self.text = parsed.text
        self.ctes = {name.lower(): body for name, body in parsed.ctes}
        self.main: TableInfo | None = None
        self.joins: list[JoinSpec] = []
        self.predicates: list[exp.Expression] = []
        self.used_bounds: set[str] = set()
        self._internal: tuple[tuple[object, int], dict[str, dict[str, _Name]]] | None = None

    def refuse(self, message: str, node: object = None) -> UnsafeQuery:
        return refuse(message, node, self.text)

    # -- sources -----------------------------------------------------------------------

    def scope_of(
        self, source: exp.Expression, joins: tuple[exp.Join, ...] | list[exp.Join]
    ) -> _Scope:
        scope = _Scope()
        pending: list[tuple[exp.Join, TableInfo, str]] = []
        self.add_relation(scope, source, None, pending)
        for join in joins:
            self.check_join_shape(join)
            self.add_relation(scope, join.this, join, pending)
        for join, table, alias in pending:
            self.add_join(scope, join, table, alias)
        return scope

    def check_join_shape(self, join: exp.Join) -> None:
        side = (join.args.get("side") or "").upper()
        kind = (join.args.get("kind") or "").upper()
        if kind in ("CROSS", "SEMI", "ANTI", "ASOF") or side in ("RIGHT", "FULL"):
            raise self.refuse(
                f"{(side or kind)} JOIN is not supported; join a public table on its unique "
                "key, or another private table on the privacy unit (INNER or LEFT JOIN)",
                join,
            )
        if join.args.get("on") is None and not join.args.get("using"):
            raise self.refuse(
                "a join needs ON: a cross join would pair every private row with every other",
                join,
            )

    def add_relation(
        self,
        scope: _Scope,
        item: exp.Expression,
        join: exp.Join | None,
        pending: list[tuple[exp.Join, TableInfo, str]],
    ) -> None:
        if isinstance(item, exp.Subquery):
            body = item.this
            assert isinstance(body, exp.Select)
            alias = item.alias
            _check_alias(alias, item, self.text)
            if not alias:
                raise self.refuse("a subquery in FROM needs an alias", item)
            if join is not None:
                raise self.refuse(
                    "joining a subquery is not supported; join the table itself", item
                )
            scope.relations[alias.lower()] = self.derived(body, alias)
            return
        if not isinstance(item, exp.Table) or not isinstance(item.this, exp.Identifier):
            raise self.refuse("FROM and JOIN take registered tables or subqueries", item)
        for arg, value in item.args.items():
            if arg not in ("this", "alias") and value:
                raise self.refuse(f"table {item.name} has an unsupported modifier ({arg})", item)
        name = item.name
        alias = item.alias or name
        _check_alias(alias, item, self.text)
        if name.lower() in self.ctes and not item.args.get("db"):
            if join is not None:
                raise self.refuse("joining a WITH table is not supported; join the table", item)
            scope.relations[alias.lower()] = self.derived(self.ctes[name.lower()], alias)
            return
        table = resolve_table(self.catalog, name)
        if table.public:
            if join is None and self.main is None and not self.parsed.joins:
                raise self.refuse(
                    f"{table.name!r} is a public table: query a private table and join it",
                    item,
                )
            internal = f"__j{len(self.joins) + len(pending) + 1}"
        elif self.main is None and join is None:
            self.main = table
            internal = MAIN_ALIAS
        elif self.main is None:
            raise self.refuse("the first table of FROM must be private or joined to one", item)
        else:
            if table.policy.privacy_unit is None or self.main.policy.privacy_unit is None:
                raise self.refuse(
                    "two private tables can be joined only on a shared privacy unit; "
                    f"{table.name!r} or {self.main.name!r} has none",
                    item,
                )
            internal = f"__j{len(self.joins) + len(pending) + 1}"
        scope.relations[alias.lower()] = self.columns_of(table, internal)
        if join is not None:
            pending.append((join, table, internal))
        elif table.public:
            raise self.refuse("a public table must be joined to a private one", item)

    def columns_of(self, table: TableInfo, alias: str) -> dict[str, _Name]:
        out: dict[str, _Name] = {}
        main = alias == MAIN_ALIAS
        policy = table.policy
        for col in table.columns:
            bounds = policy.bounds.get(col.name)
            if main and col.name in self.opts.bounds:
                bounds = self.override(col, self.opts.bounds[col.name])
                self.used_bounds.add(col.name)
            elif not main and f"{table.name}.{col.name}" in self.opts.bounds:
                key = f"{table.name}.{col.name}"
                bounds = self.override(col, self.opts.bounds[key])
                self.used_bounds.add(key)
            domain = (
                table.domains.get(col.name) if table.public else policy.public_keys.get(col.name)
            )
            if table.public and bounds is None and col.kind.numeric and domain:
                numbers = [v for v in domain if isinstance(v, int | float) and v == v]
                if len(numbers) >= 2 and min(numbers) < max(numbers):
                    bounds = make_bounds((min(numbers), max(numbers)), col.name)
            out[col.name.lower()] = _Name(
                expr=exp.Column(this=identifier(col.name), table=exp.to_identifier(alias)),
                kind=col.kind,
                bounds=bounds,
                domain=domain,
                label=col.name if main else f"{table.name}.{col.name}",
                base=col if main else None,
                unit=main and col.name == policy.privacy_unit,
            )
        return out

    def override(self, col: Column, pair: tuple[object, object]) -> Bounds:
        if not col.kind.numeric:
            raise InvalidParameter(f"bounds given for non-numeric column {col.name!r}")
        b = make_bounds(pair, col.name)
        return integer_bounds(b, col.name) if col.kind is ColumnKind.INTEGER else b

    def add_join(self, scope: _Scope, join: exp.Join, table: TableInfo, alias: str) -> None:
        assert self.main is not None
        condition = join.args.get("on")
        if condition is None:  # USING (a, b): the same names on both sides
            written = join.this.alias_or_name
            others = [a for a in scope.relations if a != written.lower()]
            parts: list[exp.Expression] = []
            for ident in join.args["using"]:
                left = next((a for a in others if ident.name.lower() in scope.relations[a]), None)
                if left is None:
                    raise self.refuse(
                        f"USING ({ident.name}) names no column of the left side", join
                    )
                parts.append(
                    exp.EQ(
                        this=exp.column(ident.name, table=left),
                        expression=exp.column(ident.name, table=written),
                    )
                )
            condition = parts[0]
            for p in parts[1:]:
                condition = exp.And(this=condition, expression=p)
        on = self.qualify(condition, scope, "the join condition", check=True)
        conjuncts = list(on.flatten()) if isinstance(on, exp.And) else [on]
        equalities = [(c.this, c.expression) for c in conjuncts if isinstance(c, exp.EQ)]

        def is_col(e: exp.Expression, tbl: str, name: str) -> bool:
            return isinstance(e, exp.Column) and e.table == tbl and e.name.lower() == name.lower()

        tables = {MAIN_ALIAS: self.main, alias: table, **{j.alias: j.table for j in self.joins}}

        def type_of(e: exp.Expression) -> tuple[ColumnKind, str | None]:
            if isinstance(e, exp.Column) and e.table in tables:
                col = tables[e.table].lookup(e.name)
                if col is not None:
                    return col.kind, col.sql_type.upper()
            return _guess_kind(e), None

        def comparable(a: exp.Expression, b: exp.Expression) -> bool:
            """Equality without an implicit conversion between the two sides.

            A conversion could make two distinct values of one side equal one value of the
            other (e.g. '1' and '01' against 1).
            """
            (ka, ta), (kb, tb) = type_of(a), type_of(b)
            if ka is not kb:
                return False
            if ka is ColumnKind.REAL and "DECIMAL" in f"{ta}{tb}":
                return ta == tb
            return True

        side = (join.args.get("side") or "").upper()
        kind = "LEFT" if side == "LEFT" else "INNER"
        if table.public:

            def equated(key: str) -> bool:
                return any(
                    (is_col(a, alias, key) and alias not in _tables(b) and comparable(a, b))
                    or (is_col(b, alias, key) and alias not in _tables(a) and comparable(a, b))
                    for a, b in equalities
                )

            if not any(all(equated(k) for k in key) for key in table.unique_keys):
                keys = " or ".join("(" + ", ".join(k) + ")" for k in table.unique_keys)
                raise self.refuse(
                    f"a join with public table {table.name!r} must equate one of its unique "
                    f"keys ({keys or 'none declared'}) with values of the private row of the "
                    "same type (CAST the private side if needed), so that each private row "
                    "matches at most one public row",
                    join,
                )
        else:
            if table.sample_rate is not None or self.main.sample_rate is not None:
                raise self.refuse(
                    "a table answered on a Bernoulli sample cannot be joined with another "
                    "private table: the sample's amplification covers its own rows only",
                    join,
                )
            unit_a = self.main.policy.privacy_unit
            unit_b = table.policy.privacy_unit
            assert unit_a is not None and unit_b is not None
            if not any(
                (is_col(a, MAIN_ALIAS, unit_a) and is_col(b, alias, unit_b))
                or (is_col(b, MAIN_ALIAS, unit_a) and is_col(a, alias, unit_b))
                for a, b in equalities
            ):
                raise self.refuse(
                    f"two private tables can be joined only on their privacy unit "
                    f"({self.main.name}.{unit_a} = {table.name}.{unit_b}): any other join "
                    "would mix the rows of different people",
                    join,
                )
            kind_a = self.main.column(unit_a).kind
            kind_b = table.column(unit_b).kind
            if kind_a is not kind_b or kind_a not in (ColumnKind.INTEGER, ColumnKind.TEXT):
                raise self.refuse(
                    f"the privacy units {self.main.name}.{unit_a} "
                    f"({self.main.column(unit_a).sql_type}) and {table.name}.{unit_b} "
                    f"({table.column(unit_b).sql_type}) must both be integers or both text: "
                    "an implicit conversion could make two people one",
                    join,
                )
        self.joins.append(JoinSpec(table, alias, kind, on))

    def derived(self, body: exp.Select, alias: str) -> dict[str, _Name]:
        """Flatten a WITH table or subquery that filters and projects rows."""
        for clause in ("group", "having", "order", "limit", "offset", "distinct", "qualify"):
            if body.args.get(clause):
                raise self.refuse(
                    f"the subquery {alias!r} aggregates, groups, sorts or limits rows "
                    f"({clause.upper()}); only filtering and projecting subqueries are "
                    "supported: move the aggregate to the outer query",
                    body.args[clause],
                )
        if body.find(exp.AggFunc) is not None:
            raise self.refuse(
                f"the subquery {alias!r} aggregates; only filtering and projecting subqueries "
                "are supported: move the aggregate to the outer query",
                body.find(exp.AggFunc),
            )
        src = body.args.get("from_")
        if not isinstance(src, exp.From):
            raise self.refuse(f"the subquery {alias!r} needs FROM", body)
        inner = self.scope_of(src.this, list(body.args.get("joins") or []))
        where = body.args.get("where")
        if isinstance(where, exp.Where):
            self.predicates.append(self.qualify(where.this, inner, "WHERE", check=True))
        out: dict[str, _Name] = {}
        for item in body.expressions:
            if isinstance(item, exp.Star) or (isinstance(item, exp.Column) and item.is_star):
                star_table = item.table if isinstance(item, exp.Column) else ""
                for rel_alias, rel in inner.relations.items():
                    if star_table and rel_alias != star_table.lower():
                        continue
                    for key, name in rel.items():
                        out.setdefault(key, name)
                continue
            name = item.alias_or_name
            expr = item.this if isinstance(item, exp.Alias) else item
            if not name:
                raise self.refuse(f"give every column of subquery {alias!r} a name (AS)", item)
            plain = _strip(expr)
            if isinstance(plain, exp.Column):
                found = inner.lookup(plain)
                if found is None:
                    raise _sql_error(
                        f"unknown column {plain.name!r} in subquery {alias!r}",
                        position_of(plain, self.text),
                    )
                out[name.lower()] = found
                continue
            q = self.qualify(expr, inner, f"column {name!r} of {alias!r}", check=True)
            kind, bounds = self.kind_and_bounds(expr, inner, name)
            out[name.lower()] = _Name(q, kind, bounds, None, name)
        return out

    def kind_and_bounds(
        self, expr: exp.Expression, scope: _Scope, name: str
    ) -> tuple[ColumnKind, Bounds | None]:
        """The kind of a projected expression, and its bounds when they follow."""
        try:
            derived = rowexpr.value_bounds(
                expr, lambda c: self.leaf(c, scope), lambda m, n: UnsafeQuery(m), what=name
            )
        except UnsafeQuery:
            return _guess_kind(expr), None
        return derived.kind, derived.bounds

    # -- expressions -------------------------------------------------------------------

    def leaf(self, col: exp.Column, scope: _Scope) -> rowexpr.Leaf:
        found = self.name(col, scope)
        return rowexpr.Leaf(found.kind, found.bounds, found.label)

    def name(self, col: exp.Column, scope: _Scope) -> _Name:
        if col.is_star:
            raise self.refuse("* is not allowed here", col)
        if col.args.get("db") or col.args.get("catalog"):
            raise self.refuse("qualify columns with a table name or alias only", col)
        internal = self.internal().get(col.table)
        if internal is not None and col.name.lower() in internal:
            return internal[col.name.lower()]  # a column of a tree deniable already bound
        try:
            found = scope.lookup(col)
        except SQLError as e:
            raise _sql_error(str(e), position_of(col, self.text)) from None
        if found is None:
            single = self.main is not None and len(scope.relations) == 1
            where = f" in table {self.main.name!r}" if single and self.main else ""
            visible = [
                n.base.name if n.base is not None else key
                for rel in scope.relations.values()
                for key, n in rel.items()
                if not key.startswith("__")
            ]
            raise _sql_error(
                f"unknown column {col.name!r}{where}{near_matches(col.name, visible)}",
                position_of(col, self.text),
            )
        return found

    def internal(self) -> dict[str, dict[str, _Name]]:
        """The generated statement's aliases (``__t``, ``__j<n>``) and their columns.

        Built once per source: every column lookup consults it.
        """
        state = (self.main, len(self.joins))
        if self._internal is None or self._internal[0] != state:
            out: dict[str, dict[str, _Name]] = {}
            if self.main is not None:
                out[MAIN_ALIAS] = self.columns_of(self.main, MAIN_ALIAS)
            for j in self.joins:
                out[j.alias] = self.columns_of(j.table, j.alias)
            self._internal = (state, out)
        return self._internal[1]

    def inline(self, node: exp.Expression, scope: _Scope) -> exp.Expression:
        """``node`` with every column of a WITH table or subquery replaced by its definition.

        Bounds are then derived from the base columns exactly as if it were written inline.
        """

        def visit(n: exp.Expression) -> exp.Expression:
            if isinstance(n, exp.Column) and not n.is_star:
                found = self.name(n, scope)
                if found.base is None and not isinstance(found.expr, exp.Column):
                    return exp.Paren(this=found.expr.copy())
            return n

        out = node.transform(visit)
        assert isinstance(out, exp.Expression)
        return out

    def qualify(
        self, node: exp.Expression, scope: _Scope, what: str, *, check: bool
    ) -> exp.Expression:
        """``node`` over qualified base columns (names of WITH tables substituted)."""
        if check:
            rowexpr.check_row(node, what, self.refuse)

        def visit(n: exp.Expression) -> exp.Expression:
            if isinstance(n, exp.Column):
                found = self.name(n, scope)
                return _paren_if_needed(found.expr.copy())
            return n

        out = node.transform(visit)
        assert isinstance(out, exp.Expression)
        return rowexpr.total_casts(out)


def _check_alias(alias: str, node: exp.Expression, text: str) -> None:
    if alias.startswith("__"):
        raise refuse(f"names starting with '__' are reserved ({alias!r}); rename it", node, text)


def _paren_if_needed(e: exp.Expression) -> exp.Expression:
    return e if isinstance(e, exp.Column | exp.Literal | exp.Paren) else exp.Paren(this=e)


def _strip(node: exp.Expression) -> exp.Expression:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _tables(node: exp.Expression) -> set[str]:
    return {c.table for c in node.find_all(exp.Column)}


def _guess_kind(expr: exp.Expression) -> ColumnKind:
    e = _strip(expr)
    if isinstance(e, exp.Literal):
        return ColumnKind.TEXT if e.is_string else ColumnKind.REAL
    if isinstance(e, exp.Substring | exp.Lower | exp.Upper | exp.Concat | exp.DPipe | exp.Trim):
        return ColumnKind.TEXT
    if isinstance(e, exp.DateTrunc | exp.TimestampTrunc):
        return ColumnKind.TEMPORAL
    if isinstance(e, exp.Case | exp.If):
        values = rowexpr.literal_domain(e)
        if values and all(isinstance(v, str) for v in values if v is not None):
            return ColumnKind.TEXT
    if isinstance(e, exp.Cast | exp.TryCast):
        to = e.args["to"].this
        if to in exp.DataType.TEXT_TYPES:
            return ColumnKind.TEXT
        if to in exp.DataType.INTEGER_TYPES:
            return ColumnKind.INTEGER
    if isinstance(e, exp.Predicate | exp.Not | exp.And | exp.Or):
        return ColumnKind.BOOLEAN
    return ColumnKind.REAL


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
        bounds: clamping bounds overriding the curator's (public choices): by column name
            of the main table, ``table.column`` of a joined one, or by an aggregate's output
            name for an aggregate of a row expression.
        max_groups: per-unit partition cap overriding the policy's.
        max_rows: per-unit, per-partition row cap overriding the policy's.

    Raises:
        SQLError: unknown table or column.
        UnsafeQuery: a construct that would release rows or unbounded values.
        InvalidParameter: malformed options.
    """
    opts = _options(bounds, max_groups, max_rows)
    binder = _Binder(parsed, catalog, opts)
    text = parsed.text
    scope = binder.scope_of(parsed.source, list(parsed.joins))
    table = binder.main
    if table is None:
        raise refuse("the query reads no private table")
    policy = table.policy
    # Options first: they are public and checked before anything else.
    m, r = policy.max_groups, policy.max_rows
    if policy.privacy_unit is None and (max_groups not in (None, 1) or max_rows not in (None, 1)):
        raise InvalidParameter(
            f"table {table.name!r} has row-level privacy: max_groups and max_rows are 1"
        )
    m = opts.max_groups or m
    r = opts.max_rows or r
    names_by_output = {o.name.lower(): o for o in parsed.outputs}

    # -- group keys ----------------------------------------------------------------------
    keys: list[Column] = []
    domains: list[tuple[object, ...] | None] = []
    key_trees: list[exp.Expression] = []
    for g in parsed.group_by:
        g_expr = g
        plain = _strip(g)
        if (
            isinstance(plain, exp.Column)
            and not plain.table
            and plain.name.lower() in names_by_output
            and scope.lookup(plain) is None
        ):
            g_expr = names_by_output[plain.name.lower()].expr  # GROUP BY an output alias
            if aggregate_index(g_expr) is not None or any(
                c.name.startswith(AGG_PREFIX) for c in g_expr.find_all(exp.Column)
            ):
                raise refuse("GROUP BY cannot name an aggregate output", g, text)
        key, domain, tree = _bind_key(binder, scope, g_expr)
        if tree in key_trees:
            raise UnsafeQuery(f"GROUP BY lists {g.sql(dialect='duckdb')!r} twice")
        keys.append(key)
        domains.append(domain)
        key_trees.append(tree)

    # -- aggregates ----------------------------------------------------------------------
    resolved = [_resolve_aggregate(call, binder, scope, parsed) for call in parsed.aggregates]
    index: dict[tuple[object, ...], int] = {}
    remap: dict[int, int] = {}
    distinct: list[Aggregate] = []
    for i, agg in enumerate(resolved):
        j = index.setdefault(agg.signature, len(distinct))
        if j == len(distinct):
            distinct.append(agg)
        remap[i] = j
    unused = set(opts.bounds) - binder.used_bounds
    if unused:
        raise InvalidParameter(
            f"bounds given for {', '.join(sorted(map(repr, unused)))}, which names no column of "
            f"{table.name!r} nor an aggregate output of this query"
        )

    def bind(node: exp.Expression, what: str) -> exp.Expression:
        """Post-processing tree: keys → ``__key<j>``, aggregates → distinct ``__agg<i>``."""

        def visit(n: exp.Expression) -> exp.Expression:
            if isinstance(n, exp.Column) and n.name.startswith(AGG_PREFIX) and not n.table:
                return exp.column(f"{AGG_PREFIX}{remap[int(n.name[len(AGG_PREFIX) :])]}")
            if isinstance(n, exp.Literal | exp.Boolean | exp.Null | exp.DataType):
                return n
            if any(c.name.startswith(AGG_PREFIX) and not c.table for c in n.find_all(exp.Column)):
                return n  # holds an aggregate: descend
            if not isinstance(n, exp.Column) and n.find(exp.Column) is None:
                return n
            try:
                tree = _strip(binder.qualify(n, scope, what, check=False))
            except (SQLError, UnsafeQuery):
                if isinstance(n, exp.Column):
                    raise
                return n
            if tree in key_trees:
                return exp.column(f"{KEY_PREFIX}{key_trees.index(tree)}")
            if isinstance(n, exp.Column):
                found = binder.name(n, scope)
                raise refuse_at(
                    f"{what} uses the column {found.label!r}, which is neither a GROUP BY "
                    "key nor inside an aggregate; add it to GROUP BY or wrap it in an "
                    "aggregate",
                    position_of(n, text),
                )
            return n

        bound = node.transform(visit)
        assert isinstance(bound, exp.Expression)
        postprocess.check(bound, text=text)
        _check_types(bound, keys, text)
        return bound

    outputs: list[ResolvedOutput] = []
    for item in parsed.outputs:
        expr = bind(item.expr, item.label)
        out_key: Column | None = None
        plain = _strip(expr)
        if isinstance(plain, exp.Column) and plain.name.startswith(KEY_PREFIX):
            out_key = keys[int(plain.name[len(KEY_PREFIX) :])]
            expr = plain
        outputs.append(
            ResolvedOutput(item.name, expr, key=out_key, aggregate=aggregate_index(expr))
        )

    _check_output_names(outputs)

    if not distinct and not keys:
        raise UnsafeQuery(
            "the query has no aggregate and no GROUP BY and would release rows; add an "
            "aggregate such as COUNT(*)"
        )

    predicates = list(binder.predicates)
    if parsed.where is not None:
        predicates.append(binder.qualify(parsed.where, scope, "WHERE", check=True))

    items = {o.name.lower(): o for o in parsed.outputs}

    def is_group_key(n: exp.Column) -> bool:
        if scope.lookup(n) is None:
            return False
        try:
            tree = _strip(binder.qualify(n, scope, "HAVING", check=False))
        except (SQLError, UnsafeQuery):
            return False
        return tree in key_trees

    def with_aliases(node: exp.Expression, *, prefer_columns: bool) -> exp.Expression:
        """Output names stand for their expressions.

        In ORDER BY always; in HAVING unless the name is a group key's column (DuckDB's
        rule: ``SUM(age) AS age … HAVING age > 10`` filters on the sum, while a name that
        is a GROUP BY column means the column).
        """

        def visit(n: exp.Expression) -> exp.Expression:
            if isinstance(n, exp.Column) and not n.table and n.name.lower() in items:
                if prefer_columns and is_group_key(n):
                    return n
                target = items[n.name.lower()].expr
                if isinstance(target, exp.Column) and target.name.lower() == n.name.lower():
                    return n
                return exp.paren(target.copy())
            return n

        out = node.transform(visit)
        assert isinstance(out, exp.Expression)
        return out

    having = None
    if parsed.having is not None:
        bound_having = bind(with_aliases(parsed.having, prefer_columns=True), "HAVING")
        conjuncts: list[exp.Expression] = (
            [e for e in bound_having.flatten() if isinstance(e, exp.Expression)]
            if isinstance(bound_having, exp.And)
            else [bound_having]
        )
        for part in conjuncts:
            if postprocess.placeholders(part, AGG_PREFIX):
                continue
            # Conditions on group keys alone are row conditions too: moved into WHERE, so
            # that rows of groups they drop are never read (the filter on the answer stays).
            as_rows = part.transform(
                lambda n: (
                    _paren_if_needed(_key_expr(keys, key_trees, n).copy())
                    if isinstance(n, exp.Column) and n.name.startswith(KEY_PREFIX)
                    else n
                )
            )
            assert isinstance(as_rows, exp.Expression)
            rowexpr.check_row(as_rows, "HAVING", lambda msg, node: refuse(msg, node, text))
            predicates.append(rowexpr.total_casts(as_rows))
        having = conjuncts[0]
        for part in conjuncts[1:]:
            having = exp.And(this=having, expression=part)

    where: exp.Expression | None = None
    for p in predicates:
        where = p if where is None else exp.And(this=where, expression=p)

    order: list[tuple[exp.Expression, bool]] = []
    for expr, desc in parsed.order_by:
        plain = _strip(expr)
        if isinstance(plain, exp.Literal) and not plain.is_string and plain.this.isdigit():
            pos_ = int(plain.this)
            if not 1 <= pos_ <= len(outputs):
                raise UnsafeQuery(f"ORDER BY {pos_} is not a position of the SELECT list")
            order.append((outputs[pos_ - 1].expr, desc))
            continue
        try:
            order.append((bind(with_aliases(expr, prefer_columns=False), "ORDER BY"), desc))
        except SQLError:
            raise _sql_error(
                f"ORDER BY {expr.sql(dialect='duckdb')!r} names no output column or group key",
                position_of(expr, text),
            ) from None
    if not order and keys and (parsed.limit is not None or parsed.offset is not None):
        # LIMIT without ORDER BY keeps the first rows in the keys' own order (numbers as
        # numbers, NULL last), the order the answer is displayed in — never their text.
        order = [(exp.column(f"{KEY_PREFIX}{j}"), False) for j in range(len(keys))]
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
        max_groups=m,
        max_rows=r,
        key_domains=tuple(domains),
        joins=tuple(binder.joins),
    )


_NUMERIC_ONLY: tuple[type[exp.Expression], ...] = (
    *postprocess.ARITHMETIC,
    *postprocess.MONOTONE,
    exp.Neg,
    exp.Abs,
    exp.Sign,
    exp.Pow,
    exp.Log,
)
_ORDERING = (exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Between)
_COMBINING = (exp.Greatest, exp.Least, exp.Coalesce, exp.Case, exp.If)


def _check_types(node: exp.Expression, keys: list[Column], text: str) -> None:
    """Refuse post-processing that mixes text with numbers where DuckDB's binder refuses it.

    DuckDB casts text to a number implicitly only in ``=``, ``<>`` and ``IN`` (and a text
    *literal* to any type); ``zip + 1``, ``zip < 5``, ``GREATEST(zip, 1)``, a CASE with text
    and number results are binder errors. Refused here, before anything is charged,
    naming the construct and the text key.

    Raises:
        UnsafeQuery: naming the construct.
    """

    def kind(n: exp.Expression) -> str:
        """``text``/``number``/``bool`` (text from a column), ``literal`` or ``other``."""
        while isinstance(n, exp.Paren):
            n = n.this
        if isinstance(n, exp.Column) and n.name.startswith(KEY_PREFIX):
            k = keys[int(n.name[len(KEY_PREFIX) :])].kind
            if k is ColumnKind.TEXT:
                return "text"
            if k.numeric:
                return "number"
            return "bool" if k is ColumnKind.BOOLEAN else "other"
        if isinstance(n, exp.Column) and n.name.startswith(AGG_PREFIX):
            return "number"
        if isinstance(n, exp.Literal) and n.is_string:
            return "literal"
        if isinstance(n, exp.Literal):
            return "number"
        if isinstance(n, exp.Boolean):
            return "bool"
        if isinstance(n, exp.Cast | exp.TryCast):
            t = n.args["to"].this
            if t in exp.DataType.TEXT_TYPES:
                return "text"
            return "bool" if t == exp.DataType.Type.BOOLEAN else "number"
        if isinstance(n, (*_NUMERIC_ONLY, exp.Length)):
            return "number"
        if isinstance(n, exp.Lower | exp.Upper):
            return "text"
        if isinstance(n, exp.Predicate | exp.Not | exp.And | exp.Or):
            return "bool"
        if isinstance(n, _COMBINING):
            kinds = {kind(e) for e in _results(n)} - {"literal", "other"}
            return kinds.pop() if len(kinds) == 1 else "other"
        return "other"

    def name_of(n: exp.Expression) -> str:
        for c in n.find_all(exp.Column):
            if c.name.startswith(KEY_PREFIX) and kind(c) == "text":
                return repr(_key_label(keys[int(c.name[len(KEY_PREFIX) :])]))
        return "a text value"

    for n in node.walk():
        operands: list[exp.Expression] = []
        if isinstance(n, _NUMERIC_ONLY):
            operands = [e for e in (n.this, n.args.get("expression")) if e is not None]
            if any(kind(e) == "text" for e in operands):
                bad = next(e for e in operands if kind(e) == "text")
                raise refuse(
                    f"{postprocess.construct(n)} needs numbers, and {name_of(bad)} is text "
                    "(DuckDB refuses this too); CAST it first, e.g. CAST(… AS INTEGER)",
                    n,
                    text,
                )
            continue
        if isinstance(n, exp.In):
            listed = {kind(e) for e in n.expressions} - {"other"}
            if "literal" in listed and listed & {"number", "bool"}:
                raise refuse(
                    "an IN list mixes text and numbers; list values of one type",
                    n,
                    text,
                )
            continue
        if isinstance(n, _ORDERING):
            operands = [
                n.this,
                *(n.args[a] for a in ("expression", "low", "high") if n.args.get(a)),
            ]
        elif isinstance(n, _COMBINING):
            operands = _results(n)
        else:
            continue
        kinds = {kind(e) for e in operands}
        if "text" in kinds and kinds & {"number", "bool"}:
            bad = next(e for e in operands if kind(e) == "text")
            raise refuse(
                f"{postprocess.construct(n)} mixes text ({name_of(bad)}) with numbers or "
                "booleans, which DuckDB refuses; CAST one side, e.g. CAST(… AS INTEGER), "
                "or compare text with text",
                n,
                text,
            )


def _results(n: exp.Expression) -> list[exp.Expression]:
    """The values a GREATEST/LEAST/COALESCE/CASE/IF can take (not its conditions)."""
    if isinstance(n, exp.Case):
        out = [i.args["true"] for i in n.args.get("ifs") or []]
        return out + ([n.args["default"]] if n.args.get("default") is not None else [])
    if isinstance(n, exp.If):
        return [e for e in (n.args.get("true"), n.args.get("false")) if e is not None]
    return [n.this, *n.expressions]


def _key_label(key: Column) -> str:
    return key.name.removeprefix("key:")


def _check_output_names(outputs: list[ResolvedOutput]) -> None:
    """Refuse output names that would collide in the answer's table (before any charge).

    Each output computed from aggregates adds ``<name>_low`` and ``<name>_high`` (its
    interval); an output named like one of them would overwrite it. Names starting with
    ``__`` are deniable's own.

    Raises:
        UnsafeQuery: naming both outputs.
    """
    taken: dict[str, str] = {}
    for o in outputs:
        if postprocess.placeholders(o.expr, AGG_PREFIX):
            for suffix in ("_low", "_high"):
                taken[f"{o.name}{suffix}".lower()] = o.name
    for o in outputs:
        if o.name.startswith("__"):
            raise UnsafeQuery(
                f"the output name {o.name!r} starts with '__', which deniable reserves; "
                "rename it with AS"
            )
        owner = taken.get(o.name.lower())
        if owner is not None:
            raise UnsafeQuery(
                f"the output name {o.name!r} is the name of the interval column of "
                f"{owner!r} (the answer adds {owner}_low and {owner}_high); rename it with AS"
            )


_SQL_TYPES = {
    ColumnKind.INTEGER: "BIGINT",
    ColumnKind.REAL: "DOUBLE",
    ColumnKind.TEXT: "VARCHAR",
    ColumnKind.BOOLEAN: "BOOLEAN",
    ColumnKind.TEMPORAL: "TIMESTAMP",
}


def _key_expr(keys: list[Column], trees: list[exp.Expression], n: exp.Column) -> exp.Expression:
    """The row value of the key a ``__key<j>`` placeholder stands for."""
    j = int(n.name[len(KEY_PREFIX) :])
    expr = keys[j].expr
    return expr if expr is not None else trees[j]


def _bind_key(
    binder: _Binder, scope: _Scope, g: exp.Expression
) -> tuple[Column, tuple[object, ...] | None, exp.Expression]:
    """A group key: its column (catalog or derived), public domain (or None), bound tree."""
    plain = _strip(g)
    if isinstance(plain, exp.Column):
        found = binder.name(plain, scope)
        if found.base is None and not isinstance(found.expr, exp.Column):
            # a WITH/subquery column defined by an expression: group by its definition
            g = binder.inline(g, scope)
            plain = _strip(g)
    if isinstance(plain, exp.Column):
        found = binder.name(plain, scope)
        if found.unit:
            raise UnsafeQuery(
                f"grouping by the privacy unit {found.label!r} would release one group per "
                "person; group by another column"
            )
        if found.base is not None:
            col = found.base
            if col.kind is ColumnKind.OTHER:
                raise UnsafeQuery(f"cannot group by {col.name!r} of type {col.sql_type}")
            qualified = found.expr
            if (
                found.domain is None
                and col.kind is ColumnKind.INTEGER
                and found.bounds is not None
                and isinstance(qualified, exp.Column)
            ):
                # One rule for a bounded integer column and any expression of it (``age``
                # as ``age + 0``): every integer of its public bounds is a key, the column
                # clamped to them, so that no partition selection (and no δ) is needed.
                domain, clamped = _enumerated(binder, scope, plain, qualified, qualified)
                if domain is not None and len(domain) <= MAX_PUBLIC_KEYS:
                    derived = Column(col.name, col.sql_type, col.kind, expr=clamped)
                    return derived, domain, found.expr
            return col, found.domain, found.expr
        tree = _strip(binder.qualify(plain, scope, "GROUP BY", check=False))
        match = tree
        kind = found.kind
        domain = found.domain
        if domain is not None and None not in domain and _left_joined(binder, tree):
            # rows a LEFT JOIN matches with nothing have NULL here: DuckDB keeps their group
            domain = (*domain, None)
        if domain is None and isinstance(tree, exp.Case | exp.If):
            domain = rowexpr.literal_domain(tree)
    else:
        tree = _strip(binder.qualify(g, scope, "GROUP BY", check=True))
        match = tree
        kind = _guess_kind(g)
        domain = rowexpr.literal_domain(tree)
        columns = list({c.sql(): c for c in tree.find_all(exp.Column)}.values())
        if domain is None and len(columns) == 1:
            domain, tree = _enumerated(binder, scope, g, tree, columns[0])
    if domain is not None and len(domain) > MAX_PUBLIC_KEYS:
        domain = None
    name = f"key:{normalize(match)}"
    sql_type = _SQL_TYPES.get(kind, "VARCHAR")
    return Column(name, sql_type, kind, expr=tree), domain, match


def _left_joined(binder: _Binder, tree: exp.Expression) -> bool:
    """Whether ``tree`` is a column of a table joined with LEFT JOIN (NULL when unmatched)."""
    return isinstance(tree, exp.Column) and any(
        j.alias == tree.table and j.kind == "LEFT" for j in binder.joins
    )


def _enumerated(
    binder: _Binder,
    scope: _Scope,
    g: exp.Expression,
    tree: exp.Expression,
    column: exp.Column,
) -> tuple[tuple[object, ...] | None, exp.Expression]:
    """The domain of an expression of one column, when it can be enumerated.

    Over the column's public keys, or over every integer of its bounds (the column is then
    clamped in the key, so that every row's key is in the domain).
    """
    written = next(iter(g.find_all(exp.Column)), None)
    if written is None:
        return None, tree
    found = binder.name(written, scope)

    def run(e: exp.Expression, keys: Mapping[int, np.ndarray]) -> np.ndarray:
        env = postprocess.Env(size=len(keys[0]), aggregates={}, intervals={}, keys=keys)
        return postprocess.evaluate(e, env, 0.95).values

    if found.domain is not None:
        listed = list(found.domain)
        if None not in listed and _left_joined(binder, found.expr):
            listed.append(None)  # the unmatched rows of a LEFT JOIN
        values = np.array(listed, dtype=object)
        return rowexpr.enumerate_domain(tree, column, values, run), tree
    if found.kind is ColumnKind.INTEGER and found.bounds is not None:
        lo, hi = int(found.bounds.lower), int(found.bounds.upper)
        if hi - lo <= rowexpr.MAX_ENUMERATED:
            clamp = rowexpr.Clamp(
                this=column.copy(),
                low=exp.Literal.number(lo),
                high=exp.Literal.number(hi),
                real=exp.false(),
            )
            clamped = tree.transform(lambda n: clamp.copy() if n == column else n)
            assert isinstance(clamped, exp.Expression)
            domain = rowexpr.enumerate_domain(tree, column, np.arange(lo, hi + 1), run)
            if domain is not None:
                return domain, clamped
    return None, tree


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
    binder: _Binder,
    scope: _Scope,
    parsed: ParsedQuery,
) -> Aggregate:
    table = binder.main
    assert table is not None
    policy = table.policy
    text = parsed.text
    kind = call.kind
    name = call.func.upper()
    # The output this aggregate is, if any (its name may carry bounds for an expression).
    out_name = next(
        (
            o.name
            for o in parsed.outputs
            if o.aggregate_index is not None and parsed.aggregates[o.aggregate_index] is call
        ),
        None,
    )
    arg = call.arg
    if call.filter is not None:
        cond = call.filter
        then = arg if arg is not None else exp.Literal.number(1)
        arg = exp.Case(ifs=[exp.If(this=cond.copy(), true=then.copy())])
    if arg is None:
        return kind(None, None)
    plain = _strip(arg)
    base: _Name | None = None
    if isinstance(plain, exp.Column):
        base = binder.name(plain, scope)
    if kind is CountDistinct:
        if policy.privacy_unit is None:
            raise refuse_at(
                "COUNT(DISTINCT ...) needs a table with a privacy unit; use COUNT(*) "
                "(each row is a unit here)",
                call.position,
            )
        if base is not None and base.unit:
            assert base.base is not None
            return CountDistinct(base.base, None)
        if call.filter is not None:
            raise refuse_at(
                "COUNT(DISTINCT …) FILTER (WHERE …) is not supported; put the condition in WHERE",
                call.position,
            )
        if base is not None and base.base is not None:
            column = base.base
        else:
            tree = binder.qualify(arg, scope, "COUNT(DISTINCT …)", check=True)
            arg_kind = base.kind if base is not None else _guess_kind(arg)
            column = Column(
                f"expr:{normalize(tree)}", _SQL_TYPES.get(arg_kind, "VARCHAR"), arg_kind, expr=tree
            )
        # The sensitivity is max_rows: a declared domain of the column does not bound it,
        # since rows with values outside the domain are counted too.
        return DistinctCount(column, None)
    if not kind.needs_bounds:
        if base is not None and base.base is not None:
            return kind(base.base, None)
        tree = binder.qualify(arg, scope, f"the argument of {name}", check=True)
        arg_kind = base.kind if base is not None else _guess_kind(arg)
        column = Column(
            f"expr:{normalize(tree)}", _SQL_TYPES.get(arg_kind, "VARCHAR"), arg_kind, expr=tree
        )
        return kind(column, None)
    override = None
    if out_name is not None and out_name in binder.opts.bounds:
        binder.used_bounds.add(out_name)
        override = make_bounds(binder.opts.bounds[out_name], out_name)
    if base is not None and base.base is not None and override is None:
        col = base.base
        if not col.kind.numeric:
            raise refuse_at(
                f"{name}({col.name}) needs a numeric column; {col.name!r} is {col.sql_type}",
                call.position,
            )
        if base.bounds is None:
            problem = f"{name}({col.name}) needs clamping bounds"
            raise remedied(
                refuse_at(
                    f"{problem}: the curator can declare "
                    f"bounds={{'{col.name}': (lower, upper)}} in add_table, or pass "
                    f"bounds={{'{col.name}': (lower, upper)}} to sql() (bounds must not be "
                    "derived from the data)",
                    call.position,
                ),
                problem,
                Remedy("bounds", col.name),
                where=place(call.position),
            )
        return _make(kind, call, col, base.bounds)
    what = f"{name}({arg.sql(dialect='duckdb')})"
    if override is not None:
        tree = binder.qualify(arg, scope, what, check=True)
        column = Column(f"expr:{normalize(tree)}", "DOUBLE", ColumnKind.REAL, expr=tree)
        return _make(kind, call, column, override)
    rowexpr.check_row(arg, what, lambda m, n: refuse(m, n, text))
    arg = binder.inline(arg, scope)
    derived = rowexpr.value_bounds(
        arg,
        lambda c: binder.leaf(c, scope),
        lambda m, n: refuse(m, n, text),
        what=what,
    )
    tree = binder.qualify(derived.expr, scope, what, check=False)
    sql_type = "BIGINT" if derived.kind is ColumnKind.INTEGER else "DOUBLE"
    column = Column(f"expr:{normalize(tree)}", sql_type, derived.kind, expr=tree)
    return _make(kind, call, column, derived.bounds)


def _make(kind: type[Aggregate], call: AggregateCall, column: Column, b: Bounds) -> Aggregate:
    if issubclass(kind, Variance):
        return kind(column, b, population=call.population)
    if issubclass(kind, Quantile):
        assert call.q is not None
        return kind(column, b, q=call.q)
    return kind(column, b)
