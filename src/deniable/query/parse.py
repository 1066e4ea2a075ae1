"""Stage 1 of the SQL compiler: parse the analyst's text into a small logical query.

The accepted shape::

    SELECT [TOP n] <outputs: group keys, aggregates, constants and arithmetic over them>
    FROM <one table> [AS alias]
    [WHERE <row predicate>]
    [GROUP BY <columns or output positions>]
    [HAVING <predicate over group keys and aggregates>]
    [ORDER BY <expressions over outputs, keys and aggregates>] [LIMIT n] [OFFSET n]

Aggregates are dispatched on sqlglot's expression classes to the classes of
:mod:`deniable.query.aggregates` (``COUNT``, ``COUNT(DISTINCT …)``, ``SUM``, ``AVG``,
``VARIANCE``/``VAR``/``VAR_SAMP``/``VAR_POP``, ``STDDEV``/``STD``/``STDDEV_SAMP``/
``STDDEV_POP``, ``MEDIAN``, ``QUANTILE``/``PERCENTILE_CONT``/``PERCENTILE_DISC``, ``MIN``,
``MAX``). Each aggregate call is replaced in the output, HAVING and ORDER BY trees by a
placeholder column ``__agg<i>`` and described by an :class:`AggregateCall`; identical calls
share one placeholder (they are planned, and paid for, once). Everything around aggregates
is post-processing of noisy values. ``SELECT DISTINCT <columns>`` without aggregates is read
as ``GROUP BY <columns>`` (keys released through partition selection); ``SELECT TOP n`` as
``LIMIT n``.

Refused here, with :class:`~deniable.errors.UnsafeQuery` naming the construct and what to
write instead: ``SELECT *``, several statements, DDL/DML, subqueries outside FROM and WITH,
WITH tables that read from themselves (directly, as ``WITH t AS (SELECT * FROM t)``, or
through each other; names compared case-blind), set operations, window functions, table
functions, sampling clauses. Text that does not parse
raises :class:`~deniable.errors.SQLError` with the line and column sqlglot reports. Nothing
here reads data. Names are resolved against the catalog in
:mod:`deniable.query.catalog.validate`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from fractions import Fraction

import sqlglot
from sqlglot import TokenType, exp
from sqlglot.errors import ParseError, TokenError

from deniable.errors import SQLError, UnsafeQuery
from deniable.query.aggregates import (
    BY_SQL,
    Aggregate,
    Count,
    CountDistinct,
    Quantile,
    Variance,
)
from deniable.query.postprocess import AGG_PREFIX, construct

MAX_QUERY_CHARS = 20_000
MAX_DEPTH = 200
"""Deepest expression nesting accepted (deeper text is refused before sqlglot recurses)."""


# Spellings sqlglot leaves as anonymous functions, and the classes they mean.
_SYNONYMS: dict[str, type[exp.Expression]] = {
    "VAR": exp.Variance,
    "STD": exp.Stddev,
    "STDEVP": exp.StddevPop,
    "VARP": exp.VariancePop,
}

# Clauses of a SELECT that are refused outright, with what to do instead.
_REFUSED_CLAUSES = {
    "qualify": "QUALIFY is not supported; filter the noisy answer with HAVING",
    "windows": "window functions are not supported",
    "into": "SELECT INTO writes data and is refused",
    "laterals": "LATERAL is not supported",
    "pivots": "PIVOT is not supported",
    "sample": "sampling clauses are not supported (the curator can register a sampled table)",
    "connect": "CONNECT BY is not supported",
    "prewhere": "PREWHERE is not supported; use WHERE",
    "distribute": "DISTRIBUTE BY is not supported",
    "sort": "SORT BY is not supported; use ORDER BY",
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
    """One aggregate as written, before its column is resolved.

    Attributes:
        kind: the aggregate's class.
        arg: the argument as written (a column or a row expression), or None for
            ``COUNT(*)``.
        q: the quantile of a quantile aggregate, exact.
        population: VAR_POP/STDDEV_POP (True) rather than the sample versions.
        position: where the argument appears in the text, when known.
        filter: the ``FILTER (WHERE …)`` condition, or None.
    """

    kind: type[Aggregate]
    arg: exp.Expression | None
    q: Fraction | None = None
    population: bool = False
    position: Position | None = None
    filter: exp.Expression | None = None

    @property
    def func(self) -> str:
        """The aggregate's label (``count``, ``sum``, …)."""
        return self.kind.label

    @property
    def column(self) -> str | None:
        """The column's name when the argument is a plain column, else None."""
        arg = _strip_parens(self.arg) if self.arg is not None else None
        return arg.name if isinstance(arg, exp.Column) and not arg.is_star else None

    def same(self, other: AggregateCall) -> bool:
        """Whether two calls compute the same thing (identifiers compared case-blind)."""
        return (
            self.kind is other.kind
            and _canon(self.arg) == _canon(other.arg)
            and _canon(self.filter) == _canon(other.filter)
            and self.q == other.q
            and self.population == other.population
        )


