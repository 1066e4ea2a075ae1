"""Row expressions: what a query may compute per row, and the bounds that follow.

A row expression is a sqlglot tree over the columns of the query's source (qualified by
the generated statement's table aliases) — an aggregate's argument (``SUM(price * qty)``,
``AVG(a - b)``, ``SUM(CASE WHEN … THEN x ELSE 0 END)``), a ``FILTER`` condition, a
``GROUP BY`` expression (``CASE … END``, ``age / 10``, ``date_trunc('year', d)``). Everything
here reads only the query and the catalog's declarations, never data.

* :func:`check_row` refuses node types outside the row whitelist (the engine must be able
  to compute them on every row without releasing anything but the aggregate).
* :func:`value_bounds` derives a clamping range by interval arithmetic from the declared
  bounds of the columns, which are clamped first (:class:`Clamp`): with every column inside
  its bounds, the expression lies inside the derived range — the sensitivity then follows as
  for a plain column. Where no finite bound follows (an unbounded column, a divisor whose
  range contains 0, a function with no known range), the query is refused with a message
  naming the column or construct.
* :func:`key_domain` derives a finite public domain for a grouping expression when one
  follows from the declarations alone: a ``CASE`` whose results are all literals, or an
  expression of one bounded integer column (evaluated on every value of its range, which is
  clamped first) or of one column with declared public keys. Otherwise the keys are private
  and released through DP partition selection.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from sqlglot import exp

from deniable.errors import Remedy, UnsafeQuery, remedied
from deniable.query.catalog import MAX_BOUND, MAX_PUBLIC_KEYS, Bounds, ColumnKind
from deniable.query.postprocess import ARITHMETIC, COMPARISONS, construct

ROW_NODES: tuple[type[exp.Expression], ...] = (
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
    exp.Is,
    exp.In,
    exp.Between,
    exp.Like,
    exp.ILike,
    *COMPARISONS,
    *ARITHMETIC,
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
    exp.Case,
    exp.If,
    exp.Greatest,
    exp.Least,
    exp.Substring,
    exp.DateTrunc,
    exp.TimestampTrunc,
    exp.Extract,
    exp.Var,
    exp.Concat,
    exp.DPipe,
    exp.Trim,
)
ROW_HELP = (
    "row expressions may use columns, literals, comparisons, AND/OR/NOT, + - * / %, "
    "IN (literal list), BETWEEN, LIKE, IS [NOT] NULL, CASE, CAST and the functions ABS, "
    "LOWER, UPPER, LENGTH, YEAR, MONTH, DAY, EXTRACT, DATE_TRUNC, SUBSTR, TRIM, CONCAT, "
    "ROUND, FLOOR, CEIL, COALESCE, GREATEST, LEAST"
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
MAX_ENUMERATED = 100_000
"""Largest integer range a grouping expression is evaluated over to derive its domain."""


class Clamp(exp.Expression, exp.Func):
    """deniable's own node: ``this`` clamped to ``[low, high]``; NULL (and NaN) stay NULL.

    Appears only in trees deniable builds from a validated query; the compiler lowers it to
    the engine's spelling before rendering.
    """

    arg_types = {"this": True, "low": True, "high": True, "real": False}  # noqa: RUF012


def check_row(
    node: exp.Expression, what: str, refuse: Callable[[str, object], UnsafeQuery]
) -> None:
    """Refuse node types outside the row whitelist.

    Raises:
        UnsafeQuery: naming the construct and what is allowed.
    """
    for n in node.walk():
        if isinstance(n, exp.Select | exp.Subquery):
            raise refuse(f"subqueries are not supported in {what}", n)
        if isinstance(n, exp.AggFunc):
            raise refuse(f"aggregates are not allowed in {what}", n)
        if isinstance(n, exp.Window):
            raise refuse(f"window functions are not allowed in {what}", n)
        if not isinstance(n, ROW_NODES) or type(n) is exp.Anonymous:
            raise refuse(f"{ROW_HELP}; {node_name(n)} is not allowed in {what}", n)
        if isinstance(n, exp.In) and any(
            n.args.get(a) for a in ("query", "unnest", "field", "is_global")
        ):
            raise refuse(f"IN takes a list of literals in {what}", n)
        if isinstance(n, exp.In):
            for v in n.expressions:
                if not isinstance(v, exp.Literal | exp.Boolean | exp.Null | exp.Neg):
                    raise refuse(f"IN takes a list of literals in {what}", v)
        if isinstance(n, exp.Cast | exp.TryCast):
            to = n.args.get("to")
            if not isinstance(to, exp.DataType) or to.this not in _CAST_TARGETS:
                raise refuse(f"CAST in {what} supports numeric, text, date, timestamp, boolean", n)


def node_name(n: object) -> str:
    """A node's name as the analyst writes it (``ROUND``, ``… << …``), never a parser class.

    See :func:`deniable.query.postprocess.construct`.
    """
    return construct(n)


def total_casts(node: exp.Expression) -> exp.Expression:
    """Casts become TRY_CAST: a failing cast must not fail the query on some data only."""

    def fix(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Cast) and not isinstance(n, exp.TryCast):
            return exp.TryCast(this=n.this, to=n.args["to"])
        return n

    out = node.transform(fix)
    assert isinstance(out, exp.Expression)
    return out


@dataclass(frozen=True)
class Leaf:
    """What the bounds of a value expression know about one source column.

    Attributes:
        kind: the column's kind.
        bounds: its declared clamping range, or None.
        name: its name as the analyst knows it (for messages).
    """

    kind: ColumnKind
    bounds: Bounds | None
    name: str


@dataclass(frozen=True)
class Derived:
    """A value expression with its clamped columns and its derived range.

    Attributes:
        expr: the expression, every bounded numeric column replaced by its :class:`Clamp`.
        bounds: the range the expression lies in when every column is in its bounds.
        kind: INTEGER when the expression is integer-valued, else REAL.
    """

    expr: exp.Expression
    bounds: Bounds
    kind: ColumnKind


def value_bounds(
    node: exp.Expression,
    leaf: Callable[[exp.Column], Leaf],
    refuse: Callable[[str, object], UnsafeQuery],
    *,
    what: str,
) -> Derived:
    """Derive the range of a numeric row expression by interval arithmetic.

    Columns in value positions are clamped to their declared bounds; columns inside
    conditions (CASE WHEN, comparisons) are read as they are.

    Raises:
        UnsafeQuery: no finite bound follows; the message names the column or construct.
    """
    ev = _Bounder(leaf, refuse, what)
    expr, lo, hi, integer = ev.value(node)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise refuse(f"no finite bound follows for {what}; pass bounds for it", node)
    if max(abs(lo), abs(hi)) > MAX_BOUND:
        raise refuse(
            f"the bounds of {what} reach beyond ±2^53 (derived [{lo:g}, {hi:g}]); declare "
            "narrower column bounds or pass bounds for it",
            node,
        )
    f_lo, f_hi = Fraction(lo), Fraction(hi)
    if integer:
        f_lo, f_hi = Fraction(math.floor(f_lo)), Fraction(math.ceil(f_hi))
    if f_lo == f_hi:  # a constant: widen to include 0 (the sensitivity only grows)
        f_lo, f_hi = min(f_lo, Fraction(0)), max(f_hi, Fraction(0))
        if f_lo == f_hi:
            f_hi = Fraction(1)
    return Derived(expr, Bounds(f_lo, f_hi), ColumnKind.INTEGER if integer else ColumnKind.REAL)


class _Bounder:
    def __init__(
        self,
        leaf: Callable[[exp.Column], Leaf],
        refuse: Callable[[str, object], UnsafeQuery],
        what: str,
    ) -> None:
        self.leaf = leaf
        self.refuse = refuse
        self.what = what

    def value(self, n: exp.Expression) -> tuple[exp.Expression, float, float, bool]:
        """(clamped expression, lower, upper, integer-valued)."""
        if isinstance(n, exp.Paren):
            e, lo, hi, i = self.value(n.this)
            return exp.Paren(this=e), lo, hi, i
        if isinstance(n, exp.Cast | exp.TryCast) and isinstance(n.this, exp.Column):
            info = self.leaf(n.this)
            to = n.args["to"].this
            if (
                info.kind is ColumnKind.BOOLEAN
                and to in exp.DataType.INTEGER_TYPES | exp.DataType.REAL_TYPES
            ):
                return exp.TryCast(this=n.this.copy(), to=n.args["to"].copy()), 0.0, 1.0, True
        if isinstance(n, exp.Column):
            info = self.leaf(n)
            if info.kind is ColumnKind.BOOLEAN:
                return exp.TryCast(this=n.copy(), to=exp.DataType.build("INT")), 0.0, 1.0, True
            if not info.kind.numeric:
                raise self.refuse(
                    f"{self.what} needs numeric values; column {info.name!r} is not numeric", n
                )
            if info.bounds is None:
                problem = f"{self.what} needs clamping bounds for column {info.name!r}"
                message = (
                    f"{problem}: the curator can declare bounds={{'{info.name}': (lower, "
                    "upper)}, or pass them to sql() (bounds must not be derived from the data)"
                )
                exc = self.refuse(message, n)
                where = str(exc)[len(message) :]
                raise remedied(exc, problem, Remedy("bounds", info.name), where=where)
            lo, hi = info.bounds.as_floats()
            clamp = Clamp(
                this=n.copy(),
                low=exp.Literal.number(_num(info.bounds.lower)),
                high=exp.Literal.number(_num(info.bounds.upper)),
                real=exp.true() if info.kind is ColumnKind.REAL else exp.false(),
            )
            return clamp, lo, hi, info.kind is ColumnKind.INTEGER
        if isinstance(n, exp.Literal) and not n.is_string:
            v = float(n.this)
            return n.copy(), v, v, n.this.lstrip("-").isdigit()
        if isinstance(n, exp.Boolean):
            v = 1.0 if n.this else 0.0
            return n.copy(), v, v, True
        if isinstance(n, exp.Null):
            return n.copy(), math.inf, -math.inf, True  # empty: contributes nothing
        if isinstance(n, exp.Neg):
            e, lo, hi, i = self.value(n.this)
            return exp.Neg(this=e), -hi, -lo, i
        if isinstance(n, exp.Add | exp.Sub | exp.Mul | exp.Div):
            a, alo, ahi, ai = self.value(n.this)
            b, blo, bhi, bi = self.value(n.expression)
            node = type(n)(this=a, expression=b)
            if isinstance(n, exp.Add):
                return node, alo + blo, ahi + bhi, ai and bi
            if isinstance(n, exp.Sub):
                return node, alo - bhi, ahi - blo, ai and bi
            if isinstance(n, exp.Mul):
                c = [alo * blo, alo * bhi, ahi * blo, ahi * bhi]
                c = [0.0 if math.isnan(x) else x for x in c]
                return node, min(c), max(c), ai and bi
            if blo <= 0 <= bhi:
                raise self.refuse(
                    f"{self.what} divides by a value whose range contains 0; no finite bound "
                    "follows (pass bounds for it, or divide by a constant)",
                    n,
                )
            c = [alo / blo, alo / bhi, ahi / blo, ahi / bhi]
            return node, min(c), max(c), False
        if isinstance(n, exp.Abs):
            e, lo, hi, i = self.value(n.this)
            top = max(abs(lo), abs(hi))
            bottom = 0.0 if lo <= 0 <= hi else min(abs(lo), abs(hi))
            return exp.Abs(this=e), bottom, top, i
        if isinstance(n, exp.Round | exp.Floor | exp.Ceil):
            e, lo, hi, i = self.value(n.this)
            rounded: exp.Expression = n.copy()
            rounded.set("this", e)
            return rounded, math.floor(lo) - 1, math.ceil(hi) + 1, i
        if isinstance(n, exp.Greatest | exp.Least | exp.Coalesce):
            parts = [self.value(x) for x in [n.this, *n.expressions]]
            combined: exp.Expression = n.copy()
            combined.set("this", parts[0][0])
            combined.set("expressions", [p[0] for p in parts[1:]])
            return (
                combined,
                min(p[1] for p in parts),
                max(p[2] for p in parts),
                all(p[3] for p in parts),
            )
        if isinstance(n, exp.Case | exp.If):
            return self.case(n)
        if isinstance(n, exp.Cast | exp.TryCast):
            to = n.args["to"]
            e, lo, hi, i = self.value(n.this)
            if to.this in exp.DataType.INTEGER_TYPES:
                return (
                    exp.TryCast(this=e, to=to.copy()),
                    math.floor(lo) - 1,
                    math.ceil(hi) + 1,
                    True,
                )
            if to.this in exp.DataType.REAL_TYPES:
                return exp.TryCast(this=e, to=to.copy()), lo, hi, False
        raise self.refuse(
            f"no finite bound follows for {node_name(n)} in {self.what}; use + - * / with "
            "constants or bounded columns, ABS, ROUND, FLOOR, CEIL, GREATEST, LEAST, "
            "COALESCE, CASE, or pass bounds for it",
            n,
        )

    def case(self, n: exp.Expression) -> tuple[exp.Expression, float, float, bool]:
        out = n.copy()
        results: list[tuple[exp.Expression, float, float, bool]] = []
        if isinstance(n, exp.If):
            branches = [n.args["true"]]
            default = n.args.get("false")
            r = self.value(branches[0])
            out.set("true", r[0])
            results.append(r)
        else:
            ifs = []
            for i_node in n.args.get("ifs") or []:
                r = self.value(i_node.args["true"])
                copy = i_node.copy()
                copy.set("true", r[0])
                ifs.append(copy)
                results.append(r)
            out.set("ifs", ifs)
            default = n.args.get("default")
        if default is not None:
            r = self.value(default)
            out.set("false" if isinstance(n, exp.If) else "default", r[0])
            results.append(r)
        lo = min(r[1] for r in results)
        hi = max(r[2] for r in results)
        if lo > hi:  # only NULL results
            lo, hi = 0.0, 0.0
        return out, lo, hi, all(r[3] for r in results)


def _num(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    return repr(float(value))


def literal_domain(node: exp.Expression) -> tuple[object, ...] | None:
    """The values of a ``CASE`` (or ``IF``) whose results are all literals, else None."""
    inner = node
    while isinstance(inner, exp.Paren):
        inner = inner.this
    if isinstance(inner, exp.If):
        results = [inner.args.get("true"), inner.args.get("false")]
        has_default = inner.args.get("false") is not None
    elif isinstance(inner, exp.Case):
        results = [i.args.get("true") for i in inner.args.get("ifs") or []]
        results.append(inner.args.get("default"))
        has_default = inner.args.get("default") is not None
    else:
        return None
    values: list[object] = []
    for r in results:
        if r is None:
            continue
        v = literal_value(r)
        if v is _NOT_LITERAL:
            return None
        values.append(v)
    if not has_default:
        values.append(None)
    return tuple(dict.fromkeys(values))


_NOT_LITERAL = object()


def literal_value(node: exp.Expression) -> object:
    """A literal's Python value (``_NOT_LITERAL`` when it is none)."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        text = node.this
        return int(text) if text.lstrip("-").isdigit() else float(text)
    if isinstance(node, exp.Neg):
        v = literal_value(node.this)
        if isinstance(v, int | float) and not isinstance(v, bool):
            return -v
    return _NOT_LITERAL


