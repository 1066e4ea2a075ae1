"""Exact arithmetic behind the samplers: rationals, bounds on e^(−x), lazy uniforms.

Every sampler in :mod:`deniable.noise` decides its output by comparing a uniform variate
``U' ∈ [0, 1)`` with a threshold (a rational ``p`` or ``e^(−x)`` for rational ``x``). The
first 64 bits of ``U'`` settle almost every comparison through a fast floating-point filter
whose error is bounded with a wide margin; whatever the filter cannot settle is decided here
exactly, by drawing more bits of ``U'`` and computing the threshold to more precision. The
output distribution is therefore the mathematical one, not an approximation.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from fractions import Fraction
from functools import lru_cache

import numpy as np

from deniable.errors import InvalidParameter
from deniable.noise.source import RandomSource

RationalLike = Fraction | int | float

Bounds = Callable[[int], tuple[int, int]]
"""``bounds(k)`` returns integers ``lo ≤ v·2^k ≤ hi`` for the threshold ``v``."""


def to_fraction(value: RationalLike, name: str) -> Fraction:
    """Convert an int, float or Fraction to a Fraction, refusing NaN, ±inf and non-numbers.

    A float is read as the shortest decimal that prints as it (``0.1`` → 1/10): what the user
    typed. Every privacy parameter goes through this one reading (``accounting.loss`` too), so
    the noise is calibrated to exactly the loss that is charged.

    Examples:
        >>> to_fraction(0.1, "epsilon")
        Fraction(1, 10)
    """
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        raise InvalidParameter(f"{name} must be an int, float or Fraction")
    if isinstance(value, Fraction):
        return value
    if isinstance(value, numbers.Integral):
        return Fraction(int(value))
    f = float(value)  # numpy floats convert exactly
    if not math.isfinite(f):
        raise InvalidParameter(f"{name} must be finite, got {f!r}")
    return Fraction(repr(f))


def sensitivity_fraction(value: RationalLike, name: str = "sensitivity") -> Fraction:
    """Read a sensitivity (or clamp width) upwards: the larger of the decimal and binary readings.

    Data clamped to the double ``0.1`` can move by the double's exact value, a hair above 1/10;
    a sensitivity must cover that, so it never takes the smaller reading.

    Examples:
        >>> sensitivity_fraction(0.1) > Fraction(1, 10)
        True
    """
    f = positive_fraction(value, name)
    if isinstance(value, float | np.floating):
        f = max(f, Fraction(float(value)))
    return f


def positive_fraction(value: RationalLike, name: str) -> Fraction:
    """Like :func:`to_fraction`, and refuse values ≤ 0."""
    f = to_fraction(value, name)
    if f <= 0:
        raise InvalidParameter(f"{name} must be > 0, got {float(f)!r}")
    return f


def rational_bounds(p: Fraction) -> Bounds:
    """Bounds of a rational threshold: exactly ``floor`` and ``ceil`` of ``p·2^k``."""

    def bounds(k: int) -> tuple[int, int]:
        num = p.numerator << k
        lo = num // p.denominator
        return lo, -((-num) // p.denominator)

    return bounds


@lru_cache(maxsize=64)
def _exp_neg_one(work: int) -> tuple[int, int]:
    """Integers bounding ``e^(−1)·2^work``."""
    return _exp_neg_frac_fixed(Fraction(1), work)


def _exp_neg_frac_fixed(f: Fraction, work: int) -> tuple[int, int]:
    """Bounds of ``e^(−f)·2^work`` for ``0 ≤ f ≤ 1`` via the alternating Taylor series.

    Each term ``T_k = floor(T_{k−1}·f/k)`` is off by less than 2 units (the multiplier is at
    most 1, so earlier errors shrink), and the truncation error is at most the first omitted
    term; the returned interval adds all of that.
    """
    p, q = f.numerator, f.denominator
    term = 1 << work
    total = term
    k = 0
    while term:
        k += 1
        term = term * p // (q * k)
        total += -term if k % 2 else term
    slack = 2 * k + 2
    return max(total - slack, 0), total + slack


def exp_neg_bounds(x: Fraction, k: int) -> tuple[int, int]:
    """Return integers ``lo ≤ e^(−x)·2^k ≤ hi`` for rational ``x ≥ 0``; ``hi − lo`` ≤ 2 or so.

    Examples:
        >>> lo, hi = exp_neg_bounds(Fraction(1), 20)
        >>> lo <= math.exp(-1) * 2**20 <= hi
        True
    """
    if x < 0:
        raise InvalidParameter("exp_neg_bounds needs x ≥ 0")
    n = x.numerator // x.denominator
    f = x - n
    work = k + 64 + 2 * max(n, 1).bit_length()
    one = 1 << work
    lo, hi = _exp_neg_frac_fixed(f, work)
    if n:
        # (e^(−1))^n by squaring, interval arithmetic on non-negative fixed-point values.
        base_lo, base_hi = _exp_neg_one(work)
        acc_lo, acc_hi = one, one
        m = n
        while m:
            if m & 1:
                acc_lo, acc_hi = (acc_lo * base_lo) >> work, -((-acc_hi * base_hi) >> work)
            m >>= 1
            if m:
                base_lo, base_hi = (base_lo * base_lo) >> work, -((-base_hi * base_hi) >> work)
            if acc_hi == 0:
                break
        lo, hi = (lo * acc_lo) >> work, -((-hi * acc_hi) >> work)
    shift = work - k
    return lo >> shift, -((-hi) >> shift)


def exp_neg_bound_fn(x: Fraction) -> Bounds:
    """The :data:`Bounds` of ``e^(−x)``."""
    return lambda k: exp_neg_bounds(x, k)


class LazyUniform:
    """A uniform variate ``U' ∈ [0, 1)`` of which only a prefix of bits has been drawn.

    ``U'`` lies in ``[a/2^k, (a+1)/2^k)``. Comparisons draw 64 more bits whenever the
    threshold falls inside that interval, so they are exact and consistent with each other.
    """

    __slots__ = ("_a", "_k", "_source")

    def __init__(self, first_word: int, source: RandomSource, bits: int = 64) -> None:
        self._a = first_word
        self._k = bits
        self._source = source

    def less_than(self, bounds: Bounds) -> bool:
        """Return whether ``U' < v`` for the threshold ``v`` described by ``bounds``."""
        while True:
            lo, hi = bounds(self._k)
            if self._a + 1 <= lo:
                return True
            if self._a >= hi:
                return False
            self._a = (self._a << 64) | int(self._source.words(1)[0])
            self._k += 64