def _canon(node: exp.Expression | None) -> str | None:
    return None if node is None else normalize(_strip_parens(node))


@dataclass(frozen=True, slots=True)
class SelectItem:
    """One output column as written.

    Attributes:
        name: its name (the alias, else a default derived from the expression).
        expr: the expression with aggregate calls replaced by ``__agg<i>`` placeholders.
        position: where it starts in the text, when known.
        written: the expression as written (re-rendered by sqlglot), for messages.
        aliased: whether the analyst gave the name (``AS name``).
    """

    name: str
    expr: exp.Expression
    position: Position | None = None
    written: str = ""
    aliased: bool = False

    @property
    def label(self) -> str:
        """How messages name the output: ``output 'n'`` when aliased, else its SQL text."""
        if self.aliased or not self.written:
            return f"output {self.name!r}"
        return f"the output {self.written}"

    @property
    def key(self) -> str | None:
        """The column name when the output is a plain column, else None."""
        e = _strip_parens(self.expr)
        if isinstance(e, exp.Column) and not e.name.startswith(AGG_PREFIX):
            return e.name
        return None

    @property
    def aggregate_index(self) -> int | None:
        """The aggregate's index when the output is one aggregate call, else None."""
        return aggregate_index(self.expr)


@dataclass(frozen=True)
class ParsedQuery:
    """The logical query: what the analyst asked, before names are resolved.

    Attributes:
        table: the table name as written (the FROM item's alias when it is a subquery).
        alias: the table alias, if any.
        source: the FROM item (a table or a subquery), joined with ``joins``.
        joins: the joins of the FROM clause, as written.
        ctes: the common table expressions, by name.
        outputs: the output columns in order.
        aggregates: the distinct aggregate calls; ``__agg<i>`` stands for ``aggregates[i]``.
        where: the row predicate's AST (validated later), or None.
        group_by: group-key expressions as written (positions already resolved).
        having: the HAVING predicate with aggregate placeholders, or None.
        order_by: post-processing sort: (expression with placeholders, descending).
        limit: post-processing row limit.
        offset: post-processing offset.
        normalized: the query re-rendered by sqlglot with normalised identifiers (cache key).
        text: the original text (recorded in the ledger; never executed).
    """

    table: str
    alias: str | None
    source: exp.Expression
    joins: tuple[exp.Join, ...]
    ctes: tuple[tuple[str, exp.Select], ...]
    outputs: tuple[SelectItem, ...]
    aggregates: tuple[AggregateCall, ...]
    where: exp.Expression | None
    group_by: tuple[exp.Expression, ...]
    having: exp.Expression | None
    order_by: tuple[tuple[exp.Expression, bool], ...]
    limit: int | None
    offset: int | None
    normalized: str
    text: str


def aggregate_index(node: exp.Expression) -> int | None:
    """``i`` when ``node`` (parentheses aside) is the placeholder ``__agg<i>``, else None."""
    e = _strip_parens(node)
    if isinstance(e, exp.Column) and e.name.startswith(AGG_PREFIX) and not e.table:
        return int(e.name[len(AGG_PREFIX) :])
    return None


