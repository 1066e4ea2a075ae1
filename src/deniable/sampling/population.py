"""Population-scale totals from a Bernoulli sample of privacy units, with valid intervals.

Setting. Every privacy unit ``u`` of the table is kept in the sample independently with
probability ``β`` (:mod:`deniable.sampling.bernoulli`). A query's cell (one group) has a
*per-unit contribution* ``y_u`` — after contribution bounding, a function of ``u``'s own rows
and of the query's secret ordering key only, not of which other units were sampled — with
``0 ≤ y_u ≤ R``: a count of rows has ``R = r`` (``r`` rows per unit and group), a count of
units ``R = 1``, a sum of values clamped to ``[0, b]`` has ``R = r·b``. The sample's total is
``S = Σ_u I_u y_u`` with ``I_u ~ Bernoulli(β)`` independent, and the population's is
``T = Σ_u y_u``.

Estimate. Horvitz–Thompson: ``T̂ = S/β`` is unbiased, ``Var(T̂) = (1−β)/β · Σ y_u²``. The
released value is the noisy ``S̃`` divided by ``β`` (post-processing).

Interval (:func:`total_interval`), from released values and public parameters only, so it
costs nothing. Two events, joined by a union bound:

1. *Noise*: the release's own exact interval ``[ℓ, h]`` at level ``1 − α_n`` covers ``S``
   (it is conditionally valid given ``S``, whatever the sample).
2. *Sampling*, Bernstein's inequality: the ``X_u = (I_u − β) y_u`` are independent, centred,
   ``|X_u| ≤ M = max(β, 1−β)·R`` and ``Σ Var X_u = β(1−β) Σ y_u² ≤ β(1−β)·R·T`` (because
   ``y_u² ≤ R·y_u`` when ``0 ≤ y_u ≤ R``). So with ``L = ln(2/α_s)``,
   ``P[|S − βT| > t(T)] ≤ α_s`` for ``t(T) = a + √(a² + kT)``, ``a = LM/3``,
   ``k = 2Lβ(1−β)R`` (the root of ``t² = 2L(v + Mt/3)``).

When both hold, ``βT − t(T) ≤ S ≤ h`` and ``βT + t(T) ≥ S ≥ ℓ``; the set of ``T ≥ 0``
satisfying both is an interval ``[T₋, T₊]`` (``βT − t(T)`` is convex and ``βT + t(T)``
increasing), found in closed form from the quadratics below, and it covers ``T`` with
probability ``≥ 1 − α_n − α_s``. :func:`split_level` gives each part half of ``1 − level``.

The interval is non-asymptotic (no normal approximation, valid for any population size),
needs no variance estimate from the data, and is conservative: Bernstein with the worst
case ``Σ y_u² = R·T``. For ``β = 1`` there is no sampling error and the noise interval is
returned unchanged. Signed sums (clamping bounds on both sides of 0) are not covered:
``Σ y_u²`` is then not bounded by the total.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from deniable.errors import InvalidParameter

F64 = npt.NDArray[np.float64]

_OUTWARD = 1e-12
"""Relative widening of the computed bounds: the closed forms are evaluated in doubles
(a few roundings, each ≤ 2^-53 relative), and a bound must never move inwards."""


def split_level(level: float) -> tuple[float, float]:
    """``(noise level, sampling α)`` splitting ``1 − level`` equally between the two parts.

    Examples:
        >>> [round(x, 9) for x in split_level(0.9)]
        [0.95, 0.05]
    """
    if not 0 < level < 1:
        raise InvalidParameter("level must be strictly between 0 and 1, e.g. 0.95")
    alpha = (1.0 - level) / 2
    return 1.0 - alpha, alpha


def _check(rate: Fraction | float, bound: float, alpha: float) -> float:
    beta = float(rate)
    if not 0 < beta <= 1:
        raise InvalidParameter("the sampling rate must be in (0, 1]")
    if not (math.isfinite(bound) and bound > 0):
        raise InvalidParameter("the per-unit contribution bound must be positive and finite")
    if not 0 < alpha < 1:
        raise InvalidParameter("alpha must be in (0, 1)")
    return beta


def sampling_radius(
    total: npt.ArrayLike, *, rate: Fraction | float, bound: float, alpha: float
) -> F64:
    """``t(T)``: ``P[|S − βT| > t(T)] ≤ alpha`` for a population total ``T`` (Bernstein).

    Args:
        total: population total(s) ``T ≥ 0`` of contributions in ``[0, bound]``.
        rate: the sampling rate ``β``.
        bound: ``R``, the most one unit contributes to the total.
        alpha: the failure probability.

    Examples:
        >>> float(sampling_radius(0.0, rate=0.5, bound=1.0, alpha=0.05)[()]) > 0
        True
    """
    beta = _check(rate, bound, alpha)
    big_l = math.log(2.0 / alpha)
    a = big_l * max(beta, 1.0 - beta) * bound / 3.0
    k = 2.0 * big_l * beta * (1.0 - beta) * bound
    t = np.asarray(total, dtype=np.float64)
    return np.asarray(a + np.sqrt(a * a + k * np.maximum(t, 0.0)), dtype=np.float64)


def total_interval(
    low: npt.ArrayLike,
    high: npt.ArrayLike,
    *,
    rate: Fraction | float,
    bound: float,
    alpha: float,
) -> tuple[F64, F64]:
    """Interval for the population total ``T`` from a noise interval ``[low, high]`` of ``S``.

    If ``[low, high]`` covers the sample total ``S`` with probability ``≥ 1 − α_n``, the
    result covers ``T`` with probability ``≥ 1 − α_n − alpha`` (module docstring). Uses only
    its arguments: post-processing of a release, no privacy cost.

    Args:
        low: lower ends of the noise intervals of the sample totals.
        high: upper ends (each ``≥ low``).
        rate: the sampling rate ``β`` (public).
        bound: ``R``, the most one unit contributes to one total (public, from the
            contribution and clamping bounds).
        alpha: the probability given to the sampling error.

    Returns:
        ``(T₋, T₊)`` arrays, ``0 ≤ T₋ ≤ T₊``.

    Examples:
        >>> lo, hi = total_interval([100.0], [120.0], rate=0.5, bound=1.0, alpha=0.05)
        >>> bool(lo[0] < 200 < 240 < hi[0])
        True
    """
    beta = _check(rate, bound, alpha)
    lo_s = np.asarray(low, dtype=np.float64)
    hi_s = np.asarray(high, dtype=np.float64)
    if beta == 1.0:  # the whole population: S = T, only the noise remains
        return np.maximum(lo_s, 0.0), np.maximum(hi_s, 0.0)
    big_l = math.log(2.0 / alpha)
    a = big_l * max(beta, 1.0 - beta) * bound / 3.0
    k = 2.0 * big_l * beta * (1.0 - beta) * bound
    b2 = beta * beta
    # Upper end: βT − a − √(a² + kT) ≤ h, i.e. with c = h + a, T ≤ the larger root of
    # β²T² − (2βc + k)T + c² − a² (all T with βT ≤ c qualify; c ≥ a ≥ 0 as h ≥ 0). Its
    # discriminant (2βc + k)² − 4β²(c² − a²) is expanded to 4βck + k² + 4β²a²: a sum of
    # non-negative terms, with no cancellation.
    c = np.maximum(hi_s, 0.0) + a
    disc = 4.0 * beta * c * k + k * k + 4.0 * b2 * a * a
    upper = (2.0 * beta * c + k + np.sqrt(disc)) / (2.0 * b2)
    # Lower end: βT + a + √(a² + kT) ≥ ℓ. With d = ℓ − a: T₋ = 0 if d ≤ a, else the smaller
    # root of β²T² − (2βd + k)T + d² − a², written 2(d − a)(d + a)/(2βd + k + √disc)
    # (no cancellation), disc = 4βdk + k² + 4β²a².
    d = lo_s - a
    pos = d > a
    dd = np.where(pos, d, a)  # where d ≤ a the root is not used
    disc_l = 4.0 * beta * dd * k + k * k + 4.0 * b2 * a * a
    root = 2.0 * (dd - a) * (dd + a) / (2.0 * beta * dd + k + np.sqrt(disc_l))
    lower = np.where(pos, root, 0.0)
    # Outward by far more than the few roundings above can have moved either end.
    slack = _OUTWARD * (np.abs(upper) + np.abs(lower)) + 1e-9 * (upper - lower)
    return np.maximum(lower - slack, 0.0), upper + slack


def scale_total(values: npt.ArrayLike, rate: Fraction | float) -> F64:
    """The Horvitz–Thompson estimate ``S/β`` of population totals (post-processing).

    Examples:
        >>> scale_total([10.0, 3.0], Fraction(1, 4)).tolist()
        [40.0, 12.0]
    """
    beta = float(rate)
    if not 0 < beta <= 1:
        raise InvalidParameter("the sampling rate must be in (0, 1]")
    return np.asarray(values, dtype=np.float64) / beta