def log_upper(x: Fraction) -> Fraction:
    """Return a rational upper bound of ``ln x`` for rational ``x > 0``.

    ``math.log`` of each term is within an ulp; the subtraction may cancel, so the margin is
    relative to the terms, not to the result: ``2^-48·(|ln a| + |ln b|)`` plus a tiny constant.

    Examples:
        >>> float(log_upper(Fraction(3))) >= math.log(3)
        True
    """
    if x <= 0:
        raise InvalidParameter("log_upper needs x > 0")
    a, b = math.log(x.numerator), math.log(x.denominator)
    return Fraction(a - b) + Fraction(abs(a) + abs(b) + abs(a - b)) / 2**48 + Fraction(1, 2**60)


_EXP_MAX = 700


def _exp_float(x: Fraction) -> tuple[Fraction, Fraction]:
    """``e^x`` as a float and a relative error bound: rounding x moves e^x by |x|·2^-53."""
    if x > _EXP_MAX:
        raise InvalidParameter("exponent above 700 is not supported (the loss is vacuous)")
    f = math.exp(float(x))
    return Fraction(f), (1 + abs(x)) / 2**48


def exp_upper(x: Fraction) -> Fraction:
    """Return a rational upper bound of ``e^x`` (relative slack ``(1+|x|)·2^-48``)."""
    f, rel = _exp_float(x)
    return f * (1 + rel) + Fraction(1, 2**1070)


def exp_lower(x: Fraction) -> Fraction:
    """Return a rational lower bound of ``e^x`` (relative slack ``(1+|x|)·2^-48``), ≥ 0."""
    f, rel = _exp_float(x)
    return max(f * (1 - rel), Fraction(0))