def _strip_parens(node: exp.Expression) -> exp.Expression:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


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
    """Build an :class:`UnsafeQuery` naming the place in the text, when known.

    The one refusal helper of the compiler: every stage builds its refusals through it.
    """
    pos = position_of(node, text) if text else None
    return refuse_at(message, pos)


def refuse_at(message: str, pos: Position | None) -> UnsafeQuery:
    """An :class:`UnsafeQuery` with ``(line L, column C)`` appended when ``pos`` is known."""
    return UnsafeQuery(message + place(pos))


def place(pos: Position | None) -> str:
    """`` (line L, column C)``, or empty when ``pos`` is unknown."""
    return "" if pos is None else f" (line {pos.line}, column {pos.column})"


def parse(text: str) -> ParsedQuery:
    """Parse one SELECT statement into a :class:`ParsedQuery`; no privacy loss (no data read).

    Raises:
        SQLError: the text does not parse, nests too deeply, or holds zero or several
            statements.
        UnsafeQuery: a construct outside the supported shape (the message says what to do).

    Examples:
        >>> q = parse("SELECT editor, COUNT(*) AS n FROM students GROUP BY editor")
        >>> [o.name for o in q.outputs], [g.sql() for g in q.group_by]
        (['editor', 'n'], ['editor'])
    """
    if not isinstance(text, str):
        raise SQLError("the query must be a string")
    if len(text) > MAX_QUERY_CHARS:
        raise SQLError(f"the query is longer than {MAX_QUERY_CHARS} characters")
    text_for_parser, top = _strip_top(text)
    _check_depth(text_for_parser)
    try:
        statements = [s for s in sqlglot.parse(text_for_parser, read="duckdb") if s is not None]
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
    except RecursionError:
        raise SQLError("the query nests too deeply; simplify it") from None
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
            f"only SELECT queries are answered; {_article(kind)} {kind} statement is refused "
            "(deniable never runs DDL, DML or commands)"
        )
    deepest = _tree_depth(stmt)
    if deepest > MAX_DEPTH:
        raise SQLError(
            f"the query's expressions nest {deepest} levels deep (at most {MAX_DEPTH}); "
            "simplify it (e.g. fewer terms in one sum)"
        )
    if top is not None:
        if stmt.args.get("limit"):
            raise refuse("use either TOP or LIMIT, not both", stmt.args["limit"], text)
        stmt.set("limit", exp.Limit(expression=exp.Literal.number(top)))
    try:
        return _parse_select(_canonical(stmt), text)
    except RecursionError:
        raise SQLError("the query nests too deeply; simplify it") from None


def _tree_depth(root: exp.Expression) -> int:
    """The depth of a syntax tree, computed without recursion.

    A long chain ``a + a + …`` is a deep tree that every later stage would walk recursively.
    """
    deepest = 0
    stack: list[tuple[exp.Expression, int]] = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        for child in node.iter_expressions():
            stack.append((child, depth + 1))
    return deepest


def _article(word: str) -> str:
    return "an" if word[:1].upper() in "AEIOU" else "a"


def _check_depth(text: str) -> None:
    """Refuse text whose parentheses nest deeper than :data:`MAX_DEPTH` (cheap, exact)."""
    depth = deepest = 0
    for ch in text:
        if ch == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif ch == ")":
            depth -= 1
    if deepest > MAX_DEPTH:
        raise SQLError(f"the query nests parentheses {deepest} deep (at most {MAX_DEPTH})")


_TOP = re.compile(r"TOP", re.IGNORECASE)


