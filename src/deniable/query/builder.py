"""A Python query builder that writes the same SQL an analyst would type.

The builder is a front end to the SQL compiler, not a second query language: every
:class:`Query` becomes one sqlglot ``SELECT`` tree (:meth:`Query.to_expression`) whose duckdb
rendering (:meth:`Query.to_sql`) parses back to that very tree. A builder query therefore has
the same normalised SQL as the equivalent hand-written text, hence the same plan, the same
privacy charge, the same output names and the same cache entry. The builder only assembles a
syntax tree: it never reads data, never evaluates anything and has no privacy loss; the
charge happens when the query is answered.

Building blocks:

* :func:`col` names a column, :func:`lit` makes a constant. Expressions support ``+ - * / %``,
  unary ``-``, the comparisons ``== != < <= > >=``, ``&``/``|``/``~`` for ``AND``/``OR``/``NOT``
  (wrap comparisons in parentheses: ``(col("a") > 0) & (col("b") < 5)``), and the methods
  :meth:`Expr.is_null`, :meth:`Expr.is_not_null`, :meth:`Expr.isin`, :meth:`Expr.between`,
  :meth:`Expr.like`, :meth:`Expr.cast` and :meth:`Expr.alias`.
* :func:`when` ... ``.when(...)`` ... ``.otherwise(...)`` builds ``CASE``.
* Row functions: :func:`abs_`, :func:`round_`, :func:`floor`, :func:`ceil`, :func:`sqrt`,
  :func:`coalesce`, :func:`lower`, :func:`upper`, :func:`length`, :func:`substr`,
  :func:`date_trunc`, :func:`year`, :func:`month`, :func:`day`.
* Aggregates: :func:`count`, :func:`count_distinct`, :func:`sum_`, :func:`mean`,
  :func:`variance`, :func:`stddev`, :func:`median`, :func:`quantile`, :func:`min_`,
  :func:`max_`; :meth:`Aggregate.filter` adds ``FILTER (WHERE ...)``. Aggregates are
  expressions, so ``sum_("a") / count()`` is post-processing arithmetic over two aggregates.

Strings: where an argument is the *subject* of a function or aggregate (``sum_("x")``,
``lower("name")``, ``coalesce("a", "b")``, ``group_by("k")``, ``order_by("n")``) a string names
a column; everywhere else (operands of operators, ``isin``, ``between``, ``like``, ``when``
values) a Python value is a constant. Use :func:`lit` for a string constant in a subject
position and :func:`col` for a column in a value position.

Names: the builder never invents an output name. An output without :meth:`Expr.alias` gets
the default name the SQL parser gives the same text (``count``, ``avg_value``...).

Spellings (they matter, because the cache key is the normalised SQL text): ``mean`` is
``AVG``, ``variance``/``stddev`` are ``VARIANCE``/``STDDEV`` (``VAR_POP``/``STDDEV_POP`` with
``population=True``), ``quantile`` is ``QUANTILE(x, q)``, ``count_distinct`` is
``COUNT(DISTINCT x)``, ``~x.like(p)`` is ``x NOT LIKE p``, ``x.is_not_null()`` is
``NOT x IS NULL`` (the parser's reading of ``x IS NOT NULL``), an inner join is
``JOIN ... USING (...)`` and a left join ``LEFT JOIN``. A comparison inside a comparison is
always parenthesised (duckdb refuses ``a = b < c``).

Errors: misuse (a wrong type, an aggregate in ``where``, a negative ``limit``...) raises
:class:`~deniable.errors.InvalidParameter` when the query is built; whether the finished query
is answerable with differential privacy is decided by the compiler when it is run.

Examples:
    >>> q = (
    ...     Query("events")
    ...     .where(col("value") > 0)
    ...     .group_by("category")
    ...     .agg(count(), mean("value"))
    ... )
    >>> q.to_sql()
    'SELECT category, COUNT(*), AVG(value) FROM events WHERE value > 0 GROUP BY category'
    >>> Query("t").agg((sum_("x") / count()).alias("m")).to_sql()
    'SELECT SUM(x) / COUNT(*) AS m FROM t'
    >>> Query("t").agg(count().filter(col("x").is_not_null()).alias("n")).to_sql()
    'SELECT COUNT(*) FILTER(WHERE NOT x IS NULL) AS n FROM t'
    >>> when(col("x") > 0, 1).otherwise(0).sql()
    'CASE WHEN x > 0 THEN 1 ELSE 0 END'
"""

from __future__ import annotations

import datetime as _dt
import math
import numbers
from collections.abc import Iterable, Sequence
from decimal import Decimal
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Literal, NoReturn, Protocol, TypeAlias

import sqlglot
from sqlglot import exp

if TYPE_CHECKING:
    from deniable.query.answer import Answer
    from deniable.query.program import QueryProgram
from sqlglot.errors import ParseError, SqlglotError

from deniable.errors import InvalidParameter

__all__ = [
    "Aggregate",
    "Case",
    "Expr",
    "Ordering",
    "Query",
    "abs_",
    "asc",
    "ceil",
    "coalesce",
    "col",
    "count",
    "count_distinct",
    "date_trunc",
    "day",
    "desc",
    "floor",
    "length",
    "lit",
    "lower",
    "max_",
    "mean",
    "median",
    "min_",
    "month",
    "quantile",
    "round_",
    "sqrt",
    "stddev",
    "substr",
    "sum_",
    "upper",
    "variance",
    "when",
    "year",
]

DIALECT = "duckdb"

Scalar: TypeAlias = bool | int | float | str | Fraction | Decimal | _dt.date | _dt.datetime | None
"""Python constants the builder turns into SQL literals."""

ValueLike: TypeAlias = "Expr | Scalar"
"""An operand: an expression, or a constant (a string here is a string constant)."""

