"""Randomized response: the classic local randomisers and the coin variant's estimator.

Each respondent's answer is randomised on their side; the loss is local ε-DP per answer.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from deniable.accounting.loss import Epsilon
from deniable.errors import InvalidParameter
from deniable.mechanisms.release import Release
from deniable.noise.bernoulli import bernoulli
from deniable.noise.exact import RationalLike, exp_lower, log_upper, positive_fraction, to_fraction
from deniable.noise.source import RandomSource, resolve
from deniable.noise.uniform import random_bits, uniform_int


def _bits(values: npt.ArrayLike) -> npt.NDArray[np.bool_]:
    arr = np.asarray(values)
    if arr.dtype.kind == "b":
        return arr
    if arr.dtype.kind not in "iu" or (arr.size and not ((arr == 0) | (arr == 1)).all()):
        raise InvalidParameter("randomized response needs answers that are 0/1 or booleans")
    return arr.astype(bool)


@lru_cache(maxsize=256)
def _log_ratio_upper(num: Fraction, den: Fraction) -> Fraction:
    return log_upper(num / den)


def rr_loss(p: RationalLike) -> Epsilon:
    """ε of randomized response telling the truth w.p. ``p`` in (1/2, 1): ``ln(p/(1−p))``."""
    pf = to_fraction(p, "p")
    if not Fraction(1, 2) < pf < 1:
        raise InvalidParameter("p must be in (1/2, 1)")
    return Epsilon(epsilon=_log_ratio_upper(pf, 1 - pf))


def coin_rr_loss(q: RationalLike) -> Epsilon:
    """ε of coin randomized response with truth probability ``q`` in (0, 1): ``ln((1+q)/(1−q))``.

    Examples:
        >>> round(float(coin_rr_loss(0.5).epsilon), 6) == round(math.log(3), 6)
        True
    """
    qf = to_fraction(q, "q")
    if not 0 < qf < 1:
        raise InvalidParameter("q must be in (0, 1)")
    return Epsilon(epsilon=_log_ratio_upper(1 + qf, 1 - qf))


def randomized_response(
    bits: npt.ArrayLike, *, p: RationalLike, source: RandomSource | None = None
) -> Release:
    """Report each bit truthfully w.p. ``p``, flipped otherwise; ``ln(p/(1−p))``-LDP each."""
    b = _bits(bits)
    loss = rr_loss(p)
    truthful = bernoulli(to_fraction(p, "p"), b.size, source=source).reshape(b.shape)
    return Release(
        value=np.where(truthful, b, ~b), loss=loss, mechanism="randomized_response", scale=math.nan
    )


def coin_randomized_response(
    bits: npt.ArrayLike, *, q: RationalLike, source: RandomSource | None = None
) -> Release:
    """Answer truthfully w.p. ``q``, else report a fair coin; ``ln((1+q)/(1−q))``-LDP each.

    Examples:
        >>> from deniable.noise.testing import SeededRandom
        >>> coin_randomized_response([1, 0], q=0.5, source=SeededRandom(3)).value.dtype
        dtype('bool')
    """
    b = _bits(bits)
    loss = coin_rr_loss(q)
    src = resolve(source)
    truthful = bernoulli(to_fraction(q, "q"), b.size, source=src).reshape(b.shape)
    coin = random_bits(b.size, source=src).reshape(b.shape)
    return Release(
        value=np.where(truthful, b, coin),
        loss=loss,
        mechanism="coin_randomized_response",
        scale=math.nan,
    )


def k_rr_keep_probability(k: int, epsilon: RationalLike) -> Fraction:
    """A rational keep-probability ``p ≤ e^ε/(e^ε + k − 1)``, so k-RR with it is ε-LDP."""
    eps = positive_fraction(epsilon, "epsilon")
    e = exp_lower(eps)
    return e / (e + k - 1)


def k_randomized_response(
    values: npt.ArrayLike,
    *,
    k: int,
    epsilon: RationalLike,
    source: RandomSource | None = None,
) -> Release:
    """Generalised randomized response over ``{0, …, k−1}``; ε-LDP per answer.

    Keeps the value w.p. ``p`` (a rational just below ``e^ε/(e^ε+k−1)``, so the real loss is
    at most ε), otherwise reports one of the other ``k − 1`` values uniformly.
    """
    if not isinstance(k, int) or k < 2:
        raise InvalidParameter("k must be an integer ≥ 2")
    v = np.asarray(values)
    if v.dtype.kind not in "iu" or (v.size and (v.min() < 0 or v.max() >= k)):
        raise InvalidParameter("values must be integers in [0, k)")
    src = resolve(source)
    p = k_rr_keep_probability(k, epsilon)
    keep = bernoulli(p, v.size, source=src).reshape(v.shape)
    other = uniform_int(k - 1, v.size, source=src).reshape(v.shape)
    other = other + (other >= v)  # skip the true value
    return Release(
        value=np.where(keep, v, other).astype(np.int64),
        loss=Epsilon(epsilon=positive_fraction(epsilon, "epsilon")),
        mechanism="k_randomized_response",
        scale=math.nan,
    )


def coin_rr_estimate(n_yes: int, n: int, q: RationalLike) -> float:
    """Unbiased estimate of the true "yes" fraction from coin randomized response answers.

    ``(y − (1−q)/2)/q`` with ``y = n_yes/n``. Post-processing: costs nothing.

    Examples:
        >>> coin_rr_estimate(400, 1000, 0.5)
        0.3
    """
    if n <= 0 or not 0 <= n_yes <= n:
        raise InvalidParameter("need 0 ≤ n_yes ≤ n and n > 0")
    qf = to_fraction(q, "q")
    if not 0 < qf <= 1:
        raise InvalidParameter("q must be in (0, 1]")
    # Exact rational arithmetic, rounded once: 400 of 1000 at q = 1/2 is exactly 0.3.
    return float((Fraction(n_yes, n) - (1 - qf) / 2) / qf)