def _strip_top(text: str) -> tuple[str, int | None]:
    """``SELECT [DISTINCT] TOP n …`` → the text without ``TOP n``, and ``n``.

    DuckDB's grammar has no TOP; T-SQL users write it for LIMIT. Found through sqlglot's
    tokenizer (so comments and strings are never mistaken for it).
    """
    try:
        tokens = sqlglot.tokenize(text, read="duckdb")
    except TokenError:
        return text, None
    i = 0
    if i < len(tokens) and tokens[i].token_type == TokenType.SELECT:
        i += 1
        if i < len(tokens) and tokens[i].token_type == TokenType.DISTINCT:
            i += 1
        if (
            i + 1 < len(tokens)
            and _TOP.fullmatch(tokens[i].text)
            and tokens[i + 1].token_type == TokenType.NUMBER
        ):
            n_text = tokens[i + 1].text
            if not n_text.isdigit():
                raise UnsafeQuery("TOP needs a non-negative integer literal; or use LIMIT n")
            start, end = tokens[i].start, tokens[i + 1].end + 1
            return text[:start] + " " * (end - start) + text[end:], int(n_text)
        if (
            i + 1 < len(tokens)
            and _TOP.fullmatch(tokens[i].text)
            and tokens[i + 1].token_type == TokenType.L_PAREN
        ):
            raise UnsafeQuery("TOP (expression) is not supported; write LIMIT n")
    return text, None


def _canonical(stmt: exp.Select) -> exp.Select:
    """Spell synonyms one way (``VAR`` → ``VARIANCE``, ``STD`` → ``STDDEV``)."""

    def fix(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Anonymous):
            cls = _SYNONYMS.get(str(node.this).upper())
            if cls is not None and len(node.expressions) == 1:
                return cls(this=node.expressions[0])
        return node

    out = stmt.transform(fix)
    assert isinstance(out, exp.Select)
    return out


def _parse_select(stmt: exp.Select, text: str) -> ParsedQuery:
    for clause, message in _REFUSED_CLAUSES.items():
        value = stmt.args.get(clause)
        if value:
            node = value[0] if isinstance(value, list) else value
            raise refuse(message, node if isinstance(node, exp.Expression) else None, text)
    allowed = _relations(stmt, text)
    for sub in stmt.find_all(exp.Select, exp.Subquery, exp.SetOperation):
        if isinstance(sub, exp.SetOperation):
            raise refuse("UNION, INTERSECT and EXCEPT are not supported", sub, text)
        if not any(sub is a for a in allowed):  # type: ignore[comparison-overlap]
            raise refuse(
                "subqueries are supported only in FROM and WITH (as a table); write the "
                "condition as a join or a WHERE on the table",
                sub,
                text,
            )
    for win in stmt.find_all(exp.Window):
        raise refuse(
            "window functions (OVER) are not supported: they compute per-row values; "
            "aggregate with GROUP BY instead",
            win,
            text,
        )
    normalized = normalize(stmt)
    table, alias, source, joins, ctes = _parse_from(stmt, text)
    calls: list[AggregateCall] = []

    def bind(node: exp.Expression) -> exp.Expression:
        return _replace_aggregates(node, calls, text)

    raw_outputs = list(stmt.expressions)
    if not raw_outputs:
        raise SQLError("the SELECT list is empty")
    items = [_parse_output(e, text, i, bind) for i, e in enumerate(raw_outputs)]
    outputs = _unique_names(items, raw_outputs, calls)
    group_exprs = _group_expressions(stmt, text, raw_outputs)
    distinct = stmt.args.get("distinct")
    if distinct:
        if group_exprs or calls or distinct.args.get("on"):
            raise refuse(
                "SELECT DISTINCT with aggregates or GROUP BY is not supported; use GROUP BY "
                "with aggregates",
                distinct,
                text,
            )
        group_exprs = [o.expr for o in outputs]
    for g in group_exprs:
        if g.find(exp.AggFunc) is not None:
            raise refuse("GROUP BY cannot contain an aggregate", g, text)
    group_by = tuple(group_exprs)
    where_clause = stmt.args.get("where")
    where = where_clause.this if isinstance(where_clause, exp.Where) else None
    if where is not None:
        for agg in where.find_all(exp.AggFunc):
            raise refuse(
                "aggregates are not allowed in WHERE (it filters rows); use HAVING", agg, text
            )
    having_clause = stmt.args.get("having")
    having = bind(having_clause.this) if isinstance(having_clause, exp.Having) else None
    order = _parse_order(stmt, text, bind)
    limit = _parse_count(stmt.args.get("limit"), "LIMIT", text)
    offset = _parse_count(stmt.args.get("offset"), "OFFSET", text)
    return ParsedQuery(
        table=table,
        alias=alias,
        source=source,
        joins=joins,
        ctes=ctes,
        outputs=tuple(outputs),
        aggregates=tuple(calls),
        where=where,
        group_by=group_by,
        having=having,
        order_by=order,
        limit=limit,
        offset=offset,
        normalized=normalized,
        text=text,
    )


