"""Exact geometric and discrete Laplace samplers.

The discrete Laplace distribution with scale ``t`` has ``P[X = k] ∝ e^(−|k|/t)`` on the
integers. We draw ``Y = floor(t·E)`` with ``E = −ln U'`` exponential — exactly geometric with
``P[Y ≥ k] = e^(−k/t)`` — then a sign, rejecting "−0" so that zero is not counted twice.

Exactness: ``Y = k`` holds iff ``e^(−(k+1)/t) < U' ≤ e^(−k/t)``. A float filter computes
``floor(t·E)`` at both ends of the interval of ``E`` given by the first 64 bits of ``U'`` with a
relative slack of 2^-46 (well above float error); when both ends agree, that is ``Y``. The
draws where they disagree — about ``t·2^-45`` of them — are settled by exact comparisons of
``U'`` (refined with more random bits) with certified bounds of ``e^(−k/t)``.

Timing: the work per batch is the same vectorised arithmetic whatever values come out; the
rejection loop's number of rounds is independent of the accepted values (a property of
rejection sampling), and the exact fallback runs with probability below ``t·2^-45`` per draw.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import numpy.typing as npt

from deniable.errors import InvalidParameter
from deniable.noise.exact import LazyUniform, RationalLike, exp_neg_bound_fn, positive_fraction
from deniable.noise.source import RandomSource, resolve
from deniable.noise.uniform import REL, neg_log_interval, random_bits

I64 = npt.NDArray[np.int64]

MAX_SCALE = Fraction(2**36)
"""Largest scale accepted: beyond it the float filter settles too few draws to be fast.
Release paths keep scales near 2^20 by working on a power-of-two grid."""


def _check_scale(scale: RationalLike) -> Fraction:
    t = positive_fraction(scale, "scale")
    if t > MAX_SCALE:
        raise InvalidParameter(
            "scale above 2^36 is not supported for integer noise; use noise on a grid "
            "(deniable.noise.grid) for such large scales"
        )
    return t


def geometric(scale: RationalLike, size: int, *, source: RandomSource | None = None) -> I64:
    """Return ``size`` draws of ``Y ≥ 0`` with ``P[Y = k] = (1−α)α^k``, ``α = e^(−1/scale)``.

    Examples:
        >>> from deniable.noise.testing import SeededRandom
        >>> bool((geometric(3, 100, source=SeededRandom(2)) >= 0).all())
        True
    """
    t = _check_scale(scale)
    return _geometric(t, size, resolve(source))


def _geometric(t: Fraction, size: int, src: RandomSource) -> I64:
    words = src.words(size)
    lo, hi = neg_log_interval(words)
    tf = float(t)
    with np.errstate(invalid="ignore", over="ignore"):
        k_lo = np.floor(lo * tf * (1.0 - REL))
        k_hi = np.floor(hi * tf * (1.0 + REL))
    sure = (k_lo == k_hi) & np.isfinite(k_hi)
    out = np.where(sure, k_hi, 0.0).astype(np.int64)
    for i in np.flatnonzero(~sure):
        start = int(k_lo[i]) if np.isfinite(k_lo[i]) and k_lo[i] > 0 else 0
        out[i] = _geometric_exact(t, int(words[i]), start, src)
    return out


def _geometric_exact(t: Fraction, word: int, start: int, src: RandomSource) -> int:
    """The unique ``k`` with ``e^(−(k+1)/t) < U' ≤ e^(−k/t)``, decided exactly.

    ``start`` is a lower bound on ``k`` from the float filter, so the search only climbs.
    """
    u = LazyUniform(word, src)
    k = start
    while k > 0 and not u.less_than(exp_neg_bound_fn(Fraction(k) / t)):
        k -= 1  # defensive: start was too high
    while u.less_than(exp_neg_bound_fn(Fraction(k + 1) / t)):
        k += 1
    return k


def discrete_laplace(scale: RationalLike, size: int, *, source: RandomSource | None = None) -> I64:
    """Return ``size`` exact draws of the discrete Laplace distribution with rational ``scale``.

    ``P[X = k] = (1−α)/(1+α)·α^|k|`` with ``α = e^(−1/scale)``. Adding it to an integer query of
    L1 sensitivity Δ is (Δ/scale)-DP.

    Examples:
        >>> from deniable.noise.testing import SeededRandom
        >>> discrete_laplace(2, 5, source=SeededRandom(3)).dtype
        dtype('int64')
    """
    t = _check_scale(scale)
    return _discrete_laplace(t, size, resolve(source))


def _discrete_laplace(t: Fraction, size: int, src: RandomSource) -> I64:
    out = np.empty(size, dtype=np.int64)
    todo = np.arange(size)
    while todo.size:
        y = _geometric(t, todo.size, src)
        negative = random_bits(todo.size, source=src)
        ok = ~(negative & (y == 0))
        out[todo[ok]] = np.where(negative[ok], -y[ok], y[ok])
        todo = todo[~ok]
    return out


def discrete_laplace_tail(scale: RationalLike, c: int) -> float:
    """Return ``P[|X| > c]`` for discrete Laplace ``X`` with this scale: ``2α^(c+1)/(1+α)``."""
    if c < 0:
        return 1.0
    t = _check_scale(scale)
    a = float(np.exp(-1.0 / float(t)))
    return float(2.0 * np.exp(-(c + 1) / float(t)) / (1.0 + a))


