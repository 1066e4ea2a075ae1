"""The outputs of every mechanism against their exact law (chi-square at 1e-7).

Each test releases many values through the public mechanism (secure default source), recovers
the noise (output minus input, in grid units for real-valued mechanisms) and compares its
histogram with the exact law stated by the release (``Release.noise``): bins of expected count
≥ 200 with the tails merged, Pearson chi-square rejected above its 1e-7 quantile. One check
per test, so a correct mechanism fails with probability below 1e-7 < 1e-6.

Negative controls: the same check on a broken variant (twice the ε, i.e. half the noise, or a
different truth probability) must reject. Before sampling, each control asserts that the
check's power against the broken law is above 1 − 1e-6 (non-central chi-square), so it cannot
flake either.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pytest
from _mechanisms_support import (
    ALPHA,
    chi2_binned,
    chi2_counts,
    exponential_draws,
    gaussian_cdf,
    gaussian_edges,
    laplace_cdf,
    laplace_edges,
)
from scipy import stats

from deniable.mechanisms import (
    Release,
    coin_randomized_response,
    discrete_gaussian,
    gaussian,
    geometric,
    k_randomized_response,
    laplace,
    randomized_response,
)
from deniable.mechanisms.exponential import (
    exponential,
    exponential_probabilities,
    random_permutation,
)
from deniable.mechanisms.randomized_response import k_rr_keep_probability
from deniable.noise import uniform_int
from deniable.noise.exact import to_fraction

pytestmark = pytest.mark.stats

N = 200_000
POWER = 1 - 1e-6


def _inputs(n: int) -> npt.NDArray[np.int64]:
    # Varied true values: the noise must not depend on them.
    return (np.arange(n, dtype=np.int64) % 11) * 37 - 150


def _grid_units(r: Release, x: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
    """Noise in grid units: released/g − round(x/g) (both exact integers in float64)."""
    assert r.granularity is not None
    e = round(math.log2(r.granularity))
    assert r.granularity == 2.0**e
    units = np.asarray(r.value, dtype=np.float64) / r.granularity
    assert np.array_equal(units, np.rint(units)), "released values are off the grid"
    return (units - np.rint(np.ldexp(x, -e))).astype(np.int64)


# ----------------------------------------------------------------------------- geometric


@pytest.mark.parametrize(
    ("sensitivity", "epsilon"),
    [(1, Fraction(1, 2)), (1, 1), (3, Fraction(1, 2)), (1, Fraction(1, 10_000))],
    ids=["t=2", "t=1", "t=6", "t=1e4"],
)
def test_geometric_noise_is_discrete_laplace(sensitivity: int, epsilon: Fraction) -> None:
    x = _inputs(N)
    r = geometric(x, sensitivity=sensitivity, epsilon=epsilon)
    assert r.noise is not None and r.noise.parameter == Fraction(sensitivity) / epsilon
    t = float(r.noise.parameter)
    gof = chi2_binned(np.asarray(r.value) - x, laplace_edges(t, N), laplace_cdf, cdf_args=(t,))
    assert not gof.rejected, str(gof)


def test_geometric_tiny_scale() -> None:
    # ε = 10, Δ = 1: t = 0.1, P[Z ≠ 0] = 2α/(1+α) with α = e^-10 (≈ 91 expected in 1e6).
    # Exact two-sided binomial test at 1e-7; the negative control (ε = 20: ≈ 0.004 expected)
    # would observe 0, whose probability under the honest law is e^-91.
    n = 1_000_000
    a = math.exp(-10.0)
    p_nonzero = 2 * a / (1 + a)
    nonzero = int(
        (geometric(np.zeros(n, dtype=np.int64), sensitivity=1, epsilon=10).value != 0).sum()
    )
    assert stats.binomtest(nonzero, n, p_nonzero).pvalue >= ALPHA, nonzero
    broken = int(
        (geometric(np.zeros(n, dtype=np.int64), sensitivity=1, epsilon=20).value != 0).sum()
    )
    assert stats.binomtest(broken, n, p_nonzero).pvalue < ALPHA, broken


def test_geometric_control_half_the_noise() -> None:
    t = 2.0
    edges = laplace_edges(t, N)
    probs = np.diff(np.concatenate([[0.0], laplace_cdf(edges, t / 2), [1.0]]))
    x = _inputs(N)
    r = geometric(x, sensitivity=1, epsilon=1)  # scale 1: half the claimed scale 2
    gof = chi2_binned(np.asarray(r.value) - x, edges, laplace_cdf, cdf_args=(t,))
    assert gof.power_against(probs) > POWER
    assert gof.rejected, str(gof)


# ----------------------------------------------------------------------------- laplace (grid)


@pytest.mark.parametrize(
    ("value", "sensitivity", "epsilon"),
    [(0.3, 1.0, 1.0), (-1234.56789, 1e3, 0.5), (1e-9, 1e-3, 1.0)],
    ids=["unit", "large", "small"],
)
def test_laplace_grid_noise_is_discrete_laplace(
    value: float, sensitivity: float, epsilon: float
) -> None:
    x = np.full(N, value)
    r = laplace(x, sensitivity=sensitivity, epsilon=epsilon)
    assert r.noise is not None and r.granularity is not None
    units_d = int(Fraction(sensitivity) / Fraction(r.granularity)) + 1
    assert r.noise.parameter == Fraction(units_d) / to_fraction(epsilon, "epsilon")
    t = float(r.noise.parameter)
    gof = chi2_binned(_grid_units(r, x), laplace_edges(t, N), laplace_cdf, cdf_args=(t,))
    assert not gof.rejected, str(gof)


def _in_units_of(broken: Release, honest: Release, x: float) -> npt.NDArray[np.int64]:
    """The broken release's noise, read in the honest release's grid units (rounded).

    The grid follows the noise scale, so a broken variant with half the noise also has half
    the grid; what an analyst sees is the value, so compare values.
    """
    assert honest.granularity is not None
    v = np.asarray(broken.value, dtype=np.float64)
    units: npt.NDArray[np.int64] = np.rint(
        v / honest.granularity - round(x / honest.granularity)
    ).astype(np.int64)
    return units


def test_laplace_grid_control_half_the_noise() -> None:
    x = np.full(N, 0.3)
    honest = laplace(x[:1], sensitivity=1.0, epsilon=1.0)
    assert honest.noise is not None
    t = float(honest.noise.parameter)
    edges = laplace_edges(t, N)
    broken = laplace(x, sensitivity=1.0, epsilon=2.0)  # half the scale (and half the grid)
    probs = np.diff(np.concatenate([[0.0], laplace_cdf(edges, t / 2), [1.0]]))
    gof = chi2_binned(_in_units_of(broken, honest, 0.3), edges, laplace_cdf, cdf_args=(t,))
    assert gof.power_against(probs) > POWER
    assert gof.rejected, str(gof)


# ----------------------------------------------------------------------------- Gaussian


@pytest.mark.parametrize(
    ("sensitivity", "rho"),
    [(1, Fraction(1, 2)), (2, Fraction(1, 8)), (1, Fraction(1, 20_000)), (1, 5)],
    ids=["s2=1", "s2=16", "s2=1e4", "s2=0.1"],
)
def test_discrete_gaussian_noise(sensitivity: int, rho: Fraction) -> None:
    x = _inputs(N)
    r = discrete_gaussian(x, sensitivity=sensitivity, rho=rho)
    assert r.noise is not None
    assert r.noise.parameter == Fraction(sensitivity**2) / (2 * to_fraction(rho, "rho"))
    s2 = float(r.noise.parameter)
    gof = chi2_binned(np.asarray(r.value) - x, gaussian_edges(s2, N), gaussian_cdf, cdf_args=(s2,))
    assert not gof.rejected, str(gof)


def test_discrete_gaussian_control_half_the_noise() -> None:
    s2 = 16.0
    edges = gaussian_edges(s2, N)
    probs = np.diff(np.concatenate([[0.0], gaussian_cdf(edges, s2 / 4), [1.0]]))
    x = _inputs(N)
    r = discrete_gaussian(x, sensitivity=1, rho=Fraction(1, 8))  # σ² = 4: σ halved
    gof = chi2_binned(np.asarray(r.value) - x, edges, gaussian_cdf, cdf_args=(s2,))
    assert gof.power_against(probs) > POWER
    assert gof.rejected, str(gof)


@pytest.mark.parametrize(
    ("value", "sensitivity", "rho"), [(0.3, 1.0, 0.5), (-77.25, 100.0, 0.01)], ids=["unit", "large"]
)
def test_gaussian_grid_noise(value: float, sensitivity: float, rho: float) -> None:
    x = np.full(N, value)
    r = gaussian(x, sensitivity=sensitivity, rho=rho)
    assert r.noise is not None and r.granularity is not None
    units_d = int(Fraction(sensitivity) / Fraction(r.granularity)) + 1
    assert r.noise.parameter == Fraction(units_d**2) / (2 * to_fraction(rho, "rho"))
    s2 = float(r.noise.parameter)
    gof = chi2_binned(_grid_units(r, x), gaussian_edges(s2, N), gaussian_cdf, cdf_args=(s2,))
    assert not gof.rejected, str(gof)


def test_gaussian_grid_control_half_the_noise() -> None:
    x = np.full(N, 0.3)
    honest = gaussian(x[:1], sensitivity=1.0, rho=0.5)
    broken = gaussian(x, sensitivity=1.0, rho=2.0)  # σ halved
    assert honest.noise is not None
    s2 = float(honest.noise.parameter)
    edges = gaussian_edges(s2, N)
    probs = np.diff(np.concatenate([[0.0], gaussian_cdf(edges, s2 / 4), [1.0]]))
    gof = chi2_binned(_in_units_of(broken, honest, 0.3), edges, gaussian_cdf, cdf_args=(s2,))
    assert gof.power_against(probs) > POWER
    assert gof.rejected, str(gof)


# ----------------------------------------------------------------------------- exponential

EXP_N = 4000
SCORES = (0, 1, 2)


def test_exponential_matches_its_exact_law() -> None:
    # Permute-and-flip's exact law (0.147, 0.266, 0.587) at ε = 1, Δ = 1.
    law = exponential_probabilities(list(SCORES), sensitivity=1, epsilon=1)
    gof = chi2_counts(np.bincount(exponential_draws(SCORES, 1.0, EXP_N), minlength=3), law)
    assert not gof.rejected, str(gof)


def test_exponential_control_twice_epsilon() -> None:
    law = exponential_probabilities(list(SCORES), sensitivity=1, epsilon=1)
    broken_law = exponential_probabilities(list(SCORES), sensitivity=1, epsilon=2)
    gof = chi2_counts(np.bincount(exponential_draws(SCORES, 2.0, EXP_N), minlength=3), law)
    assert gof.power_against(broken_law) > POWER
    assert gof.rejected, str(gof)


# Both sampling paths of ``exponential``: integer scores (vectorised float filter with exact
# fallback) and other scores (exact rationals), against the exact law, with a non-unit
# sensitivity and a rational ε; each with enough draws for ≥ 200 expected per cell.
EXP_CASES = {
    "integers": (np.array([0, 3, 7, 7, 10], dtype=np.int64), 3, Fraction(3, 4)),
    "unsigned": (np.array([5, 1, 9], dtype=np.uint64), 2, Fraction(1, 2)),
    "rationals": ([0.5, 1.25, 2.0, -1.0], 1, Fraction(1)),
}


@pytest.mark.parametrize("case", sorted(EXP_CASES))
def test_exponential_paths_match_the_exact_law(case: str) -> None:
    scores, sensitivity, epsilon = EXP_CASES[case]
    law = exponential_probabilities(
        [float(x) for x in scores], sensitivity=sensitivity, epsilon=epsilon
    )
    n = math.ceil(250 / law.min())
    draws = [
        int(exponential(scores, sensitivity=sensitivity, epsilon=epsilon).value) for _ in range(n)
    ]
    gof = chi2_counts(np.bincount(draws, minlength=len(law)), law)
    assert not gof.rejected, str(gof)


# ----------------------------------------------------------------------------- randomized response

RR_N = 200_000


def _krr_law(k: int, true_value: int, epsilon: float) -> npt.NDArray[np.float64]:
    p = float(k_rr_keep_probability(k, epsilon))
    law = np.full(k, (1 - p) / (k - 1))
    law[true_value] = p
    return law


def test_k_randomized_response_frequencies() -> None:
    out = k_randomized_response(np.full(RR_N, 2), k=5, epsilon=1).value
    gof = chi2_counts(np.bincount(np.asarray(out), minlength=5), _krr_law(5, 2, 1.0))
    assert not gof.rejected, str(gof)


def test_k_randomized_response_control() -> None:
    out = k_randomized_response(np.full(RR_N, 2), k=5, epsilon=2).value
    gof = chi2_counts(np.bincount(np.asarray(out), minlength=5), _krr_law(5, 2, 1.0))
    assert gof.power_against(_krr_law(5, 2, 2.0)) > POWER
    assert gof.rejected, str(gof)


@pytest.mark.parametrize("bit", [0, 1])
def test_coin_randomized_response_frequencies(bit: int) -> None:
    # P[yes] = q·bit + (1 − q)/2: 3/4 for a true yes, 1/4 for a true no at q = 1/2.
    out = np.asarray(coin_randomized_response(np.full(RR_N, bit), q=Fraction(1, 2)).value)
    p_yes = 0.5 * bit + 0.25
    gof = chi2_counts([RR_N - out.sum(), out.sum()], [1 - p_yes, p_yes])
    assert not gof.rejected, str(gof)


def test_coin_randomized_response_control() -> None:
    out = np.asarray(coin_randomized_response(np.full(RR_N, 1), q=Fraction(6, 10)).value)
    gof = chi2_counts([RR_N - out.sum(), out.sum()], [0.25, 0.75])
    assert gof.power_against(np.array([0.2, 0.8])) > POWER
    assert gof.rejected, str(gof)


@pytest.mark.parametrize("bit", [0, 1])
def test_randomized_response_frequencies(bit: int) -> None:
    out = np.asarray(randomized_response(np.full(RR_N, bit), p=Fraction(3, 4)).value)
    truthful = int((out == bit).sum())
    gof = chi2_counts([RR_N - truthful, truthful], [0.25, 0.75])
    assert not gof.rejected, str(gof)


def test_randomized_response_control() -> None:
    out = np.asarray(randomized_response(np.full(RR_N, 1), p=Fraction(4, 5)).value)
    truthful = int(out.sum())
    gof = chi2_counts([RR_N - truthful, truthful], [0.25, 0.75])
    assert gof.power_against(np.array([0.2, 0.8])) > POWER
    assert gof.rejected, str(gof)


# ----------------------------------------------------------------------------- permutations

PERM_N = 12_000
PERMS = list(itertools.permutations(range(4)))


def _perm_counts(draw: Callable[[], npt.NDArray[np.int64]]) -> npt.NDArray[np.int64]:
    index = {p: i for i, p in enumerate(PERMS)}
    counts = np.zeros(len(PERMS), dtype=np.int64)
    for _ in range(PERM_N):
        counts[index[tuple(draw().tolist())]] += 1
    return counts


def _naive_shuffle() -> npt.NDArray[np.int64]:
    # The classic mistake: swap each position with a uniform position of the whole array.
    perm = np.arange(4, dtype=np.int64)
    for i, j in enumerate(uniform_int(4, 4).tolist()):
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def _naive_law() -> npt.NDArray[np.float64]:
    law = np.zeros(len(PERMS))
    index = {p: i for i, p in enumerate(PERMS)}
    for js in itertools.product(range(4), repeat=4):
        perm = list(range(4))
        for i, j in enumerate(js):
            perm[i], perm[j] = perm[j], perm[i]
        law[index[tuple(perm)]] += 1 / 4**4
    return law


def test_random_permutation_is_uniform() -> None:
    # Permute-and-flip is exact only if the visiting order is uniform over all 24 orders.
    gof = chi2_counts(_perm_counts(lambda: random_permutation(4)), np.full(24, 1 / 24))
    assert not gof.rejected, str(gof)


def test_random_permutation_control_naive_shuffle() -> None:
    gof = chi2_counts(_perm_counts(_naive_shuffle), np.full(24, 1 / 24))
    assert gof.power_against(_naive_law()) > POWER
    assert gof.rejected, str(gof)