ColumnLike: TypeAlias = "Expr | str"
"""A subject: an expression, or a column name."""

DATE_TRUNC_UNITS = ("year", "quarter", "month", "week", "day", "hour", "minute", "second")

# -- precedence -----------------------------------------------------------------------------
#
# sqlglot renders trees verbatim: it inserts no parentheses. The builder therefore adds an
# exp.Paren where the duckdb parser needs one to rebuild the same tree, following sqlglot's
# parser levels (OR < AND < NOT < IS < equality < comparison < BETWEEN/IN/LIKE < additive <
# multiplicative < unary minus < atoms) and the parentheses its parser inserts by itself
# around IS operands. Minimal parentheses also make the rendering match what people write,
# which matters because the normalised text is the cache key. The round-trip property
# (render, parse, same tree) is tested on random expressions.

_OR = 1
_AND = 2
_NOT = 3
_IS = 4  # duckdb parses IS with low precedence: a = b IS NULL means (a = b) IS NULL
_EQUALITY = 5
_COMPARISON = 6
_RANGE = 7
_TERM = 9  # 8 would be bitwise operators, which the builder does not offer
_FACTOR = 10
_UNARY = 12
_ATOM = 13
_PRECEDENCE: tuple[tuple[type[exp.Expression] | tuple[type[exp.Expression], ...], int], ...] = (
    (exp.Or, _OR),
    (exp.And, _AND),
    (exp.Not, _NOT),
    (exp.Is, _IS),
    ((exp.EQ, exp.NEQ), _EQUALITY),
    ((exp.GT, exp.GTE, exp.LT, exp.LTE), _COMPARISON),
    ((exp.Between, exp.In, exp.Like), _RANGE),
    ((exp.Add, exp.Sub), _TERM),
    ((exp.Mul, exp.Div, exp.Mod), _FACTOR),
    (exp.Neg, _UNARY),
)


def _precedence(node: exp.Expression | type[exp.Expression]) -> int:
    kind = node if isinstance(node, type) else type(node)
    for cls, level in _PRECEDENCE:
        if issubclass(kind, cls):
            return level
    return _ATOM


def _wrap(node: exp.Expression, *, below: int) -> exp.Expression:
    """``node`` in parentheses when its operator binds looser than ``below``."""
    return exp.Paren(this=node) if _precedence(node) < below else node


# -- errors and literals --------------------------------------------------------------------


def _fail(message: str) -> NoReturn:
    raise InvalidParameter(message)


def _type_name(value: object) -> str:
    return type(value).__name__


def _terminating_decimal(q: Fraction) -> str | None:
    """The exact decimal text of ``q`` when its expansion terminates, else None."""
    den = q.denominator
    twos = fives = 0
    while den % 2 == 0:
        den, twos = den // 2, twos + 1
    while den % 5 == 0:
        den, fives = den // 5, fives + 1
    if den != 1:
        return None
    digits = max(twos, fives)
    scaled = abs(q.numerator) * (10**digits // q.denominator)
    if digits == 0:
        return str(scaled)
    text = str(scaled).rjust(digits + 1, "0")
    return f"{text[:-digits]}.{text[-digits:]}"


def _number(text: str, *, negative: bool) -> exp.Expression:
    # The parser reads "-1" as Neg(1); build the same tree.
    node: exp.Expression = exp.Literal.number(text)
    return exp.Neg(this=node) if negative else node


def _literal(value: object) -> exp.Expression:
    """The sqlglot literal of a Python constant; InvalidParameter for anything else."""
    if value is None:
        return exp.Null()
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, numbers.Integral):
        v = int(value)
        return _number(str(abs(v)), negative=v < 0)
    if isinstance(value, Fraction):
        text = _terminating_decimal(value)
        if text is None:
            _fail(
                f"the fraction {value} has no exact decimal form for SQL; "
                "pass a float or a decimal fraction"
            )
        return _number(text, negative=value < 0)
    if isinstance(value, numbers.Real):
        f = float(value)
        if not math.isfinite(f):
            _fail("NaN and infinite numbers cannot be written as SQL constants")
        return _number(repr(abs(f)), negative=math.copysign(1.0, f) < 0)
    if isinstance(value, Decimal):
        if not value.is_finite():
            _fail("NaN and infinite numbers cannot be written as SQL constants")
        return _number(format(abs(value), "f"), negative=value.is_signed())
    if isinstance(value, str):
        return exp.Literal.string(value)
    if isinstance(value, _dt.datetime):
        if value.tzinfo is not None:
            _fail("timezone-aware datetimes are not supported; pass a naive (UTC) datetime")
        text = value.isoformat(sep=" ")
        return exp.Cast(this=exp.Literal.string(text), to=_data_type("TIMESTAMP"))
    if isinstance(value, _dt.date):
        return exp.Cast(this=exp.Literal.string(value.isoformat()), to=_data_type("DATE"))
    _fail(
        f"a {_type_name(value)} cannot be used in a query; use col(name) for a column, or a "
        "bool, int, float, str, Fraction, Decimal, date, datetime or None for a constant"
    )


def _data_type(name: object) -> exp.DataType:
    if not isinstance(name, str) or not name.strip():
        _fail(f"a SQL type name such as 'DOUBLE' is expected, not a {_type_name(name)}")
    try:
        return exp.DataType.build(name, dialect=DIALECT)
    except (ParseError, SqlglotError, ValueError):
        _fail(f"{name!r} is not a SQL type duckdb knows (try 'DOUBLE', 'BIGINT', 'VARCHAR')")


def _identifier(name: object, what: str) -> exp.Identifier:
    if not isinstance(name, str) or not name:
        _fail(f"{what} must be a non-empty string, not {_type_name(name)}")
    if "\x00" in name:
        _fail(f"{what} must not contain NUL characters")
    # Plain names stay unquoted (case-insensitive, like typed SQL); others are quoted.
    return exp.to_identifier(name)


