"""Local estimators: unbiased (Hoeffding bounds) and intervals that cover (binomial tests).

Unbiasedness. In one large simulated survey with a fixed population, every report count the
estimators use is a sum of independent bounded terms, so Hoeffding's inequality bounds its
deviation from its mean: ``P[|S/n − E S/n| ≥ t] ≤ 2·exp(−2nt²/w²)`` for terms in an interval
of width ``w``. Thresholds are set so that the union over the checked quantities has
probability at most ``ALPHA = 1e-7``; an unbiased estimator passes except with that
probability. Negative control: the same check on a biased estimator (the raw, undebiased
report frequencies; the Bloom decoder told the wrong ``f``) must fail.

Coverage. ``R`` independent surveys; the number whose interval contains the truth is
Binomial(R, coverage). We reject when it is below the ``ALPHA`` quantile of
Binomial(R, level − slack). For the exact (Clopper–Pearson) interval the slack is 0: its
coverage is at least the level (the count of "yes" is Poisson-binomial for a fixed
population, which is more concentrated than the binomial of the same mean — Hoeffding 1956 —
at these tail points, many units from the mean). For the normal approximation the slack
covers the Berry–Esseen error (constant 0.56 for non-identical summands) plus, for k-ary RR
and OUE, the plug-in variance; values are in the tests. Negative controls: intervals of half
the width (normal) and an interval at level 0.5 passed off as 0.9 (exact) must be rejected.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import cache

import numpy as np
import pytest
from scipy import stats

from deniable.local import (
    BinaryEstimate,
    BloomEncoder,
    CoinRandomizedResponse,
    KRandomizedResponse,
    OptimizedUnaryEncoding,
    estimate_coin,
    estimate_k_rr,
    estimate_unary,
    population_counts,
    simulate_survey,
)
from deniable.noise.testing import SeededRandom

pytestmark = pytest.mark.stats

ALPHA = 1e-7


def hoeffding(n: int, width: float, m: int) -> float:
    """Deviation ``t`` of a mean of ``n`` terms in an interval of ``width``, union over m."""
    return width * math.sqrt(math.log(2 * m / ALPHA) / (2 * n))


# ------------------------------------------------------------------ unbiasedness


def test_coin_rr_is_unbiased() -> None:
    n, q = 1_000_000, Fraction(1, 2)
    r = simulate_survey(CoinRandomizedResponse(q=q), 0.3, n, source=SeededRandom(101))
    # f̂ = (yes/n − (1−q)/2)/q: the yes fraction deviates by ≤ t, the estimate by ≤ t/q.
    t = hoeffding(n, 1.0, 1) / float(q)
    assert abs(r.estimate.frequencies[1] - 0.3) <= t
    # Negative control: the raw "yes" fraction (no debiasing) is rejected.
    raw = (r.estimate.frequencies[1] * float(q)) + (1 - float(q)) / 2
    assert abs(raw - 0.3) > t


def test_k_rr_is_unbiased() -> None:
    n, k = 500_000, 5
    truth = [0.4, 0.3, 0.15, 0.1, 0.05]
    grr = KRandomizedResponse(k=k, epsilon=2)
    r = simulate_survey(grr, truth, n, source=SeededRandom(102))
    p = float(grr.keep_probability)
    qq = (1 - p) / (k - 1)
    t = hoeffding(n, 1.0, k) / (p - qq)
    assert np.abs(r.estimate.frequencies - r.truth).max() <= t
    raw = r.estimate.frequencies * (p - qq) + qq  # the observed report frequencies
    assert np.abs(raw - r.truth).max() > t


def test_oue_is_unbiased() -> None:
    n, k = 300_000, 6
    truth = [0.3, 0.25, 0.2, 0.15, 0.1, 0.0]
    oue = OptimizedUnaryEncoding(k=k, epsilon=1)
    r = simulate_survey(oue, truth, n, source=SeededRandom(103))
    qq = float(oue.q)
    t = hoeffding(n, 1.0, k) / (0.5 - qq)
    assert np.abs(r.estimate.frequencies - r.truth).max() <= t
    raw = r.estimate.frequencies * (0.5 - qq) + qq
    assert np.abs(raw - r.truth).max() > t


def _bloom_hoeffding(enc: BloomEncoder, cands: tuple[str, ...], n: int) -> float:
    """Each client adds ``C·L_j z_i`` (cohort j); |z| ≤ zmax, so every term is bounded."""
    m, c = enc.num_bits, enc.num_cohorts
    lin = np.linalg.pinv(enc.design_matrix(cands))
    f, p, q = float(enc.f), float(enc.p), float(enc.q)
    b0 = p + (q - p) * f / 2
    zmax = max(b0, 1 - b0) / ((1 - f) * (q - p))
    bound = (
        max(float(np.abs(c * lin[:, j * m : (j + 1) * m]).sum(axis=1).max()) for j in range(c))
        * zmax
    )
    return hoeffding(n, 2 * bound, len(cands))


def test_bloom_decoding_is_unbiased() -> None:
    n = 200_000
    enc = BloomEncoder(num_bits=16, num_hashes=2, num_cohorts=4, f=0.25, p=0.25, q=0.75)
    cands = ("alpha", "beta", "gamma", "delta")
    truth = [0.4, 0.3, 0.2, 0.1]
    counts = population_counts(truth, n)
    values = [cands[i] for i in np.repeat(np.arange(4), counts)]
    reports = enc.randomize(values, source=SeededRandom(104))
    true_freq = counts / n
    t = _bloom_hoeffding(enc, cands, n)
    assert t < 0.06  # the check is informative
    assert np.abs(enc.estimate(reports, domain=cands).frequencies - true_freq).max() <= t
    # Negative control: decoding with the wrong f (0.5 instead of 0.25) is biased.
    wrong = BloomEncoder(num_bits=16, num_hashes=2, num_cohorts=4, f=0.5, p=0.25, q=0.75)
    assert np.abs(wrong.estimate(reports, domain=cands).frequencies - true_freq).max() > t


# ------------------------------------------------------------------ coverage

R = 2000  # surveys per coverage test
LEVEL = 0.9


def _min_covered(coverage: float) -> float:
    """Reject below the ALPHA quantile of Binomial(R, coverage)."""
    return float(stats.binom.ppf(ALPHA, R, coverage))


def _coin_surveys(n: int, seed: int) -> np.ndarray:  # type: ignore[type-arg]
    """``R`` surveys of ``n`` respondents (30% yes); returns the yes count of each."""
    pop = np.repeat([0, 1], population_counts([0.7, 0.3], n))
    reports = CoinRandomizedResponse(q=0.5).randomize(np.tile(pop, R), source=SeededRandom(seed))
    return reports.reshape(R, n).sum(axis=1)


def test_coin_normal_interval_coverage() -> None:
    # Berry–Esseen: summands Bernoulli(3/4 or 1/4), σ² = 3/16, E|X−μ|³ = (3/16)(5/8); the
    # CDF error is ≤ 0.56·(5/8)/√(n·3/16) = 0.018 at n = 2000, so coverage ≥ 0.9 − 0.036.
    n = 2000
    yes = _coin_surveys(n, 201)
    covered = half = 0
    for y in yes.tolist():
        est = estimate_coin(int(y), n, q=0.5)
        lo, hi = est.interval(LEVEL)
        covered += int(lo[1] <= 0.3 <= hi[1])
        mid, h = est.frequencies[1], (hi[1] - lo[1]) / 4  # negative control: half width
        half += int(mid - h <= 0.3 <= mid + h)
    assert covered >= _min_covered(LEVEL - 0.04)
    assert half < _min_covered(LEVEL - 0.04)


def test_coin_exact_interval_coverage() -> None:
    n = 2000
    yes = _coin_surveys(n, 202)

    @cache
    def interval(y: int, level: float) -> tuple[float, float]:
        est = estimate_coin(y, n, q=0.5)
        assert isinstance(est, BinaryEstimate)
        return est.exact_interval(level)

    covered = sum(lo <= 0.3 <= hi for lo, hi in (interval(int(y), LEVEL) for y in yes.tolist()))
    assert covered >= _min_covered(LEVEL)
    # Negative control: a level-0.5 interval passed off as 0.9.
    wrong = sum(lo <= 0.3 <= hi for lo, hi in (interval(int(y), 0.5) for y in yes.tolist()))
    assert wrong < _min_covered(LEVEL)


def _berry_esseen(n_v: float, n: int, p: float, q: float) -> float:
    """Two-sided coverage error bound of a normal interval for a sum of Bernoulli(p or q).

    ``n_v`` summands are Bernoulli(p), the rest Bernoulli(q); Berry–Esseen for
    non-identical summands: sup|F − Φ| ≤ 0.56·Σρᵢ/(Σσᵢ²)^(3/2), doubled for two sides.
    """

    def var(x: float) -> float:
        return x * (1 - x)

    def rho(x: float) -> float:
        return var(x) * (x * x + (1 - x) * (1 - x))

    s2 = n_v * var(p) + (n - n_v) * var(q)
    r3 = n_v * rho(p) + (n - n_v) * rho(q)
    return 2 * 0.56 * r3 / s2**1.5


def test_k_rr_and_oue_normal_interval_coverage() -> None:
    # Slack per category: the Berry–Esseen bound (computed, ≤ 0.07 here) plus 0.01 for the
    # plug-in variance (its relative error is O(1/√n)).
    n, k, reps = 1000, 4, 1000
    truth = np.array([0.4, 0.3, 0.2, 0.1])
    counts = population_counts(truth.tolist(), n)
    pop = np.repeat(np.arange(k), counts)
    grr = KRandomizedResponse(k=k, epsilon=1)
    oue = OptimizedUnaryEncoding(k=k, epsilon=1)
    rep_k = grr.randomize(np.tile(pop, reps), source=SeededRandom(203)).reshape(reps, n)
    rep_o = oue.randomize(np.tile(pop, reps), source=SeededRandom(204)).reshape(reps, n, k)
    pk = float(grr.keep_probability)
    qk = (1 - pk) / (k - 1)
    slack_k = [_berry_esseen(c, n, pk, qk) + 0.01 for c in counts.tolist()]
    slack_o = [_berry_esseen(c, n, 0.5, float(oue.q)) + 0.01 for c in counts.tolist()]
    assert max(slack_k + slack_o) < 0.08
    cov_k = np.zeros(k)
    cov_o = np.zeros(k)
    half_o = np.zeros(k)
    for i in range(reps):
        ek = estimate_k_rr(
            np.bincount(rep_k[i], minlength=k), keep_probability=grr.keep_probability
        )
        lo, hi = ek.interval(LEVEL)
        cov_k += (lo <= truth) & (truth <= hi)
        eo = estimate_unary(rep_o[i].sum(axis=0), n, p=oue.p, q=oue.q)
        lo, hi = eo.interval(LEVEL)
        cov_o += (lo <= truth) & (truth <= hi)
        h = (hi - lo) / 4
        half_o += (eo.frequencies - h <= truth) & (truth <= eo.frequencies + h)

    def floor(slack: float) -> float:
        return float(stats.binom.ppf(ALPHA, reps, LEVEL - slack))

    # 2k = 8 coverage checks at ALPHA each: false failure ≤ 8e-7. The control's coverage is
    # about 0.59 (z/2 for a 90% interval), far below the floors (≈ 0.77): power > 1 − 1e-12.
    for v in range(k):
        assert cov_k[v] >= floor(slack_k[v]), (v, cov_k / reps)
        assert cov_o[v] >= floor(slack_o[v]), (v, cov_o / reps)
        assert half_o[v] < floor(slack_o[v])  # negative control: half-width intervals
