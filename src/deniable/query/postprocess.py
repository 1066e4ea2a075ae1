"""Post-processing of released values: arithmetic, HAVING, ORDER BY — free of privacy loss.

Everything here reads only released values (noisy aggregates and released group keys) and
public literals, so by the post-processing property of DP it costs nothing. Expressions are
sqlglot trees over two kinds of placeholder columns: ``__agg<i>`` for the ``i``-th aggregate
and ``__key<j>`` for the ``j``-th group key; they are evaluated on numpy arrays with SQL's
NULL semantics (NULL and NaN propagate; a NULL predicate is false).

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
        UnsafeQuery: naming the construct.
    """
    from deniable.query.parse import refuse

    for n in node.walk():
        if not isinstance(n, ALLOWED) or type(n) is exp.Anonymous:
            what = n.sql_name().upper() if isinstance(n, exp.Func) else type(n).__name__
            if isinstance(n, exp.Anonymous):
                what = str(n.this).upper()
            raise refuse(f"{what} is not supported in post-processing; {HELP}", n, text)
        if isinstance(n, exp.In) and any(
            n.args.get(a) for a in ("query", "unnest", "field", "is_global")
        ):
            raise refuse("IN takes a list of literals", n, text)
        if isinstance(n, exp.Cast | exp.TryCast):
            to = n.args.get("to")
            if not isinstance(to, exp.DataType) or _cast_kind(to) is None:
                raise refuse("CAST supports numeric, text and boolean types here", n, text)


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
        reason: why there is no interval, when there is none and one was expected.
    """

    values: Array
    low: F64 | None
    high: F64 | None
    reason: str | None = None


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
    """Evaluate a HAVING predicate: True where it holds (NULL counts as false)."""
    return _Evaluator(env, lambda i: None).truth(node)


def _cast_kind(to: exp.DataType) -> str | None:
    t = to.this
    if t in exp.DataType.INTEGER_TYPES:
        return "int"
    if t in exp.DataType.REAL_TYPES:
        return "float"
    if t in exp.DataType.TEXT_TYPES:
        return "text"
    if t == exp.DataType.Type.BOOLEAN:
        return "bool"
    return None


def _is_null(v: Array) -> npt.NDArray[np.bool_]:
    if v.dtype == object:
        return np.array(
            [x is None or (isinstance(x, float) and math.isnan(x)) for x in v], dtype=bool
        )
    if v.dtype.kind == "f":
        return np.isnan(v)
    return np.zeros(v.shape, dtype=bool)


def _numeric(v: Array) -> F64:
    if v.dtype == object:
        out = np.full(v.shape, np.nan)
        for i, x in enumerate(v):
            if isinstance(x, bool | np.bool_ | int | float | np.integer | np.floating):
                out[i] = float(x)
        return out
    return v.astype(np.float64)


class _Evaluator:
    def __init__(self, env: Env, interval: Callable[[int], tuple[F64, F64] | None]) -> None:
        self.env = env
        self.interval = interval

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
            return self.exact(self.full(num))
        if isinstance(node, exp.Boolean):
            return Value(self.full(bool(node.this)), None, None)
        if isinstance(node, exp.Null):
            return Value(np.full(self.env.size, np.nan), None, None, "NULL")
        if isinstance(node, exp.Neg):
            v = self.eval(node.this)
            vals = -_numeric(v.values)
            if v.low is None or v.high is None:
                return Value(vals, None, None, v.reason)
            return Value(vals, -v.high, -v.low)
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
        if isinstance(node, COMPARISONS):
            return self.compare(node)
        if isinstance(node, exp.And | exp.Or):
            a = self.truth(node.args["this"])
            b = self.truth(node.args["expression"])
            return Value(a & b if isinstance(node, exp.And) else a | b, None, None)
        if isinstance(node, exp.Not):
            return Value(~self.truth(node.this), None, None)
        if isinstance(node, exp.Is):
            v = self.eval(node.this)
            return Value(_is_null(v.values), None, None)
        if isinstance(node, exp.Between):
            v = self.eval(node.this)
            lo, hi = self.eval(node.args["low"]), self.eval(node.args["high"])
            return Value(
                self.cmp(v.values, lo.values, "GTE") & self.cmp(v.values, hi.values, "LTE"),
                None,
                None,
            )
        if isinstance(node, exp.In):
            v = self.eval(node.this)
            hit = np.zeros(self.env.size, dtype=bool)
            for e in node.expressions:
                hit |= self.cmp(v.values, self.eval(e).values, "EQ")
            return Value(hit, None, None)
        if isinstance(node, exp.Coalesce):
            parts = [self.eval(node.this), *(self.eval(e) for e in node.expressions)]
            out = parts[0].values.copy()
            if out.dtype.kind in "iub":
                return Value(out, parts[0].low, parts[0].high, parts[0].reason)
            for p in parts[1:]:
                miss = _is_null(out)
                if out.dtype == object or p.values.dtype == object:
                    out = out.astype(object)
                    out[miss] = p.values.astype(object)[miss]
                else:
                    out = np.where(miss, p.values.astype(np.float64), out)
            return Value(out, None, None, "COALESCE has no interval")
        if isinstance(node, exp.Case | exp.If):
            return self.case(node)
        if isinstance(node, exp.Lower | exp.Upper | exp.Length):
            raw = self.eval(node.this).values
            texts = [None if _null(x) else _text(x) for x in raw]
            if isinstance(node, exp.Length):
                lengths = [np.nan if x is None else len(x) for x in texts]
                return self.exact(np.array(lengths, dtype=np.float64))
            fn = str.lower if isinstance(node, exp.Lower) else str.upper
            cased = [None if x is None else fn(x) for x in texts]
            return Value(np.array(cased, dtype=object), None, None)
        if isinstance(node, exp.Like | exp.ILike):
            return Value(self.like(node), None, None)
        raise InternalError(f"post-processing cannot evaluate {type(node).__name__}")

    def like(self, node: exp.Expression) -> npt.NDArray[np.bool_]:
        pattern = node.expression
        if not (isinstance(pattern, exp.Literal) and pattern.is_string):
            raise InternalError("LIKE needs a literal pattern")
        flags = re.IGNORECASE if isinstance(node, exp.ILike) else 0
        rx = re.compile(
            "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern.this),
            flags | re.DOTALL,
        )
        v = self.eval(node.this).values
        hits = [not _null(x) and rx.fullmatch(_text(x)) is not None for x in v]
        return np.array(hits, dtype=bool)

    def truth(self, node: exp.Expression) -> npt.NDArray[np.bool_]:
        v = self.eval(node).values
        if v.dtype == bool:
            return v.astype(bool)
        if v.dtype == object:
            return np.array([bool(x) if x is not None else False for x in v], dtype=bool)
        return np.asarray(np.nan_to_num(v.astype(np.float64), nan=0.0) != 0, dtype=bool)

    def arithmetic(self, node: exp.Expression) -> Value:
        a, b = self.eval(node.args["this"]), self.eval(node.args["expression"])
        x, y = _numeric(a.values), _numeric(b.values)
        integer = a.values.dtype.kind in "iu" and b.values.dtype.kind in "iu"
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            if isinstance(node, exp.Add):
                vals = x + y
            elif isinstance(node, exp.Sub):
                vals = x - y
            elif isinstance(node, exp.Mul):
                vals = x * y
            elif isinstance(node, exp.Div):
                vals = np.where(y == 0, np.nan, x / y)
                integer = False
            elif isinstance(node, exp.IntDiv):
                vals = np.where(y == 0, np.nan, np.trunc(x / y))
            else:  # Mod
                vals = np.where(y == 0, np.nan, np.fmod(x, y))
        out: Array = vals.astype(np.int64) if integer and not np.isnan(vals).any() else vals
        if a.low is None or b.low is None or a.high is None or b.high is None:
            return Value(out, None, None, a.reason or b.reason)
        if isinstance(node, exp.Mod | exp.IntDiv):
            return Value(
                out,
                None,
                None,
                f"{'%' if isinstance(node, exp.Mod) else '//'} has no interval rule",
            )
        lo, hi = _interval_op(node, a.low, a.high, b.low, b.high)
        if lo is None or hi is None:
            return Value(out, None, None, "the divisor's interval contains 0")
        if isinstance(node, exp.Div) and not (np.isfinite(lo).all() and np.isfinite(hi).all()):
            return Value(out, lo, hi, "unbounded (±inf) where the divisor's interval contains 0")
        return Value(out, lo, hi, a.reason or b.reason)

    def unary(self, node: exp.Expression) -> Value:
        v = self.eval(node.this)
        x = _numeric(v.values)
        digits = 0
        if isinstance(node, exp.Round) and node.args.get("decimals") is not None:
            d = self.eval(node.args["decimals"]).values
            digits = int(_numeric(d)[0]) if d.size else 0
        fn = _unary_fn(node, digits)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            vals = fn(x)
            if v.low is None or v.high is None:
                return Value(vals, None, None, v.reason)
            if isinstance(node, exp.Abs):
                lo = np.where(v.low >= 0, v.low, np.where(v.high <= 0, -v.high, 0.0))
                hi = np.maximum(np.abs(v.low), np.abs(v.high))
                return Value(vals, lo, hi)
            lo_in, hi_in = v.low, v.high
            if isinstance(node, exp.Sqrt):
                lo_in, hi_in = np.maximum(lo_in, 0.0), np.maximum(hi_in, 0.0)
            return Value(vals, fn(lo_in), fn(hi_in))

    def binary_function(self, node: exp.Expression) -> Value:
        if isinstance(node, exp.Pow):
            base, power = self.eval(node.this), self.eval(node.expression)
            x, p = _numeric(base.values), _numeric(power.values)
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
                vals = np.log(_numeric(v.values)) / np.log(_numeric(b.values))
            return Value(vals, None, None, "LOG with a base has no interval")
        v = self.eval(node.this)
        with np.errstate(divide="ignore", invalid="ignore"):
            vals = np.log10(_numeric(v.values))
            if v.low is None or v.high is None:
                return Value(vals, None, None, v.reason)
            return Value(vals, np.log10(v.low), np.log10(v.high))

    def extreme(self, node: exp.Expression) -> Value:
        parts = [self.eval(node.this), *(self.eval(e) for e in node.expressions)]
        fn = np.fmax if isinstance(node, exp.Greatest) else np.fmin
        vals = _numeric(parts[0].values)
        for p in parts[1:]:
            vals = fn(vals, _numeric(p.values))
        if any(p.low is None or p.high is None for p in parts):
            return Value(vals, None, None, "an argument has no interval")
        lo, hi = parts[0].low, parts[0].high
        assert lo is not None and hi is not None
        for p in parts[1:]:
            assert p.low is not None and p.high is not None
            lo, hi = fn(lo, p.low), fn(hi, p.high)
        return Value(vals, lo, hi)

    def cast(self, node: exp.Expression) -> Value:
        v = self.eval(node.this)
        to = node.args["to"]
        kind = _cast_kind(to)
        if kind == "text":
            return Value(
                np.array([None if _null(x) else _text(x) for x in v.values], dtype=object),
                None,
                None,
            )
        if kind == "bool":
            return Value(self.truth(node.this), None, None)
        x = _numeric(v.values)
        if kind == "int":
            with np.errstate(invalid="ignore"):
                vals = np.round(x)
            if not np.isnan(vals).any():
                out: Array = vals.astype(np.int64)
            else:
                out = vals
            if v.low is None or v.high is None:
                return Value(out, None, None, v.reason)
            return Value(out, np.round(v.low), np.round(v.high))
        return Value(x, v.low, v.high, v.reason)

    def cmp(self, a: Array, b: Array, op: str) -> npt.NDArray[np.bool_]:
        if a.dtype != object and b.dtype != object:
            x, y = a.astype(np.float64), b.astype(np.float64)
            with np.errstate(invalid="ignore"):
                res = {
                    "EQ": x == y,
                    "NEQ": x != y,
                    "GT": x > y,
                    "GTE": x >= y,
                    "LT": x < y,
                    "LTE": x <= y,
                }[op]
            return np.asarray(res & ~np.isnan(x) & ~np.isnan(y), dtype=bool)
        out = np.zeros(self.env.size, dtype=bool)
        for i, (p, q) in enumerate(zip(a, b, strict=True)):
            if _null(p) or _null(q):
                continue
            try:
                out[i] = {
                    "EQ": p == q,
                    "NEQ": p != q,
                    "GT": p > q,
                    "GTE": p >= q,
                    "LT": p < q,
                    "LTE": p <= q,
                }[op]
            except TypeError:
                out[i] = False
        return out

    def compare(self, node: exp.Expression) -> Value:
        a, b = self.eval(node.args["this"]), self.eval(node.args["expression"])
        if isinstance(node, exp.NullSafeEQ | exp.NullSafeNEQ):
            both = _is_null(a.values) & _is_null(b.values)
            eq = self.cmp(a.values, b.values, "EQ") | both
            return Value(eq if isinstance(node, exp.NullSafeEQ) else ~eq, None, None)
        op = type(node).__name__.upper()
        return Value(self.cmp(a.values, b.values, op), None, None)

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
        results = [self.eval(v).values for _, v in branches]
        fallback = self.eval(default).values if default is not None else None
        text = any(r.dtype == object for r in results) or (
            fallback is not None and fallback.dtype == object
        )
        if text:
            out: Array = np.array([None] * self.env.size, dtype=object)
        else:
            out = np.full(self.env.size, np.nan)
        done = np.zeros(self.env.size, dtype=bool)
        for (cond, _), res in zip(branches, results, strict=True):
            hit = self.truth(cond) & ~done
            out[hit] = res.astype(object)[hit] if text else _numeric(res)[hit]
            done |= hit
        if fallback is not None:
            rest = ~done
            out[rest] = fallback.astype(object)[rest] if text else _numeric(fallback)[rest]
        return Value(out, None, None, "CASE has no interval")


def _null(x: object) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _text(x: object) -> str:
    if isinstance(x, bool | np.bool_):
        return "true" if x else "false"
    if isinstance(x, float | np.floating) and float(x).is_integer():
        return str(int(x))
    return str(x)


def _unary_fn(node: exp.Expression, digits: int) -> Callable[[F64], F64]:
    if isinstance(node, exp.Round):
        return lambda x: np.round(x, digits)
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
