"""Accuracy of the mechanisms: noise variance, interval coverage, the RR estimator.

Thresholds (each check rejects at 1e-7 under its null; a test makes at most two checks, so a
correct mechanism fails a test with probability below 1e-6):

* variance — median of 32 block means of ``Z²`` against the exact ``E Z²`` of the noise law,
  with the Chebyshev/median-of-means bound of ``_mechanisms_support.mom_check``
  (false rejection ≤ 5.6e-8). No normality is assumed; ``Var(Z²)`` comes from the law.
* coverage — exact binomial tails: ``P[Bin(n, level) ≤ hits] < 1e-7`` rejects "covers at
  least ``level``"; ``P[Bin(n, level + slack) ≥ hits] < 1e-7`` rejects "no wider than needed".
* RR estimator — Hoeffding: ``P[|ŷ − E ŷ| > √(ln(2/1e-7)/(2n))] ≤ 1e-7``.

Negative controls: half the noise (variance, coverage), an interval computed for a higher
level (width), and a decoder with the wrong ``q`` (estimator). For each, the test asserts a
deterministic separation — the broken law's target lies beyond both honest and broken bounds
— so the control is rejected with probability at least ``1 − 1e-7`` by the same argument.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pytest
from _mechanisms_support import (
    coverage_too_high,
    coverage_too_low,
    gaussian_moments,
    laplace_moments,
    mom_bound,
    mom_check,
)

from deniable.mechanisms import (
    Release,
    coin_randomized_response,
    coin_rr_estimate,
    discrete_gaussian,
    gaussian,
    geometric,
    laplace,
)

pytestmark = pytest.mark.stats

N = 500_000


def _noise_units(r: Release, x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    g = r.granularity
    assert g is not None
    return np.asarray(r.value, dtype=np.float64) / g - np.rint(x / g)


def _moments(r: Release) -> tuple[float, float]:
    assert r.noise is not None
    p = float(r.noise.parameter)
    return laplace_moments(p) if r.noise.kind == "discrete_laplace" else gaussian_moments(p)


# ----------------------------------------------------------------------------- variance


@pytest.mark.parametrize(("sensitivity", "epsilon"), [(1, 1.0), (5, 0.5)], ids=["t=1", "t=10"])
def test_geometric_variance(sensitivity: int, epsilon: float) -> None:
    # Var = 2α/(1−α)², α = e^(−ε/Δ).
    x = np.full(N, 41, dtype=np.int64)
    r = geometric(x, sensitivity=sensitivity, epsilon=epsilon)
    a = math.exp(-epsilon / sensitivity)
    m2, var4 = _moments(r)
    assert math.isclose(m2, 2 * a / (1 - a) ** 2, rel_tol=1e-9)
    assert math.isclose(r.noise.std**2, m2, rel_tol=1e-9)  # type: ignore[union-attr]
    check = mom_check((np.asarray(r.value) - x) ** 2, m2, var4)
    assert not check.rejected, str(check)


def test_geometric_variance_control_half_the_noise() -> None:
    x = np.full(N, 41, dtype=np.int64)
    claimed, var4 = laplace_moments(1.0)
    broken_m2, broken_var4 = laplace_moments(0.5)
    # Separation: no value is within both bounds, so a rejection is certain up to 5.6e-8.
    assert abs(claimed - broken_m2) > mom_bound(var4, N) + mom_bound(broken_var4, N)
    r = geometric(x, sensitivity=1, epsilon=2.0)
    check = mom_check((np.asarray(r.value) - x) ** 2, claimed, var4)
    assert check.rejected, str(check)


@pytest.mark.parametrize(
    ("sensitivity", "rho"),
    [(1, Fraction(1, 2)), (2, Fraction(1, 8)), (1, Fraction(1, 20_000))],
    ids=["s2=1", "s2=16", "s2=1e4"],
)
def test_discrete_gaussian_variance(sensitivity: int, rho: Fraction) -> None:
    x = np.zeros(N, dtype=np.int64)
    r = discrete_gaussian(x, sensitivity=sensitivity, rho=rho)
    sigma2 = sensitivity**2 / (2 * float(rho))
    m2, var4 = _moments(r)
    assert m2 <= sigma2 * (1 + 1e-12)  # the discrete Gaussian's variance is at most σ²
    check = mom_check(np.asarray(r.value, dtype=np.float64) ** 2, m2, var4)
    assert not check.rejected, str(check)


def test_discrete_gaussian_variance_control_half_the_noise() -> None:
    claimed, var4 = gaussian_moments(16.0)
    broken_m2, broken_var4 = gaussian_moments(4.0)
    assert abs(claimed - broken_m2) > mom_bound(var4, N) + mom_bound(broken_var4, N)
    r = discrete_gaussian(np.zeros(N, dtype=np.int64), sensitivity=1, rho=Fraction(1, 8))
    check = mom_check(np.asarray(r.value, dtype=np.float64) ** 2, claimed, var4)
    assert check.rejected, str(check)


def test_laplace_grid_variance() -> None:
    # Exact discrete variance in grid units at t = noise.parameter (≈ 2^20), then in value
    # units: about 2·scale² (the continuous Laplace's) up to the grid's extra unit.
    x = np.full(N, 0.3)
    r = laplace(x, sensitivity=1.0, epsilon=1.0)
    m2, var4 = _moments(r)
    assert r.granularity is not None
    assert math.isclose(m2 * r.granularity**2, 2 * r.scale**2, rel_tol=1e-6)
    check = mom_check(_noise_units(r, x) ** 2, m2, var4)
    assert not check.rejected, str(check)


def test_laplace_grid_variance_control_half_the_noise() -> None:
    x = np.full(N, 0.3)
    honest = laplace(x[:1], sensitivity=1.0, epsilon=1.0)
    claimed, var4 = _moments(honest)
    assert honest.granularity is not None
    broken = laplace(x, sensitivity=1.0, epsilon=2.0)
    noise = (np.asarray(broken.value) - x) / honest.granularity  # honest grid units
    broken_m2 = claimed / 4
    assert abs(claimed - broken_m2) > 2 * mom_bound(var4, N)
    check = mom_check(noise**2, claimed, var4)
    assert check.rejected, str(check)


def test_gaussian_grid_variance() -> None:
    x = np.full(N, -2.7)
    r = gaussian(x, sensitivity=2.0, rho=0.125)
    m2, var4 = _moments(r)
    assert r.granularity is not None
    assert math.isclose(m2 * r.granularity**2, r.scale**2, rel_tol=1e-9)
    assert r.scale**2 >= 2.0**2 / (2 * 0.125)  # never less noise than σ = Δ/√(2ρ)
    check = mom_check(_noise_units(r, x) ** 2, m2, var4)
    assert not check.rejected, str(check)


# ----------------------------------------------------------------------------- intervals

COVERAGE_N = 200_000
SLACK = 0.005  # "not absurdly wide": at most level + 0.5 points for near-continuous noise


def _hits(r: Release, truth: float, level: float) -> int:
    lo, hi = r.interval(level)
    return int(((lo <= truth) & (truth <= hi)).sum())


@pytest.mark.parametrize("level", [0.5, 0.9, 0.95, 0.99])
def test_laplace_grid_interval_coverage(level: float) -> None:
    r = laplace(np.full(COVERAGE_N, 0.3), sensitivity=1.0, epsilon=1.0)
    hits = _hits(r, 0.3, level)
    assert not coverage_too_low(hits, COVERAGE_N, level), hits
    assert not coverage_too_high(hits, COVERAGE_N, level + SLACK), hits


@pytest.mark.parametrize("level", [0.5, 0.95, 0.99])
def test_gaussian_grid_interval_coverage(level: float) -> None:
    r = gaussian(np.full(COVERAGE_N, 0.3), sensitivity=1.0, rho=0.5)
    hits = _hits(r, 0.3, level)
    assert not coverage_too_low(hits, COVERAGE_N, level), hits
    assert not coverage_too_high(hits, COVERAGE_N, level + SLACK), hits


@pytest.mark.parametrize("level", [0.9, 0.95])
def test_discrete_interval_coverage(level: float) -> None:
    # Small integer scales: the interval may cover more than level (its half-width is an
    # integer; tests/unit/test_mechanisms_intervals.py checks it is the smallest one), but
    # never less.
    for r, truth in [
        (geometric(np.full(COVERAGE_N, 41), sensitivity=1, epsilon=1.0), 41.0),
        (discrete_gaussian(np.full(COVERAGE_N, 41), sensitivity=1, rho=0.5), 41.0),
    ]:
        assert not coverage_too_low(_hits(r, truth, level), COVERAGE_N, level), r.mechanism


def test_interval_control_half_the_noise_undercovers() -> None:
    # The interval of an honest release, applied to values with twice the noise scale:
    # P[|Z| ≤ c] drops from ≥ 0.95 to about 0.78 — far below, so rejection is certain.
    honest = laplace(np.zeros(1), sensitivity=1.0, epsilon=1.0)
    broken = laplace(np.full(COVERAGE_N, 0.3), sensitivity=1.0, epsilon=0.5)
    h = honest.half_width(0.95)
    v = np.asarray(broken.value)
    hits = int((np.abs(v - 0.3) <= h).sum())
    assert coverage_too_low(hits, COVERAGE_N, 0.95), hits


def test_interval_control_too_wide() -> None:
    # An interval built for 0.99 but claimed at 0.95 covers ~99%: the width check rejects.
    r = laplace(np.full(COVERAGE_N, 0.3), sensitivity=1.0, epsilon=1.0)
    hits = _hits(r, 0.3, 0.99)
    assert coverage_too_high(hits, COVERAGE_N, 0.95 + SLACK), hits


# ----------------------------------------------------------------------------- RR estimator

RR_N = 1_000_000
HOEFFDING = math.sqrt(math.log(2 / 1e-7) / (2 * RR_N))  # bound on |ŷ − E ŷ| at 1e-7


def _survey(q: Fraction) -> int:
    truth = np.zeros(RR_N, dtype=bool)
    truth[: 3 * RR_N // 10] = True  # 30% say yes
    return int(np.asarray(coin_randomized_response(truth, q=q).value).sum())


def test_coin_rr_estimator_is_unbiased() -> None:
    # The estimate is (ŷ − (1−q)/2)/q, so its error is at most HOEFFDING/q w.p. ≥ 1 − 1e-7.
    q = Fraction(1, 2)
    est = coin_rr_estimate(_survey(q), RR_N, q)
    assert abs(est - 0.3) <= HOEFFDING / float(q), est


def test_coin_rr_estimator_control_wrong_q() -> None:
    # Decoding answers given with q = 1/2 as if q were 0.6: E = (0.4 − 0.2)/0.6 = 1/3, a bias
    # of 0.033, more than twice the bound (0.0058 at q = 1/2, 0.0048 at 0.6).
    q = Fraction(1, 2)
    assert abs(1 / 3 - 0.3) > HOEFFDING / 0.5 + HOEFFDING / 0.6
    est = coin_rr_estimate(_survey(q), RR_N, 0.6)
    assert abs(est - 0.3) > HOEFFDING / float(q), est
