"""Exact discrete Gaussian sampler (Canonne–Kamath–Steinke 2020, Algorithm 3).

``P[X = k] ∝ e^(−k²/(2σ²))`` on the integers, for rational ``σ²``. Proposal: discrete Laplace
with integer scale ``t = floor(σ) + 1``; a proposal ``y`` is accepted with probability
``exp(−(|y| − σ²/t)²/(2σ²))``, decided by the exact Bernoulli(e^(−γ)) of
:mod:`deniable.noise.bernoulli`. Accepted values are independent of the number of rounds, so
the time of a release does not depend on the value released.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from deniable.errors import InvalidParameter
from deniable.noise.bernoulli import decide_exp_neg_scalar_err
from deniable.noise.discrete_laplace import _discrete_laplace
from deniable.noise.exact import RationalLike, positive_fraction
from deniable.noise.gaussian_table import TABLE_MAX_SIGMA2, is_cached, sample_folded
from deniable.noise.source import RandomSource, resolve
from deniable.noise.uniform import REL, chunked

I64 = npt.NDArray[np.int64]

MAX_SIGMA2 = Fraction(2**60)


def discrete_gaussian(
    sigma2: RationalLike, size: int, *, source: RandomSource | None = None
) -> I64:
    """Return ``size`` exact draws of the discrete Gaussian with variance parameter ``σ²``.

    Adding it to an integer query of L2 sensitivity Δ₂ is ``Δ₂²/(2σ²)``-zCDP.

    Examples:
        >>> from deniable.noise.testing import SeededRandom
        >>> discrete_gaussian(4, 3, source=SeededRandom(5)).dtype
        dtype('int64')
    """
    s2 = positive_fraction(sigma2, "sigma2")
    if s2 > MAX_SIGMA2:
        raise InvalidParameter("sigma2 above 2^60 is not supported; use noise on a grid")
    src = resolve(source)
    if s2 <= TABLE_MAX_SIGMA2 and (s2 <= 2**16 or size >= 2**15 or is_cached(s2)):
        return chunked(size, lambda n: sample_folded(s2, n, src))
    return chunked(size, lambda n: _discrete_gaussian(s2, n, src))


def _discrete_gaussian(s2: Fraction, size: int, src: RandomSource) -> I64:
    t = math.isqrt(s2.numerator // s2.denominator) + 1
    s2f = float(s2)
    shift = s2f / t
    accepted: list[I64] = []
    have = 0
    rate = 0.5  # refined after the first batch; only affects batch sizes, never values
    while have < size:
        m = int((size - have) / rate * 1.05) + 64
        y = _discrete_laplace(Fraction(t), m, src)
        ay = np.abs(y).astype(np.float64)
        # γ = (|y| − σ²/t)²/(2σ²). Its float error is relative to the terms that cancel,
        # bounded here once for the whole batch by the largest |y|.
        top = float(ay.max(initial=0.0))
        err = REL * (1.0 + 2.0 * (top * top + shift * shift) / (2.0 * s2f))
        ay -= shift
        ay *= ay
        ay *= 1.0 / (2.0 * s2f)

        def exact(i: int, y: I64 = y) -> Fraction:
            d = abs(int(y[i])) - s2 / t
            return d * d / (2 * s2)

        ok = decide_exp_neg_scalar_err(ay, err, exact, src)
        kept = y[ok]
        rate = max(kept.size / m, 0.05)
        accepted.append(kept)
        have += kept.size
    # Rejection sampling: the accepted proposals are i.i.d. from the target, in order.
    return np.concatenate(accepted)[:size] if accepted else np.empty(0, dtype=np.int64)