def _has_aggregate(node: exp.Expression) -> bool:
    return isinstance(node, exp.AggFunc) or node.find(exp.AggFunc) is not None


# -- expressions ----------------------------------------------------------------------------


class Expr:
    """An immutable SQL expression: a column, a constant, an operator, a function call.

    Build one with :func:`col`, :func:`lit`, the functions and aggregates of this module or
    Python operators; every operation returns a new expression and leaves its operands
    unchanged. Expressions cannot be used as Python booleans: write ``&``, ``|`` and ``~``
    instead of ``and``, ``or`` and ``not``, and parenthesise comparisons.

    Examples:
        >>> ((col("a") + 1) * 2 >= col("b")).sql()
        '(a + 1) * 2 >= b'
        >>> (~col("k").isin(["x", "y"]) | col("k").is_null()).sql()
        "NOT k IN ('x', 'y') OR k IS NULL"
    """

    __slots__ = ("_node",)
    __hash__ = None  # type: ignore[assignment]  # == builds an expression, so no hashing

    def __init__(self, node: exp.Expression) -> None:
        """Wrap ``node`` (internal: use :func:`col`, :func:`lit` and the functions)."""
        if not isinstance(node, exp.Expression):
            _fail(f"an expression wraps a sqlglot node, not a {_type_name(node)}")
        self._node = node

    # -- access ----------------------------------------------------------------------------

    def to_sqlglot(self) -> exp.Expression:
        """A copy of the sqlglot tree of this expression (safe to modify)."""
        return self._node.copy()

    def sql(self, dialect: str = DIALECT) -> str:
        """The expression rendered as SQL text in ``dialect``."""
        return self._node.sql(dialect=_dialect(dialect))

    @property
    def is_aggregate(self) -> bool:
        """Whether an aggregate occurs anywhere in the expression."""
        return _has_aggregate(self._node)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.sql()!r})"

    def __bool__(self) -> bool:
        _fail(
            "an expression has no Python truth value: use & | ~ instead of and/or/not, "
            "wrap comparisons in parentheses, e.g. (col('a') > 0) & (col('b') < 5), and "
            "write a range check as col('a').between(0, 5)"
        )

    # -- operands ---------------------------------------------------------------------------

    def _operand(self, what: str) -> exp.Expression:
        if isinstance(self._node, exp.Alias):
            _fail(
                f"{what} cannot use an aliased expression; apply .alias(...) last, to the "
                "whole output"
            )
        return self._node.copy()

    def _binary(
        self,
        cls: type[exp.Expression],
        other: object,
        *,
        reverse: bool = False,
        **extra: object,
    ) -> Expr:
        level = _precedence(cls)
        a = self._operand(cls.__name__)
        b = _value(other, cls.__name__)
        left, right = (b, a) if reverse else (a, b)
        # Left-associative: a left operand at the same level needs no parentheses. DuckDB
        # refuses chained comparisons (a = b < c), so a comparison operand is always wrapped.
        left_below = _COMPARISON + 1 if level in (_EQUALITY, _COMPARISON) else level
        return Expr(
            cls(
                this=_wrap(left, below=left_below),
                expression=_wrap(right, below=max(level + 1, left_below)),
                **extra,
            )
        )

    def _logical(self, cls: type[exp.Expression], other: object, *, reverse: bool) -> Expr:
        symbol = "&" if cls is exp.And else "|"
        if not isinstance(other, Expr | bool):
            _fail(
                f"{symbol} combines conditions, not a {_type_name(other)}: wrap comparisons "
                "in parentheses, e.g. (col('a') > 0) & (col('b') < 5)"
            )
        return self._binary(cls, other, reverse=reverse)

    # -- arithmetic -------------------------------------------------------------------------

    def __add__(self, other: ValueLike) -> Expr:
        return self._binary(exp.Add, other)

    def __radd__(self, other: ValueLike) -> Expr:
        return self._binary(exp.Add, other, reverse=True)

    def __sub__(self, other: ValueLike) -> Expr:
        return self._binary(exp.Sub, other)

    def __rsub__(self, other: ValueLike) -> Expr:
        return self._binary(exp.Sub, other, reverse=True)

    def __mul__(self, other: ValueLike) -> Expr:
        return self._binary(exp.Mul, other)

    def __rmul__(self, other: ValueLike) -> Expr:
        return self._binary(exp.Mul, other, reverse=True)

    def __truediv__(self, other: ValueLike) -> Expr:
        # The duckdb parser marks "/" as untyped, unsafe division; match it.
        return self._binary(exp.Div, other, typed=False, safe=False)

    def __rtruediv__(self, other: ValueLike) -> Expr:
        return self._binary(exp.Div, other, reverse=True, typed=False, safe=False)

    def __mod__(self, other: ValueLike) -> Expr:
        return self._binary(exp.Mod, other)

    def __rmod__(self, other: ValueLike) -> Expr:
        return self._binary(exp.Mod, other, reverse=True)

    def __neg__(self) -> Expr:
        return Expr(exp.Neg(this=_wrap(self._operand("-"), below=_UNARY)))

    def __pos__(self) -> Expr:
        return self

    # -- comparisons ------------------------------------------------------------------------

    def __eq__(self, other: ValueLike) -> Expr:  # type: ignore[override]
        if other is None:
            _fail("x == None is never true in SQL; use .is_null()")
        return self._binary(exp.EQ, other)

    def __ne__(self, other: ValueLike) -> Expr:  # type: ignore[override]
        if other is None:
            _fail("x != None is never true in SQL; use .is_not_null()")
        return self._binary(exp.NEQ, other)

    def __lt__(self, other: ValueLike) -> Expr:
        return self._binary(exp.LT, other)

    def __le__(self, other: ValueLike) -> Expr:
        return self._binary(exp.LTE, other)

    def __gt__(self, other: ValueLike) -> Expr:
        return self._binary(exp.GT, other)

    def __ge__(self, other: ValueLike) -> Expr:
        return self._binary(exp.GTE, other)

    # -- logic ------------------------------------------------------------------------------

    def __and__(self, other: Expr | bool) -> Expr:
        return self._logical(exp.And, other, reverse=False)

    def __rand__(self, other: Expr | bool) -> Expr:
        return self._logical(exp.And, other, reverse=True)

    def __or__(self, other: Expr | bool) -> Expr:
        return self._logical(exp.Or, other, reverse=False)

    def __ror__(self, other: Expr | bool) -> Expr:
        return self._logical(exp.Or, other, reverse=True)

    def __invert__(self) -> Expr:
        node = self._operand("~")
        if isinstance(node, exp.Like) and not node.args.get("negate"):
            # What the parser makes of "x NOT LIKE p", the usual spelling.
            node.set("negate", True)
            return Expr(node)
        # NOT reads its operand at the equality level (IS included): AND/OR/NOT need parens.
        return Expr(exp.Not(this=_wrap(node, below=_IS)))

    # -- predicates -------------------------------------------------------------------------

    def _range_subject(self, what: str) -> exp.Expression:
        # An operand of BETWEEN, IN or LIKE: anything looser than additive is parenthesised.
        return _wrap(self._operand(what), below=_RANGE + 1)

    def is_null(self) -> Expr:
        """``x IS NULL``."""
        node = self._operand("is_null")
        # The parser parenthesises AND/OR/NOT and comparisons under IS, but not IS or ranges.
        if not isinstance(node, exp.Is):
            node = _wrap(node, below=_RANGE)
        return Expr(exp.Is(this=node, expression=exp.Null()))

    def is_not_null(self) -> Expr:
        """``NOT x IS NULL`` (what the parser makes of ``x IS NOT NULL``)."""
        return ~self.is_null()

    def isin(self, values: Iterable[ValueLike]) -> Expr:
        """``x IN (v1, v2, ...)``; ``values`` are constants or expressions (at least one)."""
        if isinstance(values, str | bytes | Expr) or not isinstance(values, Iterable):
            _fail("isin takes a list of values, e.g. col('k').isin(['a', 'b'])")
        items = [_value(v, "isin") for v in values]
        if not items:
            _fail("isin needs at least one value (x IN () is not SQL)")
        return Expr(exp.In(this=self._range_subject("isin"), expressions=items))

    def between(self, low: ValueLike, high: ValueLike) -> Expr:
        """``x BETWEEN low AND high`` (both ends included)."""
        return Expr(
            exp.Between(
                this=self._range_subject("between"),
                low=_wrap(_value(low, "between"), below=_RANGE + 1),
                high=_wrap(_value(high, "between"), below=_RANGE + 1),
            )
        )

    def like(self, pattern: str) -> Expr:
        """``x LIKE 'pattern'`` (``%`` any string, ``_`` one character)."""
        if not isinstance(pattern, str):
            _fail(f"like takes a string pattern, not a {_type_name(pattern)}")
        return Expr(
            exp.Like(this=self._range_subject("like"), expression=exp.Literal.string(pattern))
        )

    def cast(self, to: str) -> Expr:
        """``CAST(x AS to)``, ``to`` a duckdb type name such as ``'DOUBLE'``."""
        return Expr(exp.Cast(this=self._operand("cast"), to=_data_type(to)))

    def alias(self, name: str) -> Expr:
        """``x AS name``: names an output (or a group key); apply it last."""
        return Expr(exp.Alias(this=self._operand("alias"), alias=_identifier(name, "an alias")))