def _replace_aggregates(
    node: exp.Expression, calls: list[AggregateCall], text: str
) -> exp.Expression:
    """Replace every aggregate call in ``node`` by its ``__agg<i>`` placeholder."""

    def visit(n: exp.Expression) -> exp.Expression:
        call = _parse_aggregate(n, text)
        if call is None:
            return n
        for i, seen in enumerate(calls):
            if seen.same(call):
                return exp.column(f"{AGG_PREFIX}{i}")
        calls.append(call)
        return exp.column(f"{AGG_PREFIX}{len(calls) - 1}")

    return node.copy().transform(visit, copy=False)


def _unique_names(
    items: list[SelectItem], nodes: list[exp.Expression], calls: list[AggregateCall]
) -> list[SelectItem]:
    """Refuse repeated aliases; number repeated default names (``variance_x_2``)."""
    aliased = [isinstance(n, exp.Alias) for n in nodes]
    seen: set[str] = set()
    for o, a in zip(items, aliased, strict=True):
        if a:
            if o.name.lower() in seen:
                raise refuse(f"the output name {o.name!r} is used twice; give each its own alias")
            seen.add(o.name.lower())
    out: list[SelectItem] = []
    taken = set(seen)
    for o, a in zip(items, aliased, strict=True):
        if a:
            out.append(o)
            continue
        base = o.name
        idx = o.aggregate_index
        if idx is not None:
            base = _default_name(calls[idx])
        name, i = base, 2
        while name.lower() in taken:
            name, i = f"{base}_{i}", i + 1
        taken.add(name.lower())
        out.append(replace(o, name=name))
    return out


def normalize(stmt: exp.Expression) -> str:
    """Render ``stmt`` canonically: identifiers normalised, sqlglot's own spacing and case."""
    from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

    copy = normalize_identifiers(stmt.copy(), dialect="duckdb")
    return copy.sql(dialect="duckdb", normalize=True)


def _relations(stmt: exp.Select, text: str) -> list[exp.Expression]:
    """The SELECTs and subqueries that stand for tables.

    The statement, CTE bodies, and subqueries in FROM and JOIN (recursively).
    """
    allowed: list[exp.Expression] = [stmt]
    todo: list[exp.Select] = [stmt]
    with_ = stmt.args.get("with_")
    if isinstance(with_, exp.With):
        if with_.args.get("recursive"):
            raise refuse("WITH RECURSIVE is not supported", with_, text)
        _check_cte_cycles(with_, text)
        for cte in with_.expressions:
            body = cte.this
            if not isinstance(body, exp.Select):
                raise refuse("a WITH table must be one SELECT (no UNION)", cte, text)
            allowed.append(body)
            todo.append(body)
    while todo:
        sel = todo.pop()
        if sel is not stmt and sel.args.get("with_"):
            raise refuse("WITH is supported at the top of the query only", sel, text)
        items = [sel.args["from_"].this] if isinstance(sel.args.get("from_"), exp.From) else []
        items += [j.this for j in sel.args.get("joins") or []]
        for item in items:
            if isinstance(item, exp.Subquery):
                allowed.append(item)
                if isinstance(item.this, exp.Select):
                    allowed.append(item.this)
                    todo.append(item.this)
    return allowed


