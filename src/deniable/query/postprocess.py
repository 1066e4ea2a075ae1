"""Post-processing of released values: arithmetic, HAVING, ORDER BY — free of privacy loss.

Everything here reads only released values (noisy aggregates and released group keys) and
public literals, so by the post-processing property of DP it costs nothing. Expressions are
sqlglot trees over two kinds of placeholder columns: ``__agg<i>`` for the ``i``-th aggregate
and ``__key<j>`` for the ``j``-th group key; they are evaluated on numpy arrays.

**Meaning.** Every construct means what it means in DuckDB on the same values (a
differential test, ``tests/unit/test_postprocess_differential.py``, holds the evaluator to
DuckDB): SQL's three-valued logic (NULL and NaN are both NULL; a NULL condition is false
in HAVING, NOT NULL is NULL); text compared with a number or a boolean is cast to that
type (``sex = 1`` matches the key ``'1'``); ``ROUND`` rounds halves away from zero
(``ROUND(x, d)`` is ``round(x·10^d)/10^d``); ``CAST`` of a double to an integer rounds
halves to even, of text to an integer reads ``' 12 '``, ``'0x10'``, ``'2.5'`` (→ 3) as
DuckDB does; ``/`` divides as doubles (``x/0`` is ±inf), ``//`` truncates integers and
divides doubles, ``%`` takes the dividend's sign; ``CAST(… AS VARCHAR)`` writes doubles
as DuckDB does (``2.0``, ``1e+16``).

**Where DuckDB raises, the row is NULL, with a note.** A cast that does not convert or does
not fit its type (``CAST(COUNT(*) * 1e30 AS BIGINT)``, ``CAST(200 AS TINYINT)``,
``CAST('abc' AS INTEGER)``), an integer overflow, an integer ``//`` or ``%`` by zero, a text
value that an implicit comparison cannot convert: DuckDB raises an error for the whole
query; here the values are noisy and already paid for, and an error after the charge
would waste the budget (and a refusal decided by noisy values says nothing the answer does
not), so the expression is NULL in that row — exactly DuckDB's ``TRY(expression)`` — and
:attr:`Value.reason` says why (the answer's notes carry it). A HAVING condition is
``COALESCE(TRY(condition), FALSE)``, which is also what the row filter made of HAVING's
conditions on group keys computes in the engine, so the two filters agree.

**Limits.** DECIMAL values (``2.5``, ``COUNT(*) * 2.5``) are carried as doubles: their
casts round as DECIMALs do, but digits beyond a double's 15–17 are lost (DuckDB keeps
them); CAST to DECIMAL is refused (``ROUND(x, d)`` says the same). Integers are exact
(int64, or Python ints beside NULLs).

Confidence intervals are carried through arithmetic by interval arithmetic: an expression
that uses ``k`` noisy aggregates takes each one's interval at level ``1 − (1 − level)/k`` (so
that, by the union bound, all ``k`` hold at once with probability ≥ ``level``) and computes
the range of the expression over that box — exact for ``+``, ``−``, ``×``, ``÷`` (when the
divisor's interval excludes 0), negation, ``ABS`` and monotone functions (``ROUND``,
``FLOOR``, ``CEIL``, ``SQRT``, ``LN``, ``EXP``, ``GREATEST``, ``LEAST``, numeric casts). A
ratio ``a/b`` of two noisy values therefore gets ``[min, max]`` of the four corner ratios of
the two intervals, each at level ``1 − (1 − level)/2``. Where no interval follows (a
divisor whose interval contains 0, comparisons, ``CASE``, text, quantiles), the output's
interval is NaN and the answer's notes say why.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

import numpy as np
import numpy.typing as npt
from sqlglot import exp

from deniable.errors import InternalError

F64 = npt.NDArray[np.float64]
Array = npt.NDArray[np.generic]
IntervalFn = Callable[[float], tuple[F64, F64]]

AGG_PREFIX = "__agg"
"""Name prefix of the placeholder columns that stand for aggregate calls (``__agg<i>``)."""
KEY_PREFIX = "__key"
"""Name prefix of the placeholder columns that stand for group keys (``__key<j>``)."""

ARITHMETIC: tuple[type[exp.Expression], ...] = (
    exp.Add,
    exp.Sub,
    exp.Mul,
    exp.Div,
    exp.Mod,
    exp.IntDiv,
)
COMPARISONS: tuple[type[exp.Expression], ...] = (
    exp.EQ,
    exp.NEQ,
    exp.GT,
    exp.GTE,
    exp.LT,
    exp.LTE,
    exp.NullSafeEQ,
    exp.NullSafeNEQ,
)
MONOTONE: tuple[type[exp.Expression], ...] = (
    exp.Round,
    exp.Floor,
    exp.Ceil,
    exp.Sqrt,
    exp.Ln,
    exp.Exp,
)
ALLOWED: tuple[type[exp.Expression], ...] = (
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
    exp.Abs,
    exp.Greatest,
    exp.Least,
    exp.Coalesce,
    exp.Case,
    exp.If,
    exp.Cast,
    exp.TryCast,
    exp.DataType,
    exp.Pow,
    exp.Log,
    exp.Sign,
    exp.Like,
    exp.ILike,
    exp.Lower,
    exp.Upper,
    exp.Length,
    *ARITHMETIC,
    *COMPARISONS,
    *MONOTONE,
)
HELP = (
    "around aggregates, use + - * / %, parentheses, CAST, ROUND, FLOOR, CEIL, ABS, SQRT, LN, "
    "LOG, EXP, POWER, SIGN, GREATEST, LEAST, COALESCE, CASE, comparisons and AND/OR/NOT"
)


def check(node: exp.Expression, *, text: str = "") -> None:
    """Refuse node types the evaluator does not implement (before anything is charged).

    Raises:
        UnsafeQuery: naming the construct as SQL writes it (``ROUND``, ``… || …``).
    """
    from deniable.query.parse import refuse

    for n in node.walk():
        if not isinstance(n, ALLOWED) or type(n) is exp.Anonymous:
            raise refuse(f"{construct(n)} is not supported in post-processing; {HELP}", n, text)
        if isinstance(n, exp.In) and any(
            n.args.get(a) for a in ("query", "unnest", "field", "is_global")
        ):
            raise refuse("IN takes a list of literals", n, text)
        if isinstance(n, exp.Cast | exp.TryCast):
            to = n.args.get("to")
            if not isinstance(to, exp.DataType) or _cast_kind(to) is None:
                what = to.sql(dialect="duckdb") if isinstance(to, exp.DataType) else "this type"
                raise refuse(
                    f"CAST to {what} is not supported in post-processing; cast to an integer "
                    "type (TINYINT … BIGINT), DOUBLE, FLOAT, VARCHAR or BOOLEAN (for a "
                    "fixed number of decimals, ROUND(x, d))",
                    n,
                    text,
                )


def placeholders(node: exp.Expression, prefix: str) -> set[int]:
    """The indices of the ``prefix<i>`` placeholders in ``node``."""
    out: set[int] = set()
    for c in node.find_all(exp.Column):
        if c.name.startswith(prefix) and not c.table:
            out.add(int(c.name[len(prefix) :]))
    return out


@dataclass
class Value:
    """An evaluated expression: values, and the bounds of its interval (None: no interval).

    Attributes:
        values: one value per released row (float64, int64, bool or object for text).
        low: interval lower bounds, or None.
        high: interval upper bounds, or None.
        reason: why there is no interval, when there is none and one was expected, or
            why some rows are NULL (where DuckDB would raise).
        decimal: the value is a DECIMAL in DuckDB (a literal such as ``2.5``, or integer
            arithmetic with one): it is held as a double, but casts to an integer round
            its halves away from zero, where a DOUBLE's round to even.
        failure: why some rows are NULL where DuckDB would raise (a cast that does not
            convert or fit, an overflow, ÷ 0), or None when no row failed; for the answer's
            notes, whether or not the expression uses aggregates.
    """

    values: Array
    low: F64 | None
    high: F64 | None
    reason: str | None = None
    decimal: bool = False
    failure: str | None = None


@dataclass
class Env:
    """What placeholders stand for.

    Attributes:
        size: number of released rows.
        aggregates: each aggregate's released values.
        intervals: each aggregate's interval at a given level (missing: none).
        keys: each group key's released values (object arrays).
    """

    size: int
    aggregates: Mapping[int, Array]
    intervals: Mapping[int, IntervalFn | None]
    keys: Mapping[int, Array]


def evaluate(node: exp.Expression, env: Env, level: float) -> Value:
    """Evaluate ``node`` on released values, with an interval at ``level`` where one follows.

    Total: never raises on values (only :class:`~deniable.errors.InternalError` for a node
    :func:`check` would have refused). A row where DuckDB would raise (a failing or
    overflowing cast, integer overflow, ``//`` or ``%`` by zero, an implicit conversion that
    fails) is NULL, with ``reason`` saying so; its interval bounds are NaN.

    Privacy: post-processing only (no loss).
    """
    used = placeholders(node, AGG_PREFIX)
    k = max(1, len(used))
    per = 1.0 - (1.0 - level) / k
    cache: dict[int, tuple[F64, F64] | None] = {}

    def interval(i: int) -> tuple[F64, F64] | None:
        if i not in cache:
            fn = env.intervals.get(i)
            cache[i] = None if fn is None else fn(per)
        return cache[i]

    return _Evaluator(env, interval).eval(node)


def predicate(node: exp.Expression, env: Env) -> npt.NDArray[np.bool_]:
    """Evaluate a HAVING predicate: True where it holds.

    NULL, and rows where DuckDB would raise, count as false: ``COALESCE(TRY(p), FALSE)``.
    """
    ev = _Evaluator(env, lambda i: None)
    t, _ = ev.tri(node)
    return np.asarray(t & ~ev.failed, dtype=bool)


# Ranges of DuckDB's integer types, by sqlglot type.
_T = exp.DataType.Type
INTEGER_RANGES: dict[object, tuple[int, int]] = {
    _T.TINYINT: (-(2**7), 2**7 - 1),
    _T.SMALLINT: (-(2**15), 2**15 - 1),
    _T.INT: (-(2**31), 2**31 - 1),
    _T.BIGINT: (-(2**63), 2**63 - 1),
    _T.UTINYINT: (0, 2**8 - 1),
    _T.USMALLINT: (0, 2**16 - 1),
    _T.UINT: (0, 2**32 - 1),
}
"""The integer types a post-processing CAST accepts, with their ranges (DuckDB's)."""
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _cast_kind(to: exp.DataType) -> str | None:
    t = to.this
    if t in INTEGER_RANGES:
        return "int"
    if t in (_T.DOUBLE, _T.FLOAT):
        return "float"
    if t in exp.DataType.TEXT_TYPES:
        return "text"
    if t == _T.BOOLEAN:
        return "bool"
    return None


def construct(node: object) -> str:
    """The SQL construct ``node`` is, as the analyst writes it: ``ROUND``, ``… || …``.

    Functions by their SQL name; operators and other nodes rendered with their operands
    elided, so that a message names what was written, never a parser class.
    """
    if not isinstance(node, exp.Expression):
        return type(node).__name__
    if isinstance(node, exp.Anonymous):
        return str(node.this).upper()
    if isinstance(node, exp.Func) and not isinstance(node, exp.Binary):
        return node.sql_name().upper()
    shell = node.copy()
    for child in list(shell.iter_expressions()):
        if not isinstance(child, exp.DataType | exp.Identifier):
            child.replace(exp.Var(this="…"))
    try:
        text = shell.sql(dialect="duckdb")
    except Exception:  # a node sqlglot cannot render: its SQL name at least
        return node.key.upper()
    return text or node.key.upper()


def _is_null(v: Array) -> npt.NDArray[np.bool_]:
    if v.dtype == object:
        return np.array([_null(x) for x in v], dtype=bool)
    if v.dtype.kind == "f":
        return np.isnan(v)
    return np.zeros(v.shape, dtype=bool)


def _numeric(v: Array) -> F64:
    """Numbers as floats; NULL, and anything not a number, as NaN."""
    if v.dtype == object:
        out = np.full(v.shape, np.nan)
        for i, x in enumerate(v):
            if isinstance(x, bool | np.bool_ | int | float | np.integer | np.floating):
                out[i] = float(x)
        return out
    return v.astype(np.float64)


_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


def _integral(v: Array) -> bool:
    """Integers: int64 (or bool) arrays, or objects holding Python ints and NULLs."""
    if v.dtype.kind in "iub":
        return True
    if v.dtype != object:
        return False
    seen = False
    for x in v:
        if x is None:
            continue
        if isinstance(x, bool | np.bool_) or not isinstance(x, int | np.integer):
            return False
        seen = True
    return seen


def _int_array(items: list[int | None]) -> Array:
    """Integers as int64 when none is NULL, else as objects (Python ints and None): exact."""
    if all(x is not None for x in items):
        return np.array(items, dtype=np.int64)
    return np.array(items, dtype=object)


def _int_list(v: Array) -> list[int | None]:
    if v.dtype.kind in "iub":
        return [int(x) for x in v.tolist()]
    out: list[int | None] = []
    for x in v:
        if _null(x) or isinstance(x, str):
            out.append(None)
        else:
            out.append(int(x))
    return out


def _as_int(vals: F64, failed: npt.NDArray[np.bool_]) -> Array:
    """Integral doubles as integers (int64, or objects with None for NULL and failed rows)."""
    bad = np.isnan(vals) | failed
    if not bool(bad.any()):
        return vals.astype(np.int64)
    return _int_array([None if b else int(x) for x, b in zip(vals.tolist(), bad, strict=True)])


def _round_away(x: float) -> int:
    """One double rounded to an integer, halves away from zero (exact)."""
    whole = math.trunc(x)
    frac = x - whole
    if abs(frac) >= 0.5:
        whole += 1 if x > 0 else -1
    return whole


def _tdiv(p: int, q: int) -> int:
    """Integer division truncating toward zero (C's and DuckDB's ``//`` on integers)."""
    quotient = abs(p) // abs(q)
    return quotient if (p < 0) == (q < 0) else -quotient


def _int_arithmetic(
    node: exp.Expression, a: Array, b: Array
) -> tuple[Array, npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """Exact integer ``+ - * // %``: the values (NULL where they fail), overflows, ÷ 0."""
    if a.dtype.kind in "iub" and b.dtype.kind in "iub":
        x, y = a.astype(np.int64), b.astype(np.int64)
        fast = bool(np.all(np.abs(x) < 2**31)) and bool(np.all(np.abs(y) < 2**31))
        if fast and not isinstance(node, exp.IntDiv | exp.Mod):
            # no overflow possible: numpy's int64 arithmetic is exact here
            r = (
                x + y
                if isinstance(node, exp.Add)
                else x - y
                if isinstance(node, exp.Sub)
                else x * y
            )
            none = np.zeros(x.shape, dtype=bool)
            return r, none, none
    ps, qs = _int_list(a), _int_list(b)
    items: list[int | None] = []
    over_l: list[bool] = []
    zero_l: list[bool] = []
    for p, q in zip(ps, qs, strict=True):
        value: int | None = None
        div0 = False
        if p is not None and q is not None:
            if isinstance(node, exp.Add):
                value = p + q
            elif isinstance(node, exp.Sub):
                value = p - q
            elif isinstance(node, exp.Mul):
                value = p * q
            elif q == 0:
                div0 = True
            elif isinstance(node, exp.IntDiv):
                value = _tdiv(p, q)
            else:
                value = p - q * _tdiv(p, q)
        overflow = value is not None and not _I64_MIN <= value <= _I64_MAX
        items.append(None if overflow or div0 else value)
        over_l.append(overflow)
        zero_l.append(div0)
    return _int_array(items), np.array(over_l, dtype=bool), np.array(zero_l, dtype=bool)


def round_half_away(x: F64) -> F64:
    """Round to the nearest integer, halves away from zero (C's ``round``, DuckDB's ROUND).

    Exact on doubles: the fraction ``x − trunc(x)`` is computed exactly.

    Examples:
        >>> round_half_away(np.array([0.5, 1.5, 2.5, -2.5, 0.49999999999999994])).tolist()
        [1.0, 2.0, 3.0, -3.0, 0.0]
    """
    with np.errstate(invalid="ignore"):
        whole = np.trunc(x)
        frac = x - whole
        return np.asarray(whole + np.where(np.abs(frac) >= 0.5, np.sign(x), 0.0), dtype=float)


def _round_digits(x: F64, digits: int) -> F64:
    """DuckDB's ``ROUND(double, digits)``: ``round(x·10^d)/10^d`` (``d < 0``: by ``10^−d``)."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if digits == 0:
            out = round_half_away(x)
        elif digits > 0:
            m = 10.0**digits
            out = round_half_away(x * m) / m
        else:
            m = 10.0 ** (-digits)
            out = round_half_away(x / m) * m
        return np.asarray(np.where(np.isfinite(out), out, x), dtype=float)


_INT_TEXT = re.compile(r"[+-]?[0-9](_?[0-9])*")
_BASE_TEXT = re.compile(r"([+-]?)0([xXbB])([0-9a-fA-F_]+)")
_FLOAT_TEXT = re.compile(
    r"[+-]?(([0-9](_?[0-9])*)?\.?[0-9]*([eE][+-]?[0-9]+)?|inf|infinity|nan)", re.IGNORECASE
)
_TRUE_TEXT = frozenset({"true", "t", "yes", "y", "1"})
_FALSE_TEXT = frozenset({"false", "f", "no", "n", "0"})


def text_to_int(text: str) -> int | None:
    """DuckDB's CAST of text to an integer, or None where DuckDB raises.

    Surrounding spaces are ignored; ``0x``/``0b`` prefixes and ``_`` separators are read;
    a decimal or exponent form is rounded half away from zero (``'2.5'`` → 3).

    Examples:
        >>> [text_to_int(t) for t in (" 12 ", "0x10", "1_000", "-2.5", "1e3", "abc")]
        [12, 16, 1000, -3, 1000, None]
    """
    t = text.strip()
    if _INT_TEXT.fullmatch(t):
        return int(t.replace("_", ""))
    m = _BASE_TEXT.fullmatch(t)
    if m:
        base = 16 if m.group(2) in "xX" else 2
        try:
            value = int(m.group(3).replace("_", ""), base)
        except ValueError:
            return None
        return -value if m.group(1) == "-" else value
    value_f = text_to_float(t)
    if value_f is None or not math.isfinite(value_f):
        return None
    if "e" not in t.lower():
        try:  # exact decimal rounding of the text ('2.5' → 3, not the double's)
            d = Decimal(t.replace("_", ""))
        except InvalidOperation:
            return None
        return int(d.to_integral_value(rounding=ROUND_HALF_UP))
    return int(round_half_away(np.array([value_f]))[0])


def text_to_float(text: str) -> float | None:
    """DuckDB's CAST of text to DOUBLE, or None where DuckDB raises.

    Examples:
        >>> [text_to_float(t) for t in (" 2.5 ", "1e400", "NaN", "0x1", "")]
        [2.5, inf, nan, None, None]
    """
    t = text.strip()
    if not t or not _FLOAT_TEXT.fullmatch(t) or t in ("+", "-", ".") or t.startswith("_"):
        return None
    try:
        return float(t)
    except ValueError:
        return None


def text_to_bool(text: str) -> bool | None:
    """DuckDB's CAST of text to BOOLEAN, or None where DuckDB raises."""
    t = text.lower()
    if t in _TRUE_TEXT:
        return True
    if t in _FALSE_TEXT:
        return False
    return None


def float_text(x: float) -> str:
    """A double as DuckDB writes it (``2.0``, ``1e+16``, ``inf``): the shortest round trip.

    Examples:
        >>> [float_text(x) for x in (2.0, 0.1, 1e16, 1e15, 1.5e-7)]
        ['2.0', '0.1', '1e+16', '1000000000000000.0', '1.5e-07']
    """
    return repr(float(x))


def _null(x: object) -> bool:
    return x is None or (isinstance(x, float | np.floating) and math.isnan(x))


def _text(x: object) -> str:
    """A value as DuckDB's CAST(… AS VARCHAR) writes it."""
    if isinstance(x, bool | np.bool_):
        return "true" if x else "false"
    if isinstance(x, float | np.floating):
        return float_text(float(x))
    if isinstance(x, np.integer):
        return str(int(x))
    return str(x)


_NONE: Any = None  # stored into object arrays (numpy's stubs want an array-like)

Tri = tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]
"""A three-valued truth: (definitely true, definitely false); neither means NULL."""


class _Evaluator:
    """Evaluates one post-processing tree; ``failed`` marks rows where DuckDB would raise.

    Every call of :meth:`eval` ORs the failures of its subtree into :attr:`failed`, except
    where DuckDB does not evaluate a subtree: CASE conditions of rows an earlier branch
    took, untaken CASE results, COALESCE arguments after a non-NULL one. (Both sides of AND
    and OR are evaluated, as in DuckDB: ``TRY(c > 3 OR z = 1)`` is NULL where ``z`` is not a
    number.)
    """

    def __init__(self, env: Env, interval: Callable[[int], tuple[F64, F64] | None]) -> None:
        self.env = env
        self.interval = interval
        self.failed: npt.NDArray[np.bool_] = np.zeros(env.size, dtype=bool)
        self.notes: list[str] = []

    # -- failures --------------------------------------------------------------------------

    def fail(self, mask: npt.NDArray[np.bool_], why: str) -> None:
        """Rows where DuckDB would raise: they become NULL, and the reason is noted."""
        if bool(mask.any()):
            self.failed = self.failed | mask
            if why not in self.notes:
                self.notes.append(why)

    def isolated(self, node: exp.Expression) -> tuple[Value, npt.NDArray[np.bool_]]:
        """Evaluate ``node`` and return its own failures, without adding them to ours."""
        saved = self.failed
        self.failed = np.zeros(self.env.size, dtype=bool)
        try:
            v = self.eval(node)
            own = self.failed
        finally:
            self.failed = saved
        return v, own

    def isolated_tri(
        self, node: exp.Expression, *, select: bool = False
    ) -> tuple[Tri, npt.NDArray[np.bool_]]:
        saved = self.failed
        self.failed = np.zeros(self.env.size, dtype=bool)
        try:
            t = self.tri(node, select=select)
            own = self.failed
        finally:
            self.failed = saved
        return t, own

    # -- helpers ---------------------------------------------------------------------------

    def full(self, value: object) -> Array:
        if isinstance(value, str) or value is None:
            return np.array([value] * self.env.size, dtype=object)
        if isinstance(value, bool):
            return np.full(self.env.size, value, dtype=bool)
        if isinstance(value, int):
            return np.full(self.env.size, value, dtype=np.int64)
        return np.full(self.env.size, float(value))  # type: ignore[arg-type]

    def exact(self, values: Array) -> Value:
        """A value known exactly (literals, keys): its interval is itself when numeric."""
        if values.dtype.kind in "iuf":
            f = values.astype(np.float64)
            return Value(values, f, f)
        return Value(values, None, None)

    def eval(self, node: exp.Expression) -> Value:
        """The value of ``node``; NULL (NaN or None) where it, or a part of it, fails."""
        saved = self.failed
        self.failed = np.zeros(self.env.size, dtype=bool)
        try:
            v = self._eval(node)
            own = self.failed
        finally:
            self.failed = saved | self.failed
        if not bool(own.any()):
            return v
        reason = "; ".join(self.notes) or v.reason
        vals: Array
        if v.values.dtype.kind in "iu" or v.values.dtype == object or v.values.dtype == bool:
            held = v.values.astype(object)
            held[own] = _NONE
            vals = held
        else:
            floats = v.values.astype(np.float64)
            floats[own] = np.nan
            vals = floats
        low = high = None
        if v.low is not None and v.high is not None:
            low, high = v.low.copy(), v.high.copy()
            low[own] = np.nan
            high[own] = np.nan
        failure = "; ".join(self.notes)
        return Value(vals, low, high, reason, v.decimal, failure or None)

    def _eval(self, node: exp.Expression) -> Value:
        if isinstance(node, exp.Paren):
            return self.eval(node.this)
        if isinstance(node, exp.Column):
            name = node.name
            if name.startswith(AGG_PREFIX):
                i = int(name[len(AGG_PREFIX) :])
                vals = self.env.aggregates[i]
                iv = self.interval(i)
                if iv is None:
                    return Value(vals, None, None, "a quantile has no value interval")
                return Value(vals, iv[0], iv[1])
            if name.startswith(KEY_PREFIX):
                return self.exact(self.env.keys[int(name[len(KEY_PREFIX) :])])
            raise InternalError("an unbound column reached post-processing")
        if isinstance(node, exp.Literal):
            if node.is_string:
                return self.exact(self.full(node.this))
            text = node.this
            num: int | float = int(text) if text.lstrip("-").isdigit() else float(text)
            lit = self.exact(self.full(num))
            # DuckDB reads 2.5 as a DECIMAL, 1e3 as a DOUBLE
            lit.decimal = isinstance(num, float) and "e" not in text.lower()
            return lit
        if isinstance(node, exp.Null):
            return Value(np.full(self.env.size, np.nan), None, None, "NULL")
        if isinstance(node, exp.Neg):
            v = self.eval(node.this)
            negated: Array = -_numeric(v.values)
            if _integral(v.values):
                ints = [None if x is None else -x for x in _int_list(v.values)]
                over = np.array([x is not None and x > _I64_MAX for x in ints], dtype=bool)
                self.fail(over, "integer overflow (DuckDB raises)")
                negated = _int_array([None if o else x for x, o in zip(ints, over, strict=True)])
            if v.low is None or v.high is None:
                return Value(negated, None, None, v.reason, v.decimal)
            return Value(negated, -v.high, -v.low, None, v.decimal)
        if isinstance(node, ARITHMETIC):
            return self.arithmetic(node)
        if isinstance(node, (*MONOTONE, exp.Abs, exp.Sign)):
            return self.unary(node)
        if isinstance(node, exp.Pow | exp.Log):
            return self.binary_function(node)
        if isinstance(node, exp.Greatest | exp.Least):
            return self.extreme(node)
        if isinstance(node, exp.Cast | exp.TryCast):
            return self.cast(node)
        if isinstance(node, exp.Coalesce):
            return self.coalesce(node)
        if isinstance(node, exp.Case | exp.If):
            return self.case(node)
        if isinstance(node, exp.Lower | exp.Upper | exp.Length):
            raw = self.eval(node.this).values
            texts = [None if _null(x) else _text(x) for x in raw]
            if isinstance(node, exp.Length):
                lengths = [np.nan if x is None else len(x) for x in texts]
                out = np.array(lengths, dtype=np.float64)
                return self.exact(_as_int(out, np.zeros(out.shape, dtype=bool)))
            fn = str.lower if isinstance(node, exp.Lower) else str.upper
            cased = [None if x is None else fn(x) for x in texts]
            return Value(np.array(cased, dtype=object), None, None)
        if isinstance(node, exp.Boolean | exp.Predicate | exp.Not | exp.And | exp.Or):
            t, f = self.tri(node)
            return Value(_bool_array(t, f), None, None)
        raise InternalError(f"post-processing cannot evaluate {type(node).__name__}")

    # -- three-valued logic ----------------------------------------------------------------

    def tri(self, node: exp.Expression, *, select: bool = False) -> Tri:
        """``node`` as a three-valued truth (its failures added to :attr:`failed`).

        ``select``: the condition of a CASE branch, where DuckDB evaluates AND and OR left
        to right and skips the right side of ``FALSE AND …`` and ``TRUE OR …`` (elsewhere,
        as in a SELECT list or HAVING, it evaluates both sides: a failure in either fails).
        """
        while isinstance(node, exp.Paren):
            node = node.this
        if isinstance(node, exp.Boolean):
            t = np.full(self.env.size, bool(node.this))
            return t, ~t
        if isinstance(node, exp.Not):
            t, f = self.tri(node.this)
            return f, t
        if isinstance(node, exp.And | exp.Or):
            (ta, fa), fail_a = self.isolated_tri(node.args["this"], select=select)
            (tb, fb), fail_b = self.isolated_tri(node.args["expression"], select=select)
            decided = (fa if isinstance(node, exp.And) else ta) & ~fail_a
            if select:
                fail_b = fail_b & ~decided
            self.failed = self.failed | fail_a | fail_b
            if isinstance(node, exp.And):
                return ta & tb, fa | fb
            return ta | tb, fa & fb
        if isinstance(node, COMPARISONS):
            return self.compare(node)
        if isinstance(node, exp.Is):
            v = self.eval(node.this)
            n = _is_null(v.values)
            return n, ~n
        if isinstance(node, exp.Between):
            # all three operands are evaluated (no short circuit, unlike AND)
            v = self.eval(node.this)
            lo, hi = self.eval(node.args["low"]), self.eval(node.args["high"])
            t1, f1 = self.cmp(v.values, lo.values, "GTE")
            t2, f2 = self.cmp(v.values, hi.values, "LTE")
            return t1 & t2, f1 | f2
        if isinstance(node, exp.In):
            v = self.eval(node.this)
            t = np.zeros(self.env.size, dtype=bool)
            f = np.ones(self.env.size, dtype=bool)
            for e in node.expressions:
                te, fe = self.cmp(v.values, self.eval(e).values, "EQ")
                t, f = t | te, f & fe
            return t, f
        if isinstance(node, exp.Like | exp.ILike):
            return self.like(node)
        return self.truth_of(self.eval(node).values)

    def truth_of(self, v: Array) -> Tri:
        """A value read as a condition (DuckDB's implicit cast to BOOLEAN)."""
        if v.dtype == bool:
            b = v.astype(bool)
            return b, ~b
        if v.dtype != object:
            x = v.astype(np.float64)
            nan = np.isnan(x)
            return (x != 0) & ~nan, (x == 0) & ~nan
        t = np.zeros(v.shape, dtype=bool)
        f = np.zeros(v.shape, dtype=bool)
        bad = np.zeros(v.shape, dtype=bool)
        for i, x in enumerate(v):
            if _null(x):
                continue
            parsed = text_to_bool(x) if isinstance(x, str) else bool(x)
            if parsed is None:
                bad[i] = True
            elif parsed:
                t[i] = True
            else:
                f[i] = True
        self.fail(bad, "a text value is not a boolean (DuckDB raises a conversion error)")
        return t, f

    def truth(self, node: exp.Expression) -> npt.NDArray[np.bool_]:
        """Where ``node`` is TRUE (NULL counts as false)."""
        return self.tri(node)[0]

    def like(self, node: exp.Expression) -> Tri:
        pattern = node.expression
        if not (isinstance(pattern, exp.Literal) and pattern.is_string):
            raise InternalError("LIKE needs a literal pattern")
        flags = re.IGNORECASE if isinstance(node, exp.ILike) else 0
        rx = re.compile(
            "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern.this),
            flags | re.DOTALL,
        )
        v = self.eval(node.this).values
        null = _is_null(v)
        hits = np.array(
            [not n and rx.fullmatch(_text(x)) is not None for x, n in zip(v, null, strict=True)],
            dtype=bool,
        )
        return hits, ~hits & ~null

    # -- comparisons -----------------------------------------------------------------------

    def cmp(self, a: Array, b: Array, op: str) -> Tri:
        """``a op b`` with DuckDB's implicit conversions.

        Text compared with a number or a boolean is cast to that type (rows where the cast
        fails raise in DuckDB, so they fail here).
        """
        if a.dtype != object and b.dtype != object:
            x, y = a.astype(np.float64), b.astype(np.float64)
            with np.errstate(invalid="ignore"):
                res = _OPS[op](x, y)
            ok = ~np.isnan(x) & ~np.isnan(y)
            return np.asarray(res & ok, dtype=bool), np.asarray(~res & ok, dtype=bool)
        t = np.zeros(self.env.size, dtype=bool)
        f = np.zeros(self.env.size, dtype=bool)
        bad = np.zeros(self.env.size, dtype=bool)
        for i, (p, q) in enumerate(zip(a, b, strict=True)):
            if _null(p) or _null(q):
                continue
            p2, q2 = _coerce_pair(p, q)
            if p2 is None or q2 is None:
                bad[i] = True
                continue
            try:
                r = bool(_OPS[op](p2, q2))
            except TypeError:
                bad[i] = True
                continue
            t[i], f[i] = r, not r
        self.fail(bad, "a comparison of text with a number or boolean failed to convert the text")
        return t, f

    def compare(self, node: exp.Expression) -> Tri:
        a, b = self.eval(node.args["this"]), self.eval(node.args["expression"])
        if isinstance(node, exp.NullSafeEQ | exp.NullSafeNEQ):
            na, nb = _is_null(a.values), _is_null(b.values)
            te, _ = self.cmp(a.values, b.values, "EQ")
            eq = te | (na & nb)
            return (eq, ~eq) if isinstance(node, exp.NullSafeEQ) else (~eq, eq)
        return self.cmp(a.values, b.values, type(node).__name__.upper())

    # -- arithmetic ------------------------------------------------------------------------

    def operand(self, v: Value) -> F64:
        """A value used as a number: text is not one (refused by validation; NULL here)."""
        if v.values.dtype == object:
            text = np.array([isinstance(x, str) for x in v.values], dtype=bool)
            self.fail(text, "text used as a number (CAST it first)")
        return _numeric(v.values)

    def arithmetic(self, node: exp.Expression) -> Value:
        a, b = self.eval(node.args["this"]), self.eval(node.args["expression"])
        x, y = self.operand(a), self.operand(b)
        integer = _integral(a.values) and _integral(b.values) and not isinstance(node, exp.Div)
        decimal = (a.decimal or b.decimal) and all(v.decimal or _integral(v.values) for v in (a, b))
        decimal = decimal and not isinstance(node, exp.Div | exp.IntDiv)
        out: Array
        if integer:
            out, over, zero = _int_arithmetic(node, a.values, b.values)
            self.fail(over, "integer overflow (DuckDB raises)")
            op = "integer division" if isinstance(node, exp.IntDiv) else "modulo"
            self.fail(zero, f"{op} by zero (DuckDB raises)")
        else:
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                if isinstance(node, exp.Add):
                    out = x + y
                elif isinstance(node, exp.Sub):
                    out = x - y
                elif isinstance(node, exp.Mul):
                    out = x * y
                elif isinstance(node, exp.Div | exp.IntDiv):
                    # DuckDB: a double division (x/0 is ±inf, 0/0 NaN); // on non-integers too
                    out = x / y
                else:  # Mod: the sign of the dividend, as C's fmod
                    out = np.fmod(x, y)
        if a.low is None or b.low is None or a.high is None or b.high is None:
            return Value(out, None, None, a.reason or b.reason, decimal)
        if isinstance(node, exp.Mod | exp.IntDiv):
            return Value(
                out,
                None,
                None,
                f"{'%' if isinstance(node, exp.Mod) else '//'} has no interval rule",
                decimal,
            )
        lo, hi = _interval_op(node, a.low, a.high, b.low, b.high)
        if lo is None or hi is None:
            return Value(out, None, None, "the divisor's interval contains 0", decimal)
        if isinstance(node, exp.Div) and not (np.isfinite(lo).all() and np.isfinite(hi).all()):
            return Value(out, lo, hi, "unbounded (±inf) where the divisor's interval contains 0")
        return Value(out, lo, hi, a.reason or b.reason, decimal)

    def unary(self, node: exp.Expression) -> Value:
        v = self.eval(node.this)
        x = self.operand(v)
        digits = 0
        if isinstance(node, exp.Round) and node.args.get("decimals") is not None:
            # a literal: evaluated apart, so that failures elsewhere cannot touch it
            d = self.isolated(node.args["decimals"])[0].values
            digits = int(_numeric(d)[0]) if d.size else 0
        fn = _unary_fn(node, digits)
        keep_int = _integral(v.values) and isinstance(node, exp.Round | exp.Abs | exp.Sign)
        decimal = v.decimal and isinstance(node, exp.Round | exp.Abs | exp.Floor | exp.Ceil)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            vals: Array = fn(x)
            if keep_int:
                ints = _int_list(v.values)
                if isinstance(node, exp.Abs):
                    vals = _int_array([None if i is None else abs(i) for i in ints])
                    over = np.array([i is not None and i > _I64_MAX for i in ints], dtype=bool)
                    self.fail(over, "integer overflow (DuckDB raises)")
                elif isinstance(node, exp.Sign) or digits >= 0:
                    # an integer is its own ROUND(…, d ≥ 0); SIGN is exact
                    signs = [None if i is None else (i > 0) - (i < 0) for i in ints]
                    vals = _int_array(signs if isinstance(node, exp.Sign) else ints)
                else:
                    vals = _as_int(np.asarray(vals, dtype=float), self.failed)
            if v.low is None or v.high is None:
                return Value(vals, None, None, v.reason, decimal)
            if isinstance(node, exp.Abs):
                lo = np.where(v.low >= 0, v.low, np.where(v.high <= 0, -v.high, 0.0))
                hi = np.maximum(np.abs(v.low), np.abs(v.high))
                return Value(vals, lo, hi, None, decimal)
            lo_in, hi_in = v.low, v.high
            if isinstance(node, exp.Sqrt):
                lo_in, hi_in = np.maximum(lo_in, 0.0), np.maximum(hi_in, 0.0)
            return Value(vals, fn(lo_in), fn(hi_in), None, decimal)

    def binary_function(self, node: exp.Expression) -> Value:
        if isinstance(node, exp.Pow):
            base, power = self.eval(node.this), self.eval(node.expression)
            x, p = self.operand(base), self.operand(power)
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                vals = np.power(x, p)
                ok = base.low is not None and base.high is not None and power.low is not None
                if ok and power.low is not None and power.high is not None:
                    assert base.low is not None and base.high is not None
                    exact_power = bool(np.all(power.low == power.high))
                    if exact_power and bool(np.all(power.low > 0)) and bool(np.all(base.low >= 0)):
                        return Value(vals, np.power(base.low, p), np.power(base.high, p))
            return Value(vals, None, None, "POWER has an interval only for x ≥ 0, p > 0")
        # LOG(b, x) in DuckDB's reading: base first when two arguments
        if node.expression is not None:
            b, v = self.eval(node.this), self.eval(node.expression)
            with np.errstate(divide="ignore", invalid="ignore"):
                vals = np.log(self.operand(v)) / np.log(self.operand(b))
            return Value(vals, None, None, "LOG with a base has no interval")
        v = self.eval(node.this)
        with np.errstate(divide="ignore", invalid="ignore"):
            vals = np.log10(self.operand(v))
            if v.low is None or v.high is None:
                return Value(vals, None, None, v.reason)
            return Value(vals, np.log10(v.low), np.log10(v.high))

    def extreme(self, node: exp.Expression) -> Value:
        parts = [self.eval(node.this), *(self.eval(e) for e in node.expressions)]
        fn = np.fmax if isinstance(node, exp.Greatest) else np.fmin
        vals = self.operand(parts[0])
        for p in parts[1:]:
            vals = fn(vals, self.operand(p))
        out: Array = vals
        decimal = any(p.decimal for p in parts) and all(
            p.decimal or _integral(p.values) for p in parts
        )
        if all(_integral(p.values) for p in parts):
            # exact on integers; NULL arguments are ignored, as DuckDB does
            pick = max if isinstance(node, exp.Greatest) else min
            rows = zip(*(_int_list(p.values) for p in parts), strict=True)
            out = _int_array(
                [pick((x for x in row if x is not None), default=None) for row in rows]
            )
        if any(p.low is None or p.high is None for p in parts):
            return Value(out, None, None, "an argument has no interval", decimal)
        lo, hi = parts[0].low, parts[0].high
        assert lo is not None and hi is not None
        for p in parts[1:]:
            assert p.low is not None and p.high is not None
            lo, hi = fn(lo, p.low), fn(hi, p.high)
        return Value(out, lo, hi, None, decimal)

    # -- casts -----------------------------------------------------------------------------

    def cast(self, node: exp.Expression) -> Value:
        v = self.eval(node.this)
        to = node.args["to"]
        kind = _cast_kind(to)
        name = to.sql(dialect="duckdb")
        src = v.values
        if kind == "text":
            return Value(
                np.array([None if _null(x) else _text(x) for x in src], dtype=object),
                None,
                None,
            )
        if kind == "bool":
            t, f = self.truth_of(src)
            return Value(_bool_array(t, f), None, None)
        if kind == "int":
            return self.cast_int(v, to)
        bad = np.zeros(self.env.size, dtype=bool)
        if src.dtype == object:
            x = np.full(self.env.size, np.nan)
            for i, item in enumerate(src):
                if _null(item):
                    continue
                if isinstance(item, str):
                    parsed = text_to_float(item)
                    if parsed is None:
                        bad[i] = True
                    else:
                        x[i] = float(parsed)
                elif isinstance(item, bool | int | float | np.number | np.bool_):
                    x[i] = float(item)
                else:
                    bad[i] = True
        else:
            x = src.astype(np.float64)
        self.fail(bad, f"text that does not convert to {name} is NULL (DuckDB raises)")
        if to.this == _T.FLOAT:  # 32-bit: values beyond its range raise in DuckDB
            with np.errstate(invalid="ignore", over="ignore"):
                over = np.isfinite(x) & (np.abs(x) > _FLOAT32_MAX)
                self.fail(over, f"a value outside the range of {name} is NULL (DuckDB raises)")
                x = np.where(over, np.nan, x.astype(np.float32).astype(np.float64))
        return Value(x, v.low, v.high, v.reason)

    def cast_int(self, v: Value, to: exp.DataType) -> Value:
        """CAST to an integer type: exact, NULL (failed) where DuckDB raises.

        Doubles round halves to even, DECIMALs and text halves away from zero (DuckDB).
        """
        name = to.sql(dialect="duckdb")
        lo_t, hi_t = INTEGER_RANGES[to.this]
        items: list[int | None] = []
        unreadable = np.zeros(self.env.size, dtype=bool)
        for i, item in enumerate(v.values.tolist()):
            value: int | None = None
            if _null(item):
                pass
            elif isinstance(item, str):
                value = text_to_int(item)
                unreadable[i] = value is None
            elif isinstance(item, bool | int):
                value = int(item)
            elif isinstance(item, float) and math.isfinite(item):
                value = _round_away(item) if v.decimal else round(item)  # round(): to even
            else:
                unreadable[i] = True
            items.append(value)
        self.fail(unreadable, f"a value that does not convert to {name} is NULL (DuckDB raises)")
        over = np.array([x is not None and not lo_t <= x <= hi_t for x in items], dtype=bool)
        self.fail(over, f"a value outside the range of {name} is NULL (DuckDB raises)")
        out = _int_array([None if o else x for x, o in zip(items, over, strict=True)])
        if v.low is None or v.high is None:
            return Value(out, None, None, v.reason)
        rounding = round_half_away if v.decimal else np.rint
        # a defined result lies in the type's range: so does its interval
        low = np.clip(rounding(v.low), lo_t, hi_t)
        high = np.clip(rounding(v.high), lo_t, hi_t)
        return Value(out, low, high, v.reason)

    # -- conditionals ----------------------------------------------------------------------

    def coalesce(self, node: exp.Expression) -> Value:
        first, fail0 = self.isolated(node.this)
        self.failed = self.failed | fail0
        out = first.values.copy()
        if out.dtype.kind in "iub":
            return Value(out, first.low, first.high, first.reason)
        parts = [first]
        for e in node.expressions:
            miss = _is_null(out)
            p, own = self.isolated(e)
            parts.append(p)
            self.failed = self.failed | (own & miss)
            if out.dtype == object or p.values.dtype == object:
                out = out.astype(object)
                out[miss] = p.values.astype(object)[miss]
            else:
                out = np.where(miss, p.values.astype(np.float64), out)
        decimal = any(p.decimal for p in parts) and all(
            p.decimal or _integral(p.values) for p in parts
        )
        return Value(out, None, None, "COALESCE has no interval", decimal)

    def case(self, node: exp.Expression) -> Value:
        if isinstance(node, exp.If):
            branches = [(node.this, node.args["true"])]
            default = node.args.get("false")
        else:
            subject = node.this
            branches = []
            for ifs in node.args.get("ifs") or []:
                cond = ifs.this if subject is None else exp.EQ(this=subject, expression=ifs.this)
                branches.append((cond, ifs.args["true"]))
            default = node.args.get("default")
        evaluated = [self.isolated(v) for _, v in branches]
        results = [r.values for r, _ in evaluated]
        fallback_eval = self.isolated(default) if default is not None else None
        fallback = fallback_eval[0].values if fallback_eval is not None else None
        integer = all(_integral(r) for r in results) and (fallback is None or _integral(fallback))
        parts = [r for r, _ in evaluated] + ([fallback_eval[0]] if fallback_eval else [])
        decimal = any(p.decimal for p in parts) and all(
            p.decimal or _integral(p.values) for p in parts
        )
        # integers are carried as objects here (exact, with None for NULL)
        text = (
            integer
            or any(r.dtype == object for r in results)
            or (fallback is not None and fallback.dtype == object)
        )
        if text:
            out: Array = np.array([None] * self.env.size, dtype=object)
        else:
            out = np.full(self.env.size, np.nan)
        done = np.zeros(self.env.size, dtype=bool)
        for (cond, _), res, (_, res_fail) in zip(branches, results, evaluated, strict=True):
            (t, _), cond_fail = self.isolated_tri(cond, select=True)
            self.failed = self.failed | (cond_fail & ~done)
            hit = t & ~done & ~cond_fail
            self.failed = self.failed | (res_fail & hit)
            out[hit] = res.astype(object)[hit] if text else _numeric(res)[hit]
            done |= hit | cond_fail
        if fallback is not None and fallback_eval is not None:
            rest = ~done
            self.failed = self.failed | (fallback_eval[1] & rest)
            out[rest] = fallback.astype(object)[rest] if text else _numeric(fallback)[rest]
        if integer:
            out = _int_array([None if _null(x) else int(x) for x in out.tolist()])
        return Value(out, None, None, "CASE has no interval", decimal)


_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "EQ": lambda p, q: p == q,
    "NEQ": lambda p, q: p != q,
    "GT": lambda p, q: p > q,
    "GTE": lambda p, q: p >= q,
    "LT": lambda p, q: p < q,
    "LTE": lambda p, q: p <= q,
}


