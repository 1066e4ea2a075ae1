"""Exact geometric and discrete Laplace samplers.

The discrete Laplace law with scale ``t`` has ``P[X = k] = (1−α)/(1+α)·α^|k|``, ``α = e^(−1/t)``.
Its magnitude satisfies ``P[|X| ≥ k] = 2α^k/(1+α) = e^(−k/t − d)`` for ``k ≥ 1`` with
``d = ln((1+α)/2) ≤ 0``, so with ``E = −ln U'`` exponential, ``|X| = max(0, floor(t·(E − d)))``
exactly; an independent fair bit gives the sign. One uniform per draw, no rejection loop.
The geometric law (``P[Y ≥ k] = α^k``) is the case ``d = 0``: ``Y = floor(t·E)``.

Exactness: ``|X| ≥ k`` holds iff ``U' ≤ 2α^k/(1+α)``. The float filter computes
``floor(t·(E − d))`` at both ends of the interval of ``E`` implied by the uniform's prefix, with
a slack of 2^-40, far above the float error; when both ends agree, that is the value. Draws
where they disagree (a fraction of about ``t·2^-39`` plus ``t/2^B`` for a ``B``-bit prefix)
are settled by exact comparisons of ``U'``, refined with more random bits, against certified
bounds of the threshold (:func:`deniable.noise.exact.exp_neg_bounds`).

Timing: a batch costs the same vectorised arithmetic whatever values come out; the exact
fallback is rare (above) and only makes a release slower, by tens of microseconds, for draws
that fall on a boundary between two values.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from deniable.errors import InvalidParameter
from deniable.noise.exact import LazyUniform, RationalLike, exp_neg_bounds, positive_fraction
from deniable.noise.source import RandomSource, resolve
from deniable.noise.uniform import ABS, REL, chunked, exp_prefix

I64 = npt.NDArray[np.int64]

MAX_SCALE = Fraction(2**32)
"""Largest scale accepted. A draw takes the slower exact path with probability about
``t·2^-39`` whatever its value, plus a value-dependent ``t·(|noise|/t)·2^-49`` from the relative
float error; at 2^32 the latter is below 2^-16·|noise|/t, too rare for a timing channel to
carry information. Release paths keep scales near 2^20 with a power-of-two grid."""

REL_Y = 2.0**-50
"""Relative error bound of ``y = (E_hi + shift)·t`` in floats: three correctly rounded
operations, each within 2^-53, so 2^-51 — doubled for margin."""

NARROW_MAX_SCALE = 2**10
"""Up to this scale a 32-bit uniform settles nearly every draw; above it 64-bit words are used."""


def _check_scale(scale: RationalLike) -> Fraction:
    t = positive_fraction(scale, "scale")
    if t > MAX_SCALE:
        raise InvalidParameter(
            "scale above 2^32 is not supported for integer noise; use deniable.mechanisms.laplace "
            "(noise on a power-of-two grid) for such large scales"
        )
    return t


def _threshold_bounds(t: Fraction, k: int, folded: bool, prec: int) -> tuple[int, int]:
    """Integers bounding ``v·2^prec`` for ``v = α^k`` (geometric) or ``2α^k/(1+α)`` (folded)."""
    if not folded:
        return exp_neg_bounds(Fraction(k) / t, prec)
    g = prec + 8
    a_lo, a_hi = exp_neg_bounds(Fraction(k) / t, g)
    b_lo, b_hi = exp_neg_bounds(1 / t, g)
    one = 1 << g
    lo = (2 * a_lo << prec) // (one + b_hi)
    hi = -((-(2 * a_hi << prec)) // (one + b_lo))
    return lo, hi


def _magnitude(t: Fraction, n: int, src: RandomSource, *, folded: bool) -> tuple[I64, object]:
    """``floor(t·(E − d))`` clipped at 0 for ``n`` draws, exactly; returns it and the signs."""
    tf = float(t)
    wide = tf > NARROW_MAX_SCALE
    pre = exp_prefix(n, wide=wide, signed=folded, source=src)
    shift = -math.log1p(math.exp(-1.0 / tf)) + math.log(2.0) if folded else 0.0  # = −d ≥ 0
    y = pre.e_hi  # reused in place: y = t·(E_hi − d)
    y += shift
    y *= tf
    slack = y * REL_Y
    slack += tf * (ABS + REL * shift)
    hi = np.floor(y + slack)
    slack += pre.width * tf
    # An unbounded E_hi (the rare prefix that does not bound E) gives inf − inf = NaN here:
    # NaN never equals hi, so such draws go to the exact search below, starting from 0.
    with np.errstate(invalid="ignore"):
        y -= slack
    lo = np.floor(y, out=y)
    sure = lo == hi
    np.maximum(hi, 0.0, out=hi)
    hi[~sure] = 0.0
    out = hi.astype(np.int64)
    for i in np.flatnonzero(~sure):
        start = int(lo[i]) if math.isfinite(lo[i]) and lo[i] > 0 else 0
        out[i] = _magnitude_exact(t, int(pre.word[i]), pre.bits, start, folded, src)
    return out, pre.sign


def _magnitude_exact(
    t: Fraction, word: int, bits: int, start: int, folded: bool, src: RandomSource
) -> int:
    """The largest ``k ≥ 0`` with ``U' < threshold(k)`` (``threshold(0) = 1``), exactly.

    ``start`` is a lower bound from the float filter, so the search only climbs; it is checked
    first and lowered if it was wrong.
    """
    u = LazyUniform(word, src, bits)

    def below(k: int) -> bool:
        return k == 0 or u.less_than(lambda p: _threshold_bounds(t, k, folded, p))

    k = start
    while not below(k):
        k -= 1
    while below(k + 1):
        k += 1
    return k


def geometric(scale: RationalLike, size: int, *, source: RandomSource | None = None) -> I64:
    """Return ``size`` draws of ``Y ≥ 0`` with ``P[Y = k] = (1−α)α^k``, ``α = e^(−1/scale)``.

    Examples:
        >>> from deniable.noise.testing import SeededRandom
        >>> bool((geometric(3, 100, source=SeededRandom(2)) >= 0).all())
        True
    """
    t = _check_scale(scale)
    src = resolve(source)
    return chunked(size, lambda n: _magnitude(t, n, src, folded=False)[0])


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
    def fill(n: int) -> I64:
        mag, sign = _magnitude(t, n, src, folded=True)
        assert isinstance(sign, np.ndarray)
        np.negative(mag, out=mag, where=sign)
        return mag

    return chunked(size, fill)