def _check_cte_cycles(with_: exp.With, text: str) -> None:
    """Refuse WITH tables that name themselves, directly or through each other.

    ``WITH t AS (SELECT * FROM t)`` (names compared case-blind, as SQL identifiers are) or
    ``WITH a AS (… FROM b), b AS (… FROM a)``: resolving them would never end. Refused
    here, from the text alone, before anything is read.

    Raises:
        UnsafeQuery: naming the WITH table(s) of the cycle.
    """
    names: dict[str, str] = {}
    refs: dict[str, set[str]] = {}
    for cte in with_.expressions:
        names[cte.alias.lower()] = cte.alias
    for cte in with_.expressions:
        used = {t.name.lower() for t in cte.this.find_all(exp.Table) if not t.args.get("db")}
        refs[cte.alias.lower()] = {u for u in used if u in names}
    for start in names:
        path = [start]
        stack = [(start, iter(sorted(refs[start])))]
        while stack:
            _, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                path.pop()
                continue
            if nxt == start:
                cycle = [names[n] for n in path]
                if len(cycle) == 1:
                    what = f"the WITH table {cycle[0]!r} reads from itself"
                else:
                    what = (
                        "the WITH tables "
                        + " → ".join(repr(n) for n in [*cycle, cycle[0]])
                        + " read from each other"
                    )
                raise refuse(
                    f"{what}; WITH tables cannot be recursive: read the registered table "
                    "under another WITH name (e.g. WITH t2 AS (SELECT … FROM t))",
                    with_,
                    text,
                )
            if nxt not in path:
                path.append(nxt)
                stack.append((nxt, iter(sorted(refs[nxt]))))


_From = tuple[
    str, str | None, exp.Expression, tuple[exp.Join, ...], tuple[tuple[str, exp.Select], ...]
]


def _parse_from(stmt: exp.Select, text: str) -> _From:
    src = stmt.args.get("from_")
    if not isinstance(src, exp.From):
        raise refuse("the query needs FROM <table>")
    item = src.this
    ctes: list[tuple[str, exp.Select]] = []
    with_ = stmt.args.get("with_")
    if isinstance(with_, exp.With):
        for cte in with_.expressions:
            assert isinstance(cte.this, exp.Select)
            ctes.append((cte.alias, cte.this))
    joins = tuple(stmt.args.get("joins") or ())
    if isinstance(item, exp.Subquery):
        alias = item.alias or None
        if alias is None:
            raise refuse("a subquery in FROM needs an alias: (SELECT …) AS name", item, text)
        return alias, alias, item, joins, tuple(ctes)
    if not isinstance(item, exp.Table) or not isinstance(item.this, exp.Identifier):
        raise refuse(
            "FROM must name a registered table, a WITH table or a subquery (no table functions)",
            item,
            text,
        )
    _check_table(item, text)
    alias_node = item.args.get("alias")
    alias = alias_node.name or None if isinstance(alias_node, exp.TableAlias) else None
    return item.this.name, alias, item, joins, tuple(ctes)


def _check_table(table: exp.Table, text: str) -> None:
    for arg in ("db", "catalog"):
        if table.args.get(arg):
            raise refuse("FROM must name a registered table without schema or catalog", table, text)
    for arg, value in table.args.items():
        if arg not in ("this", "alias", "db", "catalog") and value:
            raise refuse(f"FROM {table.name} has an unsupported modifier ({arg})", table, text)
    alias_node = table.args.get("alias")
    if isinstance(alias_node, exp.TableAlias) and alias_node.args.get("columns"):
        raise refuse("column aliases on the table are not supported", table, text)


def _group_expressions(
    stmt: exp.Select, text: str, outputs: list[exp.Expression]
) -> list[exp.Expression]:
    group = stmt.args.get("group")
    if group is None:
        return []
    for arg in ("grouping_sets", "cube", "rollup", "totals", "all"):
        if group.args.get(arg):
            raise refuse(
                "GROUPING SETS, CUBE, ROLLUP and GROUP BY ALL are not supported; send one "
                "query per grouping (or name the GROUP BY columns)",
                group,
            )
    out: list[exp.Expression] = []
    for e in group.expressions:
        if isinstance(e, exp.Rollup | exp.Cube | exp.GroupingSets):
            raise refuse(
                "GROUPING SETS, CUBE, ROLLUP and GROUP BY ALL are not supported; send one "
                "query per grouping",
                e,
                text,
            )
        if isinstance(e, exp.Literal) and not e.is_string and e.this.isdigit():
            i = int(e.this)
            if not 1 <= i <= len(outputs):
                raise refuse(f"GROUP BY {i} is not a position of the SELECT list", e, text)
            target = outputs[i - 1]
            out.append(target.this if isinstance(target, exp.Alias) else target)
        else:
            out.append(e)
    return out


