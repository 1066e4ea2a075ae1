"""Exact laws and statistical checks shared by the mechanism tests (and tests of them).

Every check here rejects at level ``ALPHA = 1e-7`` under its null hypothesis, so a correct
mechanism fails one check with probability below 1e-7; each test function makes at most a few
checks (the union bound keeps it below 1e-6, stated in each test).

* :func:`chi2_binned` — Pearson chi-square of integer samples against exact bin
  probabilities; bins hold expected count ≥ ``MIN_EXPECTED`` (200, forty times Cochran's rule
  of 5, so the chi-square approximation holds out to its 1e-7 quantile).
* :func:`mom_check` — median-of-means bound for a mean (used on ``Z²`` to test a variance).
  The noise is heavy-tailed (Laplace: kurtosis 6), so a chi-square interval for the variance,
  which assumes normal data, would be wrong; median-of-means needs only ``Var(Z²)``, which
  we know exactly from the law: split the ``n`` values into ``K = 32`` blocks; by Chebyshev a
  block mean misses ``E[Z²]`` by more than ``3·sd(Z²)/√(n/K)`` with probability ≤ 1/9, and the
  median of the block means misses only if at least 16 of the 32 independent blocks do:
  ``P[Bin(32, 1/9) ≥ 16] = 5.6e-8``.
* :func:`coverage_too_low` / :func:`coverage_too_high` — exact binomial tails at 1e-7.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import mpmath  # type: ignore[import-untyped]
import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats

ALPHA = 1e-7
MIN_EXPECTED = 200.0
MOM_BLOCKS = 32
MOM_C = 3.0

pytestmark = pytest.mark.stats

Floats = npt.NDArray[np.float64]


# ----------------------------------------------------------------------------- exact laws


def laplace_alpha(t: float) -> tuple[float, float]:
    """``(α, 1 − α)`` for ``α = e^(−1/t)``, the second without cancellation."""
    return math.exp(-1.0 / t), -math.expm1(-1.0 / t)


def laplace_cdf(m: npt.ArrayLike, t: float) -> Floats:
    """``P[Z ≤ m]`` for discrete Laplace ``P[Z = k] ∝ e^(−|k|/t)`` (closed form).

    ``P[Z ≥ j] = P[Z ≤ −j] = α^j/(1 + α)`` for ``j ≥ 1``.
    """
    a, _ = laplace_alpha(t)
    mm = np.asarray(m, dtype=np.float64)
    low = np.exp(np.minimum(mm, 0.0) / t) / (1.0 + a)  # m ≤ −1: α^(−m)/(1+α)
    high = 1.0 - np.exp(-(np.maximum(mm, 0.0) + 1.0) / t) / (1.0 + a)
    return np.where(mm <= -1, low, high)


def laplace_moments(t: float) -> tuple[float, float]:
    """``(E Z², Var Z²)`` of discrete Laplace with scale ``t``.

    ``E Z² = 2α/(1−α)²`` and ``E Z⁴ = 2α(1 + 10α + α²)/(1−α)⁴`` (from the series
    ``Σ k⁴ α^k = α(1 + 11α + 11α² + α³)/(1−α)⁵``).
    """
    a, one_minus = laplace_alpha(t)
    m2 = 2 * a / one_minus**2
    m4 = 2 * a * (1 + 10 * a + a * a) / one_minus**4
    return m2, m4 - m2 * m2


def gaussian_pmf_window(sigma2: float) -> tuple[int, Floats]:
    """``(lo, probs)``: the discrete Gaussian pmf on ``lo..−lo`` (mass outside < e^-800)."""
    c = math.ceil(40.0 * math.sqrt(sigma2)) + 10
    k = np.arange(-c, c + 1, dtype=np.float64)
    w = np.exp(-(k * k) / (2.0 * sigma2))
    return -c, w / w.sum()


def gaussian_moments(sigma2: float) -> tuple[float, float]:
    """``(E Z², Var Z²)`` of the discrete Gaussian with parameter ``σ²``.

    Summed over the pmf for ``σ ≤ 1000``; beyond, the continuous Gaussian's ``(σ², 2σ⁴)``,
    which the discrete one matches to a relative ``e^(−2π²σ²)`` (Poisson summation).
    """
    if sigma2 > 1e6:
        return sigma2, 2 * sigma2 * sigma2
    lo, p = gaussian_pmf_window(sigma2)
    k = np.arange(lo, -lo + 1, dtype=np.float64)
    m2 = float((p * k * k).sum())
    m4 = float((p * k**4).sum())
    return m2, m4 - m2 * m2


def gaussian_cdf(m: npt.ArrayLike, sigma2: float) -> Floats:
    """``P[Z ≤ m]`` for the discrete Gaussian: exact sum (σ ≤ 10⁴) or ``Φ((m + ½)/σ)``.

    The continuity-corrected normal CDF is a midpoint rule for the partial sum; its error is
    about ``|f'|/24 ≤ 1/(24·σ²)`` (Euler–Maclaurin), below 1e-9 for σ > 10⁴.
    """
    mm = np.asarray(m, dtype=np.float64)
    if sigma2 > 1e8:
        return np.asarray(stats.norm.cdf((mm + 0.5) / math.sqrt(sigma2)), dtype=np.float64)
    lo, p = gaussian_pmf_window(sigma2)
    cum = np.cumsum(p)
    idx = np.clip(mm - lo, -1, cum.size - 1).astype(np.int64)
    return np.where(idx < 0, 0.0, cum[np.maximum(idx, 0)])


def exact_two_sided_mass(kind: str, parameter: float, c: int) -> mpmath.mpf:
    """``P[|Z| ≤ c]`` to 50 digits (mpmath), for the noise law of a release.

    Laplace: ``1 − 2α^(c+1)/(1+α)``. Gaussian: the normalised sum of ``e^(−k²/(2σ²))``.
    """
    with mpmath.workdps(50):
        if kind == "discrete_laplace":
            a = mpmath.exp(-1 / mpmath.mpf(parameter))
            return 1 - 2 * a ** (c + 1) / (1 + a)
        s2 = mpmath.mpf(parameter)
        width = int(40 * math.sqrt(parameter)) + 10

        def weight(k: int) -> mpmath.mpf:
            return mpmath.exp(-(mpmath.mpf(k) ** 2) / (2 * s2))

        total = 1 + 2 * mpmath.fsum(weight(k) for k in range(1, width))
        inside = 1 + 2 * mpmath.fsum(weight(k) for k in range(1, c + 1))
        return inside / total


# ----------------------------------------------------------------------------- chi-square


@dataclass(frozen=True)
class Chi2:
    """A chi-square statistic, its degrees of freedom and the 1e-7 rejection threshold."""

    statistic: float
    df: int
    threshold: float
    expected: Floats
    observed: Floats

    @property
    def rejected(self) -> bool:
        return self.statistic > self.threshold

    def power_against(self, true_probs: Floats) -> float:
        """Probability of rejecting when the bins' true probabilities are ``true_probs``.

        Non-central chi-square with ``λ = n·Σ (q − p)²/p`` (the standard approximation).
        """
        n = self.observed.sum()
        p = self.expected / n
        lam = float(n * ((np.asarray(true_probs) - p) ** 2 / p).sum())
        return float(stats.ncx2.sf(self.threshold, self.df, lam))

    def __str__(self) -> str:
        return f"chi2 = {self.statistic:.1f} on {self.df} df (reject above {self.threshold:.1f})"


def chi2_counts(observed: npt.ArrayLike, probs: npt.ArrayLike) -> Chi2:
    """Pearson chi-square of category counts against exact category probabilities."""
    obs = np.asarray(observed, dtype=np.float64)
    p = np.asarray(probs, dtype=np.float64)
    expected = p / p.sum() * obs.sum()
    if expected.min() < MIN_EXPECTED or obs.size < 2:
        raise AssertionError("need ≥ 2 chi-square cells of expected count ≥ 200; raise n")
    stat = float(((obs - expected) ** 2 / expected).sum())
    df = obs.size - 1
    return Chi2(stat, df, float(stats.chi2.isf(ALPHA, df)), expected, obs)


def quantile_edges(cdf_at: Floats, grid: npt.NDArray[np.int64], n: int, max_bins: int) -> list[int]:
    """Integer upper edges (from ``grid``) cutting the law into bins of mass ≥ target.

    The target is ``max(200/n, 1/max_bins)``; when that leaves fewer than three bins (a law
    concentrated on a few values), bins need only an expected count of 200.
    """
    for target in (max(MIN_EXPECTED / n, 1.0 / max_bins), MIN_EXPECTED / n):
        edges: list[int] = []
        last = 0.0
        for e, f in zip(grid.tolist(), cdf_at.tolist(), strict=True):
            if f - last >= target and 1.0 - f >= target:
                edges.append(int(e))
                last = f
        if len(edges) >= 2:
            break
    return edges


def chi2_binned(
    samples: npt.ArrayLike, edges: list[int], cdf: object, *, cdf_args: tuple[float, ...]
) -> Chi2:
    """Chi-square of integer ``samples`` on bins ``(−inf, e₀], (e₀, e₁], …, (e_last, inf)``.

    ``cdf(m, *cdf_args)`` gives ``P[Z ≤ m]`` exactly for the law under test.
    """
    x = np.asarray(samples, dtype=np.int64)
    e = np.asarray(edges, dtype=np.int64)
    f = np.asarray(cdf(e, *cdf_args), dtype=np.float64)  # type: ignore[operator]
    probs = np.diff(np.concatenate([[0.0], f, [1.0]]))
    observed = np.bincount(np.searchsorted(e, x, side="left"), minlength=e.size + 1)
    return chi2_counts(observed, probs)


def laplace_edges(t: float, n: int, max_bins: int = 60) -> list[int]:
    """Edges cutting discrete Laplace(t) into bins of mass ≥ max(200/n, 1/max_bins)."""
    span = math.ceil(30 * t) + 2
    step = max(1, span // 4000)
    grid = np.arange(-span, span + 1, step, dtype=np.int64)
    return quantile_edges(laplace_cdf(grid, t), grid, n, max_bins)


def gaussian_edges(sigma2: float, n: int, max_bins: int = 60) -> list[int]:
    """Edges cutting the discrete Gaussian(σ²) into bins of mass ≥ max(200/n, 1/max_bins)."""
    span = math.ceil(8 * math.sqrt(sigma2)) + 2
    step = max(1, span // 4000)
    grid = np.arange(-span, span + 1, step, dtype=np.int64)
    return quantile_edges(gaussian_cdf(grid, sigma2), grid, n, max_bins)


# ----------------------------------------------------------------------------- moments


@dataclass(frozen=True)
class MoM:
    """A median-of-means estimate of a mean and its 1e-7 deviation bound."""

    estimate: float
    bound: float
    target: float

    @property
    def rejected(self) -> bool:
        return abs(self.estimate - self.target) > self.bound

    def __str__(self) -> str:
        return f"estimate {self.estimate:.6g}, target {self.target:.6g} ± {self.bound:.3g}"


def mom_bound(var: float, n: int) -> float:
    """Deviation bound of the median of ``MOM_BLOCKS`` block means of ``n`` values."""
    return MOM_C * math.sqrt(var * MOM_BLOCKS / (n - n % MOM_BLOCKS))


def mom_check(values: npt.ArrayLike, target: float, var: float) -> MoM:
    """Median-of-means test that ``E[values] = target`` given ``Var(values) = var``.

    False rejection probability ``P[Bin(32, 1/9) ≥ 16] ≤ 5.6e-8`` (module docstring).
    """
    v = np.asarray(values, dtype=np.float64)
    m = v.size // MOM_BLOCKS
    blocks = v[: m * MOM_BLOCKS].reshape(MOM_BLOCKS, m).mean(axis=1)
    return MoM(float(np.median(blocks)), mom_bound(var, v.size), target)


# ----------------------------------------------------------------------------- coverage


def coverage_too_low(hits: int, n: int, level: float) -> bool:
    """Exact binomial test of ``P[hit] ≥ level``: reject when ``P[Bin(n, level) ≤ hits] < α``."""
    return float(stats.binom.cdf(hits, n, level)) < ALPHA


def coverage_too_high(hits: int, n: int, level: float) -> bool:
    """Exact binomial test of ``P[hit] ≤ level``: reject when ``P[Bin(n, level) ≥ hits] < α``."""
    return float(stats.binom.sf(hits - 1, n, level)) < ALPHA


# ----------------------------------------------------------------------------- self-tests


def test_mom_failure_probability_is_below_1e_7() -> None:
    # The constants above give the stated false-rejection probability.
    assert stats.binom.sf(MOM_BLOCKS // 2 - 1, MOM_BLOCKS, 1 / MOM_C**2) < ALPHA


def test_laplace_cdf_matches_the_pmf() -> None:
    t = 2.5
    a, one_minus = laplace_alpha(t)
    ks = np.arange(-200, 201)
    pmf = one_minus / (1 + a) * np.exp(-np.abs(ks) / t)
    np.testing.assert_allclose(laplace_cdf(ks, t), np.cumsum(pmf), rtol=0, atol=1e-12)
    m2, var4 = laplace_moments(t)
    assert math.isclose(m2, float((pmf * ks**2).sum()), rel_tol=1e-12)
    assert math.isclose(var4, float((pmf * ks**4).sum()) - m2 * m2, rel_tol=1e-10)


def test_gaussian_cdf_large_sigma_matches_the_sum() -> None:
    # Both branches of gaussian_cdf agree where they meet (σ² = 1e8), within 1/(24σ²).
    ks = np.array([-30000, -10000, 0, 5, 10000, 29999])
    exact = gaussian_cdf(ks, 1e8)
    approx = np.asarray(stats.norm.cdf((ks + 0.5) / 1e4))
    np.testing.assert_allclose(exact, approx, rtol=0, atol=1e-9)


def test_mom_rejects_a_wrong_mean() -> None:
    # Negative control of the helper itself: exponential(1) data, claimed mean 1.1.
    rng = np.random.default_rng(5)
    x = rng.exponential(1.0, 200_000)
    assert not mom_check(x, 1.0, 1.0).rejected
    assert mom_check(x, 1.1, 1.0).rejected


# ----------------------------------------------------------------------------- shared draws


@functools.lru_cache(maxsize=16)
def exponential_draws(scores: tuple[float, ...], epsilon: float, n: int) -> npt.NDArray[np.int64]:
    """``n`` independent outputs of the exponential mechanism (secure source), cached.

    One release per draw is slow (~0.4 ms), so the privacy and distribution tests share them;
    each test still sees independent draws of the law it checks.
    """
    from deniable.mechanisms import exponential

    return np.array(
        [int(exponential(list(scores), sensitivity=1, epsilon=epsilon).value) for _ in range(n)],
        dtype=np.int64,
    )
