"""Certified rational bounds on √, exp, expm1, ln and log1p, and safe rounding to Fractions.

Accounting formulas such as ``ρ + 2√(ρ ln(1/δ))`` or ``ln(1 + β(e^ε − 1))`` have irrational
values, but deniable stores every loss as an exact :class:`~fractions.Fraction`. Each such
value is therefore replaced by a Fraction on the *safe* side of it (above it for an ε or δ
that is charged, below it for an ε that is granted).

Floating point cannot certify a direction, so everything here is integer arithmetic: every
function returns an interval ``(lo, hi)`` of Fractions with ``lo ≤ true value ≤ hi``, computed
from Taylor or ``atanh`` series with an explicit bound on the remainder, and intermediate
results are rounded *outwards* (never towards the true value) to :data:`WORK_BITS`
significant bits. Correctness does not depend on the working precision, only tightness does:
intervals are about ``2^-90`` wide relative to the value. :func:`round_up` /
:func:`round_down` then shorten a bound to 53 significant bits in the same safe direction,
so a charged loss is a short Fraction that is never below the true value.
"""

from __future__ import annotations

from fractions import Fraction
from functools import cache
from math import isqrt

Interval = tuple[Fraction, Fraction]
"""``(lo, hi)`` with ``lo ≤ true value ≤ hi``."""

WORK_BITS = 100
"""Significant bits kept in intermediate results (only tightness depends on it)."""

MAX_EXP_ARGUMENT = 2**20
"""Largest ``|x|`` for :func:`exp_interval`: ``e^x`` then has about 1.5 million bits."""

_HALF = Fraction(1, 2)


def _floor_log2(q: Fraction) -> int:
    """Return ``⌊log₂ q⌋`` for ``q > 0``, exactly."""
    e = q.numerator.bit_length() - q.denominator.bit_length()
    # 2^(e−1) < q < 2^(e+1); settle which side of 2^e it is on.
    if (q.numerator << max(-e, 0)) < (q.denominator << max(e, 0)):
        e -= 1
    return e