def _coerce_pair(p: object, q: object) -> tuple[object, object]:
    """Two non-NULL values made comparable as DuckDB does (None where a cast fails)."""
    if isinstance(p, str) and isinstance(q, str):
        return p, q
    if isinstance(p, str):
        q2, p2 = _coerce_pair(q, p)
        return p2, q2
    if not isinstance(q, str):
        return p, q
    # p is not text, q is: q is cast to p's type
    if isinstance(p, bool | np.bool_):
        return p, text_to_bool(q)
    if isinstance(p, int | np.integer):
        return p, text_to_int(q)
    if isinstance(p, float | np.floating):
        return p, text_to_float(q)
    return p, None


def _bool_array(t: npt.NDArray[np.bool_], f: npt.NDArray[np.bool_]) -> Array:
    """A three-valued truth as values: bool when never NULL, else objects with None."""
    null = ~t & ~f
    if not bool(null.any()):
        return t.copy()
    out = t.astype(object)
    out[null] = _NONE
    return np.asarray(out)


def _unary_fn(node: exp.Expression, digits: int) -> Callable[[F64], F64]:
    if isinstance(node, exp.Round):
        return lambda x: _round_digits(x, digits)
    if isinstance(node, exp.Floor):
        return np.floor
    if isinstance(node, exp.Ceil):
        return np.ceil
    if isinstance(node, exp.Sqrt):
        return np.sqrt
    if isinstance(node, exp.Ln):
        return np.log
    if isinstance(node, exp.Exp):
        return np.exp
    if isinstance(node, exp.Sign):
        return np.sign
    if isinstance(node, exp.Abs):
        return np.abs
    raise InternalError(f"no function for {type(node).__name__}")