def _parse_output(
    node: exp.Expression,
    text: str,
    index: int,
    bind: object,
) -> SelectItem:
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
    if isinstance(inner, exp.Column) and inner.is_star:
        raise refuse("SELECT t.* would release rows; select aggregates", inner, text)
    assert callable(bind)
    expr = bind(inner)
    assert isinstance(expr, exp.Expression)
    aliased = name is not None
    if name is None:
        plain = _strip_parens(inner)
        name = plain.name if isinstance(plain, exp.Column) else f"col{index}"
    return SelectItem(
        name=name,
        expr=expr,
        position=pos,
        written=inner.sql(dialect="duckdb"),
        aliased=aliased,
    )


def _default_name(call: AggregateCall) -> str:
    label = call.kind.label
    if call.arg is None:
        return label
    if call.column is not None:
        base = call.column
    else:
        names = [c.name for c in call.arg.find_all(exp.Column)]
        base = "_".join(dict.fromkeys(names)) or "expr"
    if issubclass(call.kind, Quantile) and call.kind.sql == Quantile.sql:
        return f"quantile_{base}_{float(call.q or 0):g}".replace(".", "_")
    return f"{label}_{base}"


def _argument(node: exp.Expression | None, func: str, text: str) -> exp.Expression:
    """An aggregate's argument: a column or a row expression, never ``*``.

    Checked against the catalog later.
    """
    if (
        node is None
        or isinstance(node, exp.Star)
        or (isinstance(node, exp.Column) and node.is_star)
    ):
        raise refuse(f"{func} needs a column or an expression, not *", node, text)
    if isinstance(node, exp.Column) and node.args.get("db"):
        raise refuse("qualify columns with a table name or alias only", node, text)
    return node


def _parse_aggregate(node: exp.Expression, text: str) -> AggregateCall | None:
    """The :class:`AggregateCall` of ``node``, None when it is no aggregate."""
    if isinstance(node, exp.WithinGroup):
        # PERCENTILE_CONT(q) WITHIN GROUP (ORDER BY x): the q-quantile of x
        inner, order = node.this, node.expression
        ordered = order.expressions if isinstance(order, exp.Order) else []
        if (
            not isinstance(inner, exp.PercentileCont | exp.PercentileDisc)
            or len(ordered) != 1
            or inner.args.get("expression") is not None
        ):
            raise refuse(
                "WITHIN GROUP is supported as PERCENTILE_CONT(q) WITHIN GROUP (ORDER BY col); "
                "or write QUANTILE(col, q)",
                node,
                text,
            )
        q_lit = _quantile_literal(inner.this, text)
        if ordered[0].args.get("desc"):
            q_lit = 1 - q_lit
        col = _argument(ordered[0].this, "PERCENTILE_CONT", text)
        return AggregateCall(Quantile, col, q=q_lit, position=position_of(col, text))
    if isinstance(node, exp.Filter):
        inner = node.this
        where = node.expression
        call = _parse_aggregate(inner, text)
        if call is None or not isinstance(where, exp.Where):
            raise refuse("FILTER (WHERE …) applies to an aggregate", node, text)
        return AggregateCall(
            call.kind, call.arg, call.q, call.population, call.position, filter=where.this
        )
    kind = BY_SQL.get(type(node))
    if kind is None:
        if isinstance(node, exp.AggFunc) or (
            isinstance(node, exp.Anonymous) and str(node.this).upper() in _KNOWN_AGGREGATES
        ):
            fname = node.sql_name() if isinstance(node, exp.AggFunc) else str(node.this)
            raise refuse(
                f"the aggregate {fname.upper()} is not supported; use COUNT, SUM, AVG, "
                "VARIANCE, STDDEV, MEDIAN, QUANTILE, MIN or MAX",
                node,
                text,
            )
        return None
    for inner in node.find_all(exp.AggFunc):
        if inner is not node:  # type: ignore[comparison-overlap]
            raise refuse(
                "aggregates cannot be nested; ask the inner aggregate in a query of its own "
                "(its noisy answer can then be post-processed freely)",
                inner,
                text,
            )
    if kind is Count:
        arg = node.this
        if isinstance(arg, exp.Star) or arg is None:
            return AggregateCall(Count, None)
        if isinstance(arg, exp.Distinct):
            cols = arg.expressions
            if len(cols) != 1:
                raise refuse("COUNT(DISTINCT ...) takes one column", node, text)
            col = _argument(cols[0], "COUNT(DISTINCT ...)", text)
            return AggregateCall(CountDistinct, col, position=position_of(cols[0], text))
        col = _argument(arg, "COUNT", text)
        return AggregateCall(Count, col, position=position_of(arg, text))
    if issubclass(kind, Quantile) and kind.sql == Quantile.sql:
        arg_name = "quantile" if isinstance(node, exp.Quantile) else "expression"
        _no_extra_args(node, ("this", arg_name), text)
        col = _argument(node.this, "QUANTILE", text)
        q_lit = _quantile_literal(node.args.get(arg_name), text)
        return AggregateCall(kind, col, q=q_lit, position=position_of(node.this, text))
    _no_extra_args(node, ("this",), text)
    if isinstance(node.this, exp.Distinct):
        raise refuse(
            f"{kind.label.upper()}(DISTINCT ...) is not supported; only COUNT(DISTINCT ...)",
            node,
            text,
        )
    col = _argument(node.this, kind.label.upper(), text)
    q: Fraction | None = None
    if issubclass(kind, Quantile):
        q = kind.q
    population = issubclass(kind, Variance) and isinstance(node, exp.VariancePop | exp.StddevPop)
    return AggregateCall(
        kind, col, q=q, population=population, position=position_of(node.this, text)
    )