def _round(q: Fraction, bits: int, *, up: bool) -> Fraction:
    """Round ``q`` to ``bits`` significant bits, up (towards +∞) or down (towards −∞)."""
    if q == 0:
        return q
    if q < 0:
        return -_round(-q, bits, up=not up)
    shift = bits - 1 - _floor_log2(q)  # q·2^shift lies in [2^(bits−1), 2^bits)
    num, den = q.numerator, q.denominator
    if shift >= 0:
        num <<= shift
    else:
        den <<= -shift
    m = -(-num // den) if up else num // den
    return Fraction(m, 1 << shift) if shift >= 0 else Fraction(m << -shift)


def round_up(q: Fraction, bits: int = 53) -> Fraction:
    """Return the smallest Fraction with ``bits`` significant bits that is ``≥ q``.

    With the default 53 bits the result is exactly representable as a float (when in range).

    Examples:
        >>> round_up(Fraction(1, 3)) >= Fraction(1, 3)
        True
        >>> round_up(Fraction(3, 4))
        Fraction(3, 4)
    """
    return _round(q, bits, up=True)


def round_down(q: Fraction, bits: int = 53) -> Fraction:
    """Return the largest Fraction with ``bits`` significant bits that is ``≤ q``.

    Examples:
        >>> round_down(Fraction(1, 3)) <= Fraction(1, 3)
        True
    """
    return _round(q, bits, up=False)


def _outward(lo: Fraction, hi: Fraction, bits: int = WORK_BITS) -> Interval:
    return _round(lo, bits, up=False), _round(hi, bits, up=True)


def sqrt_interval(x: Fraction) -> Interval:
    """Bounds of ``√x`` for ``x ≥ 0``.

    Examples:
        >>> sqrt_interval(Fraction(9, 4))
        (Fraction(3, 2), Fraction(3, 2))
    """
    if x < 0:
        raise ValueError("sqrt_interval needs x ≥ 0")
    if x == 0:
        return x, x
    # k such that x·4^k has about 2·WORK_BITS bits before the point: isqrt is then tight.
    k = WORK_BITS - _floor_log2(x) // 2
    scaled = x * Fraction(4) ** k
    floor_s = scaled.numerator // scaled.denominator
    ceil_s = -(-scaled.numerator // scaled.denominator)
    s_lo = isqrt(floor_s)
    s_hi = isqrt(ceil_s)
    if s_hi * s_hi < ceil_s:
        s_hi += 1
    unit = Fraction(2) ** -k
    return s_lo * unit, s_hi * unit


def _fixed_point(x: Fraction, bits: int) -> tuple[int, int, int]:
    """Return ``(P, ⌊x·2^P⌋, ⌈x·2^P⌉)`` with ``P`` giving ``x`` about ``bits + 10`` bits."""
    p = bits + 10 - _floor_log2(x)
    num = x.numerator << p
    return p, num // x.denominator, -(-num // x.denominator)


def _expm1_series(x: Fraction, bits: int = WORK_BITS) -> Interval:
    """Bounds of ``Σ_{n≥1} xⁿ/n!`` for ``0 < x ≤ 1/2``, in fixed point with ``P`` bits.

    The lower bound sums the terms rounded down; the upper bound sums them rounded up and adds
    the tail after the last term ``t_n``, which is ``≤ t_n·x/(n+1)·1/(1 − x/(n+2)) ≤
    t_n·x/(n+1)·6/5`` because ``x ≤ 1/2``.
    """
    p, x_lo, x_hi = _fixed_point(x, bits)
    t_lo, t_hi = x_lo, x_hi
    s_lo, s_hi = x_lo, x_hi
    n = 1
    while t_hi << (bits + 8) > s_lo:
        n += 1
        t_lo = (t_lo * x_lo) // (n << p)
        t_hi = -(-(t_hi * x_hi) // (n << p))
        s_lo += t_lo
        s_hi += t_hi
    s_hi += -(-(t_hi * x_hi * 6) // ((5 * (n + 1)) << p))
    return Fraction(s_lo, 1 << p), Fraction(s_hi, 1 << p)


def expm1_interval(x: Fraction) -> Interval:
    """Bounds of ``e^x − 1`` for ``x ≥ 0``, tight *relative* to the value even for tiny ``x``.

    Examples:
        >>> lo, hi = expm1_interval(Fraction(1, 10**30))
        >>> lo <= Fraction(1, 10**30) * (1 + Fraction(1, 2 * 10**30)) <= hi
        True
    """
    if x < 0:
        raise ValueError("expm1_interval needs x ≥ 0")
    if x == 0:
        return x, x
    if x <= _HALF:
        return _outward(*_expm1_series(x))
    lo, hi = exp_interval(x)
    return lo - 1, hi - 1  # e^x ≥ e^(1/2) > 1.6, so subtracting 1 costs < 2 bits


def exp_interval(x: Fraction) -> Interval:
    """Bounds of ``e^x`` for any rational ``x``.

    Large arguments are reduced by halving, ``e^x = (e^(x/2^m))^(2^m)``, with every squaring
    rounded outwards. Cost grows with ``x`` (``e^x`` has about ``1.44·x`` bits), so
    ``|x| > MAX_EXP_ARGUMENT`` raises ValueError; callers bound large arguments analytically.

    Examples:
        >>> lo, hi = exp_interval(Fraction(0))
        >>> (lo, hi) == (1, 1)
        True
    """
    if abs(x) > MAX_EXP_ARGUMENT:
        raise ValueError("exp_interval: |x| is too large to evaluate")
    if x < 0:
        lo, hi = exp_interval(-x)
        return _outward(1 / hi, 1 / lo)
    m = 0
    y = x
    while y > _HALF:
        y /= 2
        m += 1
    bits = WORK_BITS + m + 8  # each squaring doubles the relative width; pay for it up front
    if y == 0:
        return Fraction(1), Fraction(1)
    e_lo, e_hi = _expm1_series(y, bits)
    lo, hi = 1 + e_lo, 1 + e_hi
    for _ in range(m):
        lo, hi = _outward(lo * lo, hi * hi, bits)
    return _outward(lo, hi)


def _atanh_series(z: Fraction) -> Interval:
    """Bounds of ``2·atanh(z) = 2·Σ z^(2j+1)/(2j+1)`` for ``0 < z ≤ 1/3``, in fixed point.

    As in :func:`_expm1_series`, rounded-down terms give the lower bound; rounded-up terms plus
    the tail after ``z^(2j+1)``, ``≤ z^(2j+3)/(2j+3)·1/(1 − z²) ≤ z^(2j+3)/(2j+3)·9/8``, give
    the upper bound.
    """
    p, z_lo, z_hi = _fixed_point(z, WORK_BITS)
    zz_lo = (z_lo * z_lo) >> p
    zz_hi = -(-(z_hi * z_hi) >> p)
    pw_lo, pw_hi = z_lo, z_hi  # z^(2j+1)·2^P
    s_lo, s_hi = z_lo, z_hi
    j = 0
    while pw_hi << (WORK_BITS + 8) > s_lo:
        j += 1
        pw_lo = (pw_lo * zz_lo) >> p
        pw_hi = -(-(pw_hi * zz_hi) >> p)
        s_lo += pw_lo // (2 * j + 1)
        s_hi += -(-pw_hi // (2 * j + 1))
    tail = -(-(pw_hi * zz_hi * 9) // ((8 * (2 * j + 3)) << p))
    return Fraction(2 * s_lo, 1 << p), Fraction(2 * (s_hi + tail), 1 << p)


def _log1p_small(y: Fraction) -> Interval:
    """Bounds of ``ln(1 + y)`` for ``0 ≤ y ≤ 1`` via ``2·atanh(y/(2 + y))``."""
    if y == 0:
        return y, y
    return _outward(*_atanh_series(y / (2 + y)))  # z = y/(2 + y) ≤ 1/3


@cache
def _ln2() -> Interval:
    return _log1p_small(Fraction(1))


def ln_interval(x: Fraction) -> Interval:
    """Bounds of ``ln x`` for ``x > 0``.

    Examples:
        >>> lo, hi = ln_interval(Fraction(1))
        >>> (lo, hi) == (0, 0)
        True
    """
    if x <= 0:
        raise ValueError("ln_interval needs x > 0")
    if x < 1:
        lo, hi = ln_interval(1 / x)
        return -hi, -lo
    if x <= 2:
        return _log1p_small(x - 1)
    # x = 2^e·m with 1 ≤ m < 2: ln x = e·ln 2 + ln m.
    e = _floor_log2(x)
    m_lo, m_hi = _log1p_small(x / Fraction(2) ** e - 1)
    l2_lo, l2_hi = _ln2()
    return _outward(e * l2_lo + m_lo, e * l2_hi + m_hi)


def log1p_interval(y: Fraction) -> Interval:
    """Bounds of ``ln(1 + y)`` for ``y ≥ 0``, tight *relative* to the value even for tiny ``y``.

    Examples:
        >>> lo, hi = log1p_interval(Fraction(1, 10**40))
        >>> lo < Fraction(1, 10**40) <= hi + Fraction(1, 10**80)
        True
    """
    if y < 0:
        raise ValueError("log1p_interval needs y ≥ 0")
    if y <= 1:
        return _log1p_small(y)
    return ln_interval(1 + y)
