"""Every exact sampler of :mod:`deniable.noise` against its exact pmf.

Each test draws from the secure default source (the release path) and applies the checks of
``_noise_stats``: a chi-square over bins of expected count ≥ 200 with the tails merged, and an
exact binomial test of ``P[|X| > c]`` for a ``c`` far in the tail (about 300 expected hits).
Every check rejects at its 1e-7 quantile, so a correct sampler fails a test (at most three
checks) with probability below 1e-6. The negative controls in ``test_noise_controls.py`` show
that the same checks reject broken samplers.
"""

from __future__ import annotations

import importlib
import math
from fractions import Fraction

import numpy as np
import pytest
from _noise_stats import (
    ALPHA,
    binomial_check,
    check_distribution,
    chi2_gof,
    chi2_gof_edges,
    discrete_gaussian_pmf,
    discrete_laplace_pmf,
    geometric_pmf,
    laplace_bins,
    uniform_pmf,
)

from deniable.noise import (
    bernoulli,
    bernoulli_exp_neg,
    discrete_gaussian,
    discrete_laplace,
    geometric,
    uniform_int,
)
from deniable.noise.source import default_source

pytestmark = pytest.mark.stats

N = 1_000_000

LAPLACE_SCALES = [Fraction(1, 10), Fraction(1), Fraction(7, 3), Fraction(100), Fraction(10**4)]
GAUSSIAN_SIGMA2 = [Fraction(1, 100), Fraction(1), Fraction(7, 3), Fraction(10**4), Fraction(10**8)]


def _fail_message(name: str, failures: list[str]) -> str:
    return f"{name} does not match its pmf: " + "; ".join(failures)


# ----------------------------------------------------------------------------- Bernoulli


@pytest.mark.parametrize(
    "p",
    [
        Fraction(1, 3),
        Fraction(2, 3),
        Fraction(1, 2),
        0.1,  # a float: its exact dyadic value
        Fraction(3, 10**5),  # tiny, 30 expected hits: a sampler rounding it to 0 is caught
        Fraction(1, 2**60),  # tinier still: no hit expected at all
        1 - Fraction(1, 2**60),
        0,
        1,
    ],
    ids=str,
)
def test_bernoulli_frequency(p: Fraction | float | int) -> None:
    draws = bernoulli(p, N)
    assert draws.dtype == np.bool_ and draws.shape == (N,)
    result = binomial_check(int(draws.sum()), N, float(Fraction(p)))
    assert not result.rejected, f"bernoulli({p}): {result}"


def test_bernoulli_zero_and_one_are_certain() -> None:
    # Exact: not a single True for p = 0, not a single False for p = 1.
    assert not bernoulli(0, N).any()
    assert bernoulli(1, N).all()


@pytest.mark.parametrize(
    "gamma",
    [
        Fraction(0),
        Fraction(1, 3),
        Fraction(1),
        Fraction(5, 2),
        Fraction(10),  # e^-10·10^6 ≈ 45 expected
        Fraction(50),  # e^-50 ≈ 2e-22: never
        Fraction(10**6),
        0.1,
    ],
    ids=str,
)
def test_bernoulli_exp_neg_frequency(gamma: Fraction | float) -> None:
    draws = bernoulli_exp_neg(gamma, N)
    assert draws.shape == (N,)
    result = binomial_check(int(draws.sum()), N, math.exp(-float(gamma)))
    assert not result.rejected, f"bernoulli_exp_neg({gamma}): {result}"


def test_bernoulli_exp_neg_per_draw_gammas() -> None:
    # One γ per draw (the form the discrete Gaussian uses): each group has its own frequency.
    gammas = [Fraction(0), Fraction(1, 2), Fraction(1), Fraction(3)]
    reps = 100_000
    draws = bernoulli_exp_neg(gammas * reps)
    per = draws.reshape(reps, len(gammas)).sum(axis=0)
    # Four checks at 1e-7: false failure below 4e-7.
    for g, k in zip(gammas, per, strict=True):
        result = binomial_check(int(k), reps, math.exp(-float(g)))
        assert not result.rejected, f"γ = {g}: {result}"


# ----------------------------------------------------------------------------- uniform


@pytest.mark.parametrize("high", [1, 2, 6, 7, 1000])
def test_uniform_int_small(high: int) -> None:
    draws = uniform_int(high, N)
    assert draws.dtype == np.int64
    assert draws.min() >= 0 and draws.max() < high
    result = chi2_gof(draws, uniform_pmf(high))
    assert not result.rejected, f"uniform_int({high}): {result}"


