"""Release intervals are exact: they cover at least ``level`` and are the smallest that do.

Checked against the noise law in 50-digit arithmetic (mpmath, a dependency of dp-accounting):
for a half-width of ``c`` grid units, ``P[|Z| ≤ c] ≥ level`` and, where the interval is meant
to be tight (discrete Laplace at every scale, the discrete Gaussian at small σ),
``P[|Z| ≤ c − 1] < level``. Deterministic: no sampling.
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath  # type: ignore[import-untyped]
import numpy as np
import pytest

from deniable.errors import InvalidParameter
from deniable.mechanisms import (
    discrete_gaussian,
    exponential,
    gaussian,
    geometric,
    k_randomized_response,
    laplace,
    randomized_response,
)
from deniable.mechanisms.release import gaussian_half_width, laplace_half_width
from deniable.noise.testing import SeededRandom

LEVELS = [0.5, 0.8, 0.9, 0.95, 0.99, 0.999, 1 - 1e-6]


def _laplace_inside(t: Fraction, c: int) -> mpmath.mpf:
    with mpmath.workdps(60):
        a = mpmath.exp(-1 / (mpmath.mpf(t.numerator) / t.denominator))
        return 1 - 2 * a ** (c + 1) / (1 + a)


def _gaussian_inside(sigma2: Fraction, c: int) -> mpmath.mpf:
    with mpmath.workdps(60):
        s2 = mpmath.mpf(sigma2.numerator) / sigma2.denominator
        width = int(40 * math.sqrt(float(sigma2))) + 10

        def w(k: int) -> mpmath.mpf:
            return mpmath.exp(-(mpmath.mpf(k) ** 2) / (2 * s2))

        total = 1 + 2 * mpmath.fsum(w(k) for k in range(1, width))
        return (1 + 2 * mpmath.fsum(w(k) for k in range(1, c + 1))) / total


@pytest.mark.parametrize(
    "t",
    [
        Fraction(1, 10),
        Fraction(1),
        Fraction(7, 3),
        Fraction(100),
        Fraction(10**4),
        Fraction(2**20 + 1),
    ],
    ids=str,
)
@pytest.mark.parametrize("level", LEVELS)
def test_laplace_half_width_is_smallest_covering(t: Fraction, level: float) -> None:
    c = laplace_half_width(t, level)
    assert _laplace_inside(t, c) >= level
    if c > 0:
        assert _laplace_inside(t, c - 1) < level


@pytest.mark.parametrize(
    "sigma2",
    [Fraction(1, 100), Fraction(1, 2), Fraction(1), Fraction(7, 3), Fraction(100), Fraction(1000)],
    ids=str,
)
@pytest.mark.parametrize("level", LEVELS)
def test_gaussian_half_width_small_sigma_is_smallest_covering(
    sigma2: Fraction, level: float
) -> None:
    c = gaussian_half_width(sigma2, level)
    assert _gaussian_inside(sigma2, c) >= level
    if c > 0:
        assert _gaussian_inside(sigma2, c - 1) < level


@pytest.mark.parametrize("level", [0.5, 0.95, 0.999])
def test_gaussian_half_width_large_sigma_covers_and_is_near_tight(level: float) -> None:
    # Large σ (σ ≥ 50 units, e.g. the Gaussian grid at 2^12..2^13 units) uses a certified
    # erfc bound: it may exceed the smallest half-width by a unit or two — not more.
    sigma2 = Fraction(2**25 + 12345)
    c = gaussian_half_width(sigma2, level)
    sigma = math.sqrt(float(sigma2))
    inside = math.erf((c + 0.5) / (sigma * math.sqrt(2)))  # midpoint rule, error ~1e-13
    assert inside >= level
    ideal = sigma * math.sqrt(2) * float(mpmath.erfinv(level))
    assert c <= ideal + 3


def test_release_interval_is_value_plus_minus_half_width_in_value_units() -> None:
    r = laplace([0.3, 10.0], sensitivity=1.0, epsilon=1.0, source=SeededRandom(1))
    assert r.noise is not None and r.granularity is not None
    c = laplace_half_width(r.noise.parameter, 0.95)
    lo, hi = r.interval(0.95)
    v = np.asarray(r.value, dtype=np.float64)
    np.testing.assert_array_equal(hi - v, c * r.granularity)
    np.testing.assert_array_equal(v - lo, c * r.granularity)
    assert r.half_width(0.95) == c * r.granularity

    g = geometric([41, 42], sensitivity=1, epsilon=1, source=SeededRandom(2))
    lo, hi = g.interval(0.9)
    assert g.noise is not None
    np.testing.assert_array_equal(hi - lo, 2 * laplace_half_width(g.noise.parameter, 0.9))

    d = discrete_gaussian([5], sensitivity=1, rho=Fraction(1, 2), source=SeededRandom(3))
    assert d.noise is not None
    assert d.half_width(0.9) == gaussian_half_width(d.noise.parameter, 0.9)

    gg = gaussian([1.5], sensitivity=1.0, rho=0.5, source=SeededRandom(4))
    assert gg.noise is not None and gg.granularity is not None
    assert gg.half_width(0.9) == gaussian_half_width(gg.noise.parameter, 0.9) * gg.granularity


def test_interval_widens_with_level() -> None:
    r = geometric([0], sensitivity=1, epsilon=0.5, source=SeededRandom(5))
    widths = [r.half_width(level) for level in LEVELS]
    assert widths == sorted(widths)


@pytest.mark.parametrize("level", [0, 1, 1.5, -0.1, float("nan"), float("inf"), True, "0.9"])
def test_interval_level_outside_open_unit_interval_is_refused(level: object) -> None:
    r = geometric([0], sensitivity=1, epsilon=1, source=SeededRandom(6))
    with pytest.raises(InvalidParameter):
        r.interval(level)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameter):
        r.half_width(level)  # type: ignore[arg-type]


def test_mechanisms_without_additive_noise_have_no_interval() -> None:
    for r in [
        exponential([1, 2], sensitivity=1, epsilon=1, source=SeededRandom(7)),
        randomized_response([1, 0], p=0.75, source=SeededRandom(8)),
        k_randomized_response([1, 0], k=3, epsilon=1, source=SeededRandom(9)),
    ]:
        with pytest.raises(InvalidParameter):
            r.interval(0.9)