class Aggregate(Expr):
    """An aggregate call (``COUNT``, ``SUM``...); :meth:`filter` restricts its rows.

    Examples:
        >>> count().filter(col("x") > 0).sql()
        'COUNT(*) FILTER(WHERE x > 0)'
    """

    __slots__ = ()

    def filter(self, condition: Expr) -> Aggregate:
        """``agg FILTER (WHERE condition)``; a second filter is ANDed with the first."""
        cond = _condition(condition, "filter")
        node = self._node
        if isinstance(node, exp.Filter):
            where = node.args["expression"]
            previous = Expr(where.this.copy())
            cond = _condition(previous & Expr(cond), "filter")
            node = node.this
        return Aggregate(
            exp.Filter(this=node.copy(), expression=exp.Where(this=cond)),
        )


class Case(Expr):
    """``CASE WHEN ... THEN ... [ELSE ...] END`` under construction (see :func:`when`).

    Without :meth:`otherwise` the ``CASE`` has no ``ELSE`` (NULL when nothing matches).
    """

    __slots__ = ()

    def when(self, condition: Expr, value: ValueLike) -> Case:
        """Add ``WHEN condition THEN value``."""
        node = self._node.copy()
        node.append("ifs", _if(condition, value))
        return Case(node)

    def otherwise(self, value: ValueLike) -> Expr:
        """Close the ``CASE`` with ``ELSE value``."""
        node = self._node.copy()
        node.set("default", _value(value, "otherwise"))
        return Expr(node)


class Ordering:
    """One ``ORDER BY`` entry: an expression and its direction (see :func:`asc`, :func:`desc`)."""

    __slots__ = ("descending", "expr")

    def __init__(self, expr: ColumnLike | int, *, descending: bool) -> None:
        """Sort by ``expr`` (an output name, an expression or a 1-based position)."""
        if not isinstance(descending, bool):
            _fail("descending must be True or False")
        self.expr: Expr = _order_subject(expr)
        self.descending: bool = descending

    def to_sqlglot(self) -> exp.Ordered:
        """The ``exp.Ordered`` node, shaped like the parser's (NULLS LAST is duckdb's default)."""
        node = self.expr.to_sqlglot()
        if self.descending:
            return exp.Ordered(this=node, desc=True, nulls_first=False)
        return exp.Ordered(this=node, nulls_first=False)

    def __repr__(self) -> str:
        return f"Ordering({self.to_sqlglot().sql(dialect=DIALECT)!r})"