@pytest.mark.parametrize(
    "high",
    [
        2**63 - 1,
        2**62 + 1,
        10**18 + 7,
        3 * 2**61,
    ],
)
def test_uniform_int_large(high: int) -> None:
    """Large ranges: equal-width top bins and the low byte, both with exact probabilities."""
    draws = uniform_int(high, N)
    assert draws.min() >= 0 and int(draws.max()) < high
    # 64 top bins of width w (the last one shorter): P[bin j] = its length / high.
    bins = 64
    w = -(-high // bins)
    idx = draws // w
    lengths = np.array([min(w, high - j * w) for j in range(bins)], dtype=np.float64)
    observed = np.bincount(idx, minlength=bins).astype(np.float64)
    expected = lengths / high * N
    stat = float(((observed - expected) ** 2 / expected).sum())
    from scipy import stats

    assert stat < stats.chi2.isf(ALPHA, bins - 1), f"top bins of uniform_int({high}): {stat}"
    # Low byte: residue r < high mod 256 occurs once more often than the others.
    q, rem = divmod(high, 256)
    counts = np.array([q + (r < rem) for r in range(256)], dtype=np.float64)
    observed = np.bincount(draws & 255, minlength=256).astype(np.float64)
    expected = counts / high * N
    stat = float(((observed - expected) ** 2 / expected).sum())
    assert stat < stats.chi2.isf(ALPHA, 255), f"low byte of uniform_int({high}): {stat}"


# ----------------------------------------------------------------------------- geometric, Laplace


@pytest.mark.parametrize("scale", LAPLACE_SCALES, ids=str)
def test_geometric(scale: Fraction) -> None:
    draws = geometric(scale, N)
    assert draws.dtype == np.int64 and draws.min() >= 0
    failures = check_distribution(draws, geometric_pmf(float(scale)))
    assert not failures, _fail_message(f"geometric({scale})", failures)


@pytest.mark.parametrize("scale", LAPLACE_SCALES, ids=str)
def test_discrete_laplace(scale: Fraction) -> None:
    draws = discrete_laplace(scale, N)
    assert draws.dtype == np.int64 and draws.shape == (N,)
    failures = check_distribution(draws, discrete_laplace_pmf(float(scale)))
    assert not failures, _fail_message(f"discrete_laplace({scale})", failures)


def test_discrete_laplace_float_scale() -> None:
    # A float scale is its exact dyadic value; 0.1 as a double is not 1/10 but that is
    # invisible here. This checks the float entry point, not the arithmetic.
    failures = check_distribution(discrete_laplace(0.1, N), discrete_laplace_pmf(0.1))
    assert not failures, _fail_message("discrete_laplace(0.1)", failures)


@pytest.mark.slow
@pytest.mark.parametrize("scale", [Fraction(2**20 + 1), Fraction(2**24)], ids=str)
def test_discrete_laplace_grid_scales(scale: Fraction) -> None:
    """Scales used on the release grid (2^20..2^21 grid units) and the largest accepted: too
    wide to tabulate, so bins come from the closed-form cdf. Two checks at 1e-7."""
    n = 4 * N
    draws = discrete_laplace(scale, n)
    t = float(scale)
    edges, probs = laplace_bins(t)
    result = chi2_gof_edges(draws, edges, probs)
    assert not result.rejected, f"discrete_laplace({scale}): {result}"
    # P[|X| > c] = 2α^(c+1)/(1+α), with c chosen for about 300 expected hits.
    c = math.floor(t * math.log(2 * n / 300 / (1 + math.exp(-1 / t))))
    p = 2 * math.exp(-(c + 1) / t) / (1 + math.exp(-1 / t))
    tail = binomial_check(int((np.abs(draws) > c).sum()), n, p)
    assert not tail.rejected, f"tail of discrete_laplace({scale}): {tail}"


# ----------------------------------------------------------------------------- discrete Gaussian


@pytest.mark.parametrize("sigma2", GAUSSIAN_SIGMA2, ids=str)
def test_discrete_gaussian(sigma2: Fraction) -> None:
    draws = discrete_gaussian(sigma2, N)
    assert draws.dtype == np.int64 and draws.shape == (N,)
    failures = check_distribution(draws, discrete_gaussian_pmf(float(sigma2)))
    assert not failures, _fail_message(f"discrete_gaussian({sigma2})", failures)


def test_discrete_gaussian_rejection_path_public() -> None:
    # Above σ² = 2^28 the public function uses the Canonne–Kamath–Steinke rejection sampler.
    sigma2 = Fraction(10**9)
    failures = check_distribution(discrete_gaussian(sigma2, N // 2), discrete_gaussian_pmf(1e9))
    assert not failures, _fail_message("discrete_gaussian(10^9)", failures)


@pytest.mark.parametrize("sigma2", GAUSSIAN_SIGMA2, ids=str)
def test_discrete_gaussian_rejection_path(sigma2: Fraction) -> None:
    """The CKS rejection sampler directly, at the σ² the alias table serves in public."""
    module = importlib.import_module("deniable.noise.discrete_gaussian")
    draws = module._discrete_gaussian(sigma2, N // 4, default_source())
    failures = check_distribution(draws, discrete_gaussian_pmf(float(sigma2)))
    assert not failures, _fail_message(f"CKS discrete_gaussian({sigma2})", failures)


def test_discrete_gaussian_tiny_sigma_is_almost_always_zero() -> None:
    # σ = 0.1: P[X ≠ 0] = 2e^-50/(1 + 2e^-50 + …) ≈ 4e-22, so 10^6 draws are all zero.
    assert not discrete_gaussian(Fraction(1, 100), N).any()


@pytest.mark.slow
@pytest.mark.parametrize("sigma2", [Fraction(2**40), Fraction(2**60)], ids=str)
def test_discrete_gaussian_huge(sigma2: Fraction) -> None:
    # Chi-square only: the window of the exact pmf would be too large for the tail helper.
    sigma = math.sqrt(float(sigma2))
    draws = discrete_gaussian(sigma2, N)
    # Standardise into 60 equal-mass bins of the continuous normal: with σ ≥ 2^20 the
    # discrete and continuous Gaussians differ by far less than the test's resolution
    # (Poisson summation: relative error below e^(-2π²σ²)).
    from scipy import stats

    edges = stats.norm.ppf(np.linspace(0, 1, 61)[1:-1]) * sigma
    idx = np.searchsorted(edges, draws.astype(np.float64))
    observed = np.bincount(idx, minlength=60).astype(np.float64)
    stat = float(((observed - N / 60) ** 2 / (N / 60)).sum())
    assert stat < stats.chi2.isf(ALPHA, 59), f"discrete_gaussian({sigma2}): chi2 = {stat}"