def enumerate_domain(
    node: exp.Expression,
    column: exp.Column,
    values: np.ndarray | list[object],
    evaluate: Callable[[exp.Expression, Mapping[int, np.ndarray]], np.ndarray],
) -> tuple[object, ...] | None:
    """The distinct values of ``node`` when ``column`` takes each of ``values``.

    None when the expression cannot be evaluated here.
    """
    placeholder = exp.column("__key0")

    def swap(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Column) and n == column:
            return placeholder.copy()
        return n

    swapped = node.transform(swap)
    assert isinstance(swapped, exp.Expression)
    arr = np.asarray(values) if not isinstance(values, np.ndarray) else values
    try:
        out = evaluate(swapped, {0: arr})
    except Exception:  # the evaluator lacks this function: no derived domain
        return None
    seen: list[object] = []
    for v in out.tolist():
        if isinstance(v, float) and math.isnan(v):
            v = None
        elif isinstance(v, float) and v.is_integer() and abs(v) < 2**53:
            v = int(v) if _integral(out) else v
        seen.append(v)
    distinct = tuple(dict.fromkeys(seen))
    return distinct if len(distinct) <= MAX_PUBLIC_KEYS else None


def _integral(arr: np.ndarray) -> bool:
    return arr.dtype.kind in "iu"