def _order_subject(value: object) -> Expr:
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            _fail("an ORDER BY position is 1-based: 1 is the first output")
        return Expr(exp.Literal.number(value))
    expr = _subject(value, "order_by")
    if isinstance(expr.to_sqlglot(), exp.Alias):
        _fail("order_by takes an output name or expression, not an aliased expression")
    return expr


def _dialect(dialect: object) -> str:
    if not isinstance(dialect, str):
        _fail("the dialect must be a string such as 'duckdb'")
    try:
        sqlglot.Dialect.get_or_raise(dialect)
    except ValueError:
        _fail(f"{dialect!r} is not a SQL dialect sqlglot knows")
    return dialect


def _value(value: object, what: str) -> exp.Expression:
    """A copied node for an operand: an expression, or a constant (strings are constants)."""
    if isinstance(value, Expr):
        return value._operand(what)
    return _literal(value)


def _subject(value: object, what: str) -> Expr:
    """An expression for a subject position: a column name or an expression."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, str):
        return col(value)
    _fail(
        f"{what} takes a column name or an expression, not a {_type_name(value)}; "
        "use lit(value) for a constant"
    )


def _argument(value: object, what: str) -> exp.Expression:
    """A copied, non-aggregate node for a function argument (strings name columns)."""
    return _subject(value, what)._operand(what)


def _aggregate_argument(value: object, what: str) -> exp.Expression:
    node = _argument(value, what)
    if _has_aggregate(node):
        _fail(f"{what} cannot take another aggregate as its argument (aggregates do not nest)")
    return node


def _condition(value: object, what: str) -> exp.Expression:
    """A copied row condition: an expression without aggregates."""
    if isinstance(value, str):
        _fail(
            f"{what} takes an expression such as col('x') > 0, not SQL text; "
            "send SQL text to Session.sql instead"
        )
    if not isinstance(value, Expr):
        _fail(f"{what} takes an expression such as col('x') > 0, not a {_type_name(value)}")
    node = value._operand(what)
    if _has_aggregate(node):
        _fail(
            f"{what} filters rows before aggregation and cannot contain an aggregate; "
            "use .having(...) to filter groups"
        )
    return node


def _if(condition: object, value: object) -> exp.If:
    # A CASE condition may use aggregates (post-processing in the SELECT list); inside an
    # aggregate or in where(...) the enclosing check refuses them.
    if isinstance(condition, str) or not isinstance(condition, Expr):
        _fail(f"when takes a condition such as col('x') > 0, not a {_type_name(condition)}")
    return exp.If(this=condition._operand("when"), true=_value(value, "when"))


# -- constructors -----------------------------------------------------------------------------


def col(name: str) -> Expr:
    """The column ``name`` (unquoted when it is a plain identifier, so case-insensitive).

    Examples:
        >>> col("value").sql(), col("my col").sql()
        ('value', '"my col"')
    """
    return Expr(exp.Column(this=_identifier(name, "a column name")))


def lit(value: Scalar) -> Expr:
    """The constant ``value`` (bool, int, float, str, Fraction, Decimal, date, datetime, None).

    Examples:
        >>> lit("it's").sql(), lit(-2.5).sql(), lit(None).sql()
        ("'it''s'", '-2.5', 'NULL')
    """
    if isinstance(value, Expr):
        _fail("lit() takes a Python constant; this is already an expression")
    return Expr(_literal(value))


def when(condition: Expr, value: ValueLike) -> Case:
    """Start ``CASE WHEN condition THEN value``; chain ``.when(...)`` and ``.otherwise(...)``.

    Examples:
        >>> when(col("x") < 0, "neg").when(col("x") == 0, "zero").otherwise("pos").sql()
        "CASE WHEN x < 0 THEN 'neg' WHEN x = 0 THEN 'zero' ELSE 'pos' END"
    """
    return Case(exp.Case(ifs=[_if(condition, value)]))


def asc(expr: ColumnLike | int) -> Ordering:
    """Sort ascending by ``expr`` (an output name, an expression or a 1-based position)."""
    return Ordering(expr, descending=False)


def desc(expr: ColumnLike | int) -> Ordering:
    """Sort descending by ``expr`` (an output name, an expression or a 1-based position)."""
    return Ordering(expr, descending=True)


# -- row functions ----------------------------------------------------------------------------


def abs_(x: ColumnLike) -> Expr:
    """``ABS(x)``."""
    return Expr(exp.Abs(this=_argument(x, "abs_")))


def round_(x: ColumnLike, ndigits: int | None = None) -> Expr:
    """``ROUND(x)`` or ``ROUND(x, ndigits)``."""
    node = exp.Round(this=_argument(x, "round_"))
    if ndigits is not None:
        if not isinstance(ndigits, int) or isinstance(ndigits, bool):
            _fail("round_ takes an integer number of digits")
        node.set("decimals", _literal(ndigits))
    return Expr(node)


def floor(x: ColumnLike) -> Expr:
    """``FLOOR(x)``."""
    return Expr(exp.Floor(this=_argument(x, "floor")))


def ceil(x: ColumnLike) -> Expr:
    """``CEIL(x)``."""
    return Expr(exp.Ceil(this=_argument(x, "ceil")))


def sqrt(x: ColumnLike) -> Expr:
    """``SQRT(x)``."""
    return Expr(exp.Sqrt(this=_argument(x, "sqrt")))


def coalesce(*xs: ColumnLike | Scalar) -> Expr:
    """``COALESCE(x1, x2, ...)``: strings name columns; other constants are constants.

    Examples:
        >>> coalesce("a", "b", 0).sql()
        'COALESCE(a, b, 0)'
    """
    if len(xs) < 2:
        _fail("coalesce takes at least two arguments")
    nodes = [_argument(x, "coalesce") if isinstance(x, str | Expr) else _literal(x) for x in xs]
    return Expr(exp.Coalesce(this=nodes[0], expressions=nodes[1:]))


def lower(x: ColumnLike) -> Expr:
    """``LOWER(x)``."""
    return Expr(exp.Lower(this=_argument(x, "lower")))


def upper(x: ColumnLike) -> Expr:
    """``UPPER(x)``."""
    return Expr(exp.Upper(this=_argument(x, "upper")))


def length(x: ColumnLike) -> Expr:
    """``LENGTH(x)`` (characters of a string)."""
    return Expr(exp.Length(this=_argument(x, "length")))


def substr(x: ColumnLike, start: int, length: int | None = None) -> Expr:
    """``SUBSTRING(x, start[, length])``, ``start`` 1-based like SQL."""
    for name, v in (("start", start), ("length", length)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
            _fail(f"substr takes an integer {name}, not a {_type_name(v)}")
    # The parser reads SUBSTRING's first argument at the additive level (FROM/FOR syntax).
    subject = _wrap(_argument(x, "substr"), below=_TERM)
    node = exp.Substring(this=subject, start=_literal(start))
    if length is not None:
        if length < 0:
            _fail("substr needs a non-negative length")
        node.set("length", _literal(length))
    return Expr(node)


def date_trunc(unit: str, x: ColumnLike) -> Expr:
    """``DATE_TRUNC('unit', x)``, ``unit`` one of year, quarter, month, week, day, hour...

    Examples:
        >>> date_trunc("month", "ts").sql()
        "DATE_TRUNC('MONTH', ts)"
    """
    if not isinstance(unit, str) or unit.lower() not in DATE_TRUNC_UNITS:
        _fail(f"date_trunc takes a unit among {', '.join(DATE_TRUNC_UNITS)}")
    return Expr(exp.TimestampTrunc(this=_argument(x, "date_trunc"), unit=exp.var(unit.upper())))


def year(x: ColumnLike) -> Expr:
    """``YEAR(x)``."""
    return Expr(exp.Year(this=_argument(x, "year")))


def month(x: ColumnLike) -> Expr:
    """``MONTH(x)``."""
    return Expr(exp.Month(this=_argument(x, "month")))


def day(x: ColumnLike) -> Expr:
    """``DAY(x)`` (day of the month)."""
    return Expr(exp.Day(this=_argument(x, "day")))


# -- aggregates -------------------------------------------------------------------------------


def count(x: ColumnLike | None = None) -> Aggregate:
    """``COUNT(*)`` without argument, else ``COUNT(x)`` (non-NULL values).

    Examples:
        >>> count().sql(), count("x").sql()
        ('COUNT(*)', 'COUNT(x)')
    """
    arg: exp.Expression = exp.Star() if x is None else _aggregate_argument(x, "count")
    return Aggregate(exp.Count(this=arg, big_int=True))


def count_distinct(x: ColumnLike) -> Aggregate:
    """``COUNT(DISTINCT x)``."""
    arg = _aggregate_argument(x, "count_distinct")
    return Aggregate(exp.Count(this=exp.Distinct(expressions=[arg]), big_int=True))


def sum_(x: ColumnLike) -> Aggregate:
    """``SUM(x)``."""
    return Aggregate(exp.Sum(this=_aggregate_argument(x, "sum_")))


def mean(x: ColumnLike) -> Aggregate:
    """``AVG(x)``."""
    return Aggregate(exp.Avg(this=_aggregate_argument(x, "mean")))


def variance(x: ColumnLike, *, population: bool = False) -> Aggregate:
    """``VARIANCE(x)`` (sample), or ``VAR_POP(x)`` with ``population=True``."""
    cls = exp.VariancePop if _flag(population, "population") else exp.Variance
    return Aggregate(cls(this=_aggregate_argument(x, "variance")))


def stddev(x: ColumnLike, *, population: bool = False) -> Aggregate:
    """``STDDEV(x)`` (sample), or ``STDDEV_POP(x)`` with ``population=True``."""
    cls = exp.StddevPop if _flag(population, "population") else exp.Stddev
    return Aggregate(cls(this=_aggregate_argument(x, "stddev")))


def median(x: ColumnLike) -> Aggregate:
    """``MEDIAN(x)``."""
    return Aggregate(exp.Median(this=_aggregate_argument(x, "median")))


def quantile(x: ColumnLike, q: float | Fraction | Decimal) -> Aggregate:
    """``QUANTILE(x, q)`` for a constant ``0 <= q <= 1``.

    Examples:
        >>> quantile("x", 0.9).sql(), quantile("x", Fraction(1, 4)).sql()
        ('QUANTILE(x, 0.9)', 'QUANTILE(x, 0.25)')
    """
    if isinstance(q, bool) or not isinstance(q, numbers.Real | Decimal):
        _fail(f"quantile takes a number q between 0 and 1, not a {_type_name(q)}")
    if (isinstance(q, float) and not math.isfinite(q)) or (
        isinstance(q, Decimal) and not q.is_finite()
    ):
        _fail("quantile takes a number q between 0 and 1")
    if not 0 <= q <= 1:
        _fail("quantile takes a number q between 0 and 1")
    return Aggregate(exp.Quantile(this=_aggregate_argument(x, "quantile"), quantile=_literal(q)))


def min_(x: ColumnLike) -> Aggregate:
    """``MIN(x)``."""
    return Aggregate(exp.Min(this=_aggregate_argument(x, "min_")))


def max_(x: ColumnLike) -> Aggregate:
    """``MAX(x)``."""
    return Aggregate(exp.Max(this=_aggregate_argument(x, "max_")))


def _flag(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        _fail(f"{name} must be True or False")
    return value


# -- the query --------------------------------------------------------------------------------

JoinHow = Literal["inner", "left"]


class Answerer(Protocol):
    """What a builder query needs of a session to run (``Session`` has it)."""

    def sql(self, *args: Any, **options: Any) -> Answer:
        """Answer SQL text."""
        ...

    def compile(self, *args: Any, **options: Any) -> QueryProgram:
        """Compile SQL text."""
        ...


class Query:
    """An immutable aggregate query on one table; each method returns a new query.

    ``where`` conditions AND together, ``having`` conditions too; ``group_by``, ``agg``,
    ``select``, ``order_by`` and ``join`` accumulate; ``limit`` and ``offset`` replace.

    The SELECT list: :meth:`agg` lists the aggregates and puts the group keys first by itself
    (as in Tumult Analytics and Polars), in ``group_by`` order and with their aliases;
    :meth:`select` gives the whole SELECT list explicitly and adds nothing. A query uses one
    or the other. An aliased group key ``group_by(year("ts").alias("y"))`` is selected as
    ``YEAR(ts) AS y`` and grouped by the expression itself, ``GROUP BY YEAR(ts)``.

    Building a query reads no data and has no privacy loss; answering it (``Session``)
    charges exactly what the equivalent SQL text would.

    Examples:
        >>> q = Query("sales").group_by("region").agg(count().alias("n"), sum_("amount"))
        >>> q.to_sql()
        'SELECT region, COUNT(*) AS n, SUM(amount) FROM sales GROUP BY region'
        >>> q.order_by("n", descending=True).limit(3).to_sql().split(" FROM ")[1]
        'sales GROUP BY region ORDER BY n DESC LIMIT 3'
        >>> q2 = q.having(count() > 10)
        >>> q2.to_sql().endswith("GROUP BY region HAVING COUNT(*) > 10")
        True
        >>> Query("sales").select(mean("amount")).join("regions", on="region").to_sql()
        'SELECT AVG(amount) FROM sales JOIN regions USING (region)'
    """

    __slots__ = (
        "_group_by",
        "_having",
        "_joins",
        "_limit",
        "_mode",
        "_offset",
        "_order_by",
        "_outputs",
        "_session",
        "_table",
        "_where",
    )

    _session: Answerer | None
    _table: exp.Identifier
    _where: exp.Expression | None
    _group_by: tuple[Expr, ...]
    _mode: Literal["agg", "select"] | None
    _outputs: tuple[Expr, ...]
    _having: exp.Expression | None
    _order_by: tuple[Ordering, ...]
    _limit: int | None
    _offset: int | None
    _joins: tuple[tuple[exp.Identifier, tuple[exp.Identifier, ...], JoinHow], ...]

    def __init__(self, table: str, *, session: Answerer | None = None) -> None:
        """Start a query on the registered table ``table`` (of ``session``, to run it there)."""
        fields: dict[str, object] = dict.fromkeys(Query.__slots__)
        fields.update(
            _session=session,
            _table=_identifier(table, "the table name"),
            _group_by=(),
            _outputs=(),
            _order_by=(),
            _joins=(),
        )
        for slot, value in fields.items():
            object.__setattr__(self, slot, value)

    def _replace(self, **changes: object) -> Query:
        new = object.__new__(Query)
        for slot in Query.__slots__:
            object.__setattr__(new, slot, changes.get(slot[1:], getattr(self, slot)))
        return new

    def __setattr__(self, name: str, value: object) -> None:
        _fail("a Query is immutable; its methods return new queries")

    def __repr__(self) -> str:
        if self._mode is None:
            return f"Query({self._table.name!r}, no outputs yet)"
        return f"Query({self.to_sql()!r})"

    # -- clauses --------------------------------------------------------------------------

    def where(self, condition: Expr) -> Query:
        """Keep the rows where ``condition`` holds (ANDed with earlier conditions)."""
        cond = _condition(condition, "where")
        if self._where is not None:
            cond = _condition(Expr(self._where) & Expr(cond), "where")
        return self._replace(where=cond)

    def group_by(self, *keys: ColumnLike) -> Query:
        """Group by ``keys``: column names or row expressions, optionally aliased."""
        if not keys:
            _fail("group_by needs at least one key")
        out: list[Expr] = []
        for k in keys:
            e = _subject(k, "group_by")
            node = e.to_sqlglot()
            inner = node.this if isinstance(node, exp.Alias) else node
            if _has_aggregate(inner):
                _fail("group_by cannot group by an aggregate; group by columns or row expressions")
            out.append(e)
        return self._replace(group_by=self._group_by + tuple(out))

    def agg(self, *outputs: ColumnLike) -> Query:
        """The outputs after the group keys (which :meth:`agg` selects first by itself)."""
        return self._with_outputs("agg", outputs)

    def select(self, *outputs: ColumnLike) -> Query:
        """The whole SELECT list, in order; nothing is added to it."""
        return self._with_outputs("select", outputs)

    def having(self, condition: Expr) -> Query:
        """Keep the groups where ``condition`` holds (it may use aggregates)."""
        if isinstance(condition, str) or not isinstance(condition, Expr):
            _fail(f"having takes an expression such as count() > 10, not a {_type_name(condition)}")
        node = condition._operand("having")
        if self._having is not None:
            node = (Expr(self._having) & Expr(node))._operand("having")
        return self._replace(having=node)

    def order_by(self, *exprs: ColumnLike | int | Ordering, descending: bool = False) -> Query:
        """Sort the answer by output names, expressions, positions or :func:`desc` entries.

        ``descending`` applies to the entries that are not already :class:`Ordering` objects.
        """
        if not exprs:
            _fail("order_by needs at least one entry")
        _flag(descending, "descending")
        items = tuple(
            e if isinstance(e, Ordering) else Ordering(e, descending=descending) for e in exprs
        )
        return self._replace(order_by=self._order_by + items)

    def limit(self, n: int) -> Query:
        """Keep the first ``n`` rows of the (noisy) answer."""
        return self._replace(limit=_count(n, "limit"))

    def offset(self, n: int) -> Query:
        """Skip the first ``n`` rows of the (noisy) answer."""
        return self._replace(offset=_count(n, "offset"))

    def join(self, public_table: str, *, on: str | Sequence[str], how: JoinHow = "inner") -> Query:
        """Join a public table on equal column names: ``[LEFT] JOIN p USING (on...)``."""
        table = _identifier(public_table, "the joined table name")
        names = [on] if isinstance(on, str) else on
        if not isinstance(names, Sequence) or not names:
            _fail("join takes on= as a column name or a non-empty list of column names")
        using = tuple(_identifier(n, "a join column") for n in names)
        if len({u.name.lower() for u in using}) != len(using):
            _fail("join lists a column twice in on=")
        if how not in ("inner", "left"):
            _fail(f"join supports how='inner' or how='left', not {how!r}")
        return self._replace(joins=(*self._joins, (table, using, how)))

    # -- output -----------------------------------------------------------------------------

    def to_expression(self) -> exp.Select:
        """The query as a fresh sqlglot ``SELECT`` tree (the parser's tree of :meth:`to_sql`)."""
        if self._mode is None:
            _fail("the query has no outputs yet: call .agg(...) or .select(...)")
        select = exp.Select(expressions=self._select_list())
        select.set("from_", exp.From(this=exp.Table(this=self._table.copy())))
        joins = [_join_node(*j) for j in self._joins]
        if joins:
            select.set("joins", joins)
        if self._where is not None:
            select.set("where", exp.Where(this=self._where.copy()))
        if self._group_by:
            keys = [_unaliased(k) for k in self._group_by]
            select.set("group", exp.Group(expressions=keys))
        if self._having is not None:
            select.set("having", exp.Having(this=self._having.copy()))
        if self._order_by:
            select.set("order", exp.Order(expressions=[o.to_sqlglot() for o in self._order_by]))
        if self._limit is not None:
            select.set("limit", exp.Limit(expression=exp.Literal.number(self._limit)))
        if self._offset is not None:
            select.set("offset", exp.Offset(expression=exp.Literal.number(self._offset)))
        return select

    def compile(self, **options: Any) -> QueryProgram:
        """The :class:`~deniable.query.program.QueryProgram` of this query on its session.

        Exactly the program of the equivalent SQL text (same plan, charge and cache key);
        compiling reads no data and charges nothing.

        Raises:
            InvalidParameter: the query was not started from ``session.table(...)``.
        """
        return self._bound().compile(self.to_sql(), **options)

    def run(self, **options: Any) -> Answer:
        """Answer this query on its session (``options`` as for ``Session.sql``).

        Charged what the equivalent SQL text is charged — nothing when it was answered before,
        as SQL or as a builder query.

        Raises:
            InvalidParameter: the query was not started from ``session.table(...)``.
        """
        return self._bound().sql(self.to_sql(), **options)

    def _bound(self) -> Answerer:
        if self._session is None:
            _fail(
                "this query is not bound to a session: start it with session.table(name), or "
                "pass it to session.sql(query)"
            )
        return self._session

    def to_sql(self, dialect: str = DIALECT) -> str:
        """The query as SQL text (duckdb by default, the dialect :func:`parse` reads)."""
        return self.to_expression().sql(dialect=_dialect(dialect))

    # -- internals --------------------------------------------------------------------------

    def _with_outputs(self, mode: Literal["agg", "select"], outputs: tuple[object, ...]) -> Query:
        if self._mode is not None and self._mode != mode:
            _fail(
                f"this query already uses .{self._mode}(...); use either .agg (group keys "
                "added first) or .select (explicit list), not both"
            )
        if not outputs and mode == "select":
            _fail("select needs at least one output")
        exprs = tuple(_subject(o, mode) for o in outputs)
        return self._replace(mode=mode, outputs=self._outputs + exprs)

    def _select_list(self) -> list[exp.Expression]:
        keys = [k.to_sqlglot() for k in self._group_by] if self._mode == "agg" else []
        outputs = [o.to_sqlglot() for o in self._outputs]
        if self._mode == "agg":
            key_nodes = {_unaliased(k) for k in self._group_by}
            for node in outputs:
                if node in key_nodes:
                    _fail(
                        f"{node.sql(dialect=DIALECT)} is a group key, which .agg(...) "
                        "already selects first; list only the aggregates, or use .select(...)"
                    )
        items = keys + outputs
        if not items:
            _fail("the query has no outputs: give .agg(...) an aggregate or group by a key")
        seen: set[str] = set()
        for node in items:
            if isinstance(node, exp.Alias):
                name = node.alias.lower()
                if name in seen:
                    _fail(f"the output name {node.alias!r} is used twice; give each its own")
                seen.add(name)
        return items


def _unaliased(e: Expr) -> exp.Expression:
    node = e.to_sqlglot()
    return node.this if isinstance(node, exp.Alias) else node


def _join_node(table: exp.Identifier, using: tuple[exp.Identifier, ...], how: JoinHow) -> exp.Join:
    node = exp.Join(this=exp.Table(this=table.copy()), using=[u.copy() for u in using])
    if how == "left":
        node.set("side", "LEFT")
    return node


def _count(n: object, what: str) -> int:
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        _fail(f"{what} takes a non-negative integer, not a {_type_name(n)}")
    if int(n) < 0:
        _fail(f"{what} takes a non-negative integer")
    return int(n)