def _interval_op(
    node: exp.Expression, a_lo: F64, a_hi: F64, b_lo: F64, b_hi: F64
) -> tuple[F64 | None, F64 | None]:
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if isinstance(node, exp.Add):
            return a_lo + b_lo, a_hi + b_hi
        if isinstance(node, exp.Sub):
            return a_lo - b_hi, a_hi - b_lo
        if isinstance(node, exp.Mul):
            c = np.stack([a_lo * b_lo, a_lo * b_hi, a_hi * b_lo, a_hi * b_hi])
            return c.min(axis=0), c.max(axis=0)
        if isinstance(node, exp.Div):
            if bool(np.any((b_lo <= 0) & (b_hi >= 0))):
                zero = (b_lo <= 0) & (b_hi >= 0)
                c = np.stack([a_lo / b_lo, a_lo / b_hi, a_hi / b_lo, a_hi / b_hi])
                lo = np.where(zero, -np.inf, c.min(axis=0))
                hi = np.where(zero, np.inf, c.max(axis=0))
                if bool(np.all(zero)):
                    return None, None
                return lo, hi
            c = np.stack([a_lo / b_lo, a_lo / b_hi, a_hi / b_lo, a_hi / b_hi])
            return c.min(axis=0), c.max(axis=0)
    return None, None