_KNOWN_AGGREGATES = frozenset(
    {
        "MODE",
        "STRING_AGG",
        "LISTAGG",
        "GROUP_CONCAT",
        "ARRAY_AGG",
        "BIT_AND",
        "BIT_OR",
        "BOOL_AND",
        "BOOL_OR",
        "PRODUCT",
        "KURTOSIS",
        "SKEWNESS",
        "ENTROPY",
        "HISTOGRAM",
        "FIRST",
        "LAST",
        "ANY_VALUE",
        "ARG_MAX",
        "ARG_MIN",
        "APPROX_COUNT_DISTINCT",
    }
)


def _no_extra_args(node: exp.Expression, allowed: tuple[str, ...], text: str) -> None:
    for k, v in node.args.items():
        if k not in allowed and v:
            raise refuse(f"{construct(node)} has an unsupported argument", node, text)


def _quantile_literal(node: exp.Expression | None, text: str) -> Fraction:
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            q = Fraction(node.this)
        except (ValueError, ZeroDivisionError):
            q = Fraction(-1)
        if 0 <= q <= 1:
            return q
    raise refuse("QUANTILE(col, q) needs a numeric literal q between 0 and 1", node, text)


def _parse_order(
    stmt: exp.Select, text: str, bind: object
) -> tuple[tuple[exp.Expression, bool], ...]:
    order = stmt.args.get("order")
    if order is None:
        return ()
    out: list[tuple[exp.Expression, bool]] = []
    assert callable(bind)
    for o in order.expressions:
        if not isinstance(o, exp.Ordered):
            raise refuse("unsupported ORDER BY entry", o, text)
        expr = bind(o.this)
        assert isinstance(expr, exp.Expression)
        out.append((expr, bool(o.args.get("desc"))))
    return tuple(out)


def _parse_count(node: exp.Expression | None, what: str, text: str) -> int | None:
    if node is None:
        return None
    value = node.args.get("expression") if isinstance(node, exp.Limit | exp.Offset) else node
    if isinstance(value, exp.Literal) and not value.is_string and value.this.isdigit():
        return int(value.this)
    raise refuse(f"{what} needs a non-negative integer literal", node, text)
