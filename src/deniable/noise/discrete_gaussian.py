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
from deniable.noise.bernoulli import _decide_exp_neg
from deniable.noise.discrete_laplace import _discrete_laplace
from deniable.noise.exact import RationalLike, positive_fraction
from deniable.noise.source import RandomSource, resolve
from deniable.noise.uniform import REL

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
    t = math.isqrt(s2.numerator // s2.denominator) + 1
    s2f = float(s2)
    out = np.empty(size, dtype=np.int64)
    todo = np.arange(size)
    while todo.size:
        y = _discrete_laplace(Fraction(t), todo.size, src)
        ay = np.abs(y).astype(np.float64)
        diff = ay - s2f / t
        gamma_f = diff * diff / (2.0 * s2f)
        # Error of gamma_f: relative to the size of the terms that cancel in the subtraction.
        magnitude = (ay * ay + (s2f / t) ** 2) / (2.0 * s2f)
        err = REL * (1.0 + gamma_f + magnitude)

        def exact(i: int, y: I64 = y) -> Fraction:
            d = abs(int(y[i])) - s2 / t
            return d * d / (2 * s2)

        ok = _decide_exp_neg(src.words(todo.size), gamma_f, err, exact, src)
        out[todo[ok]] = y[ok]
        todo = todo[~ok]
    return out
