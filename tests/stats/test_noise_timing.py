"""The time a release takes must not reveal its noise.

Over many single-value releases we record the wall time of each call (``perf_counter_ns``) and
the magnitude of the noise it drew, and test that the two are not correlated: Spearman's rank
correlation ``r`` must satisfy ``|r| < z/√(n−1)`` with ``z = 5.33``, the two-sided 1e-7 quantile
of the standard normal.

Why that threshold holds on a busy machine: if the time of a call does not depend on its noise,
then whatever else slows the machine down (other processes, CPU frequency, garbage collection,
buffer refills of the random source) is independent of the noise drawn, and under independence
the rank correlation is a correlation of two fixed score vectors under a uniformly random
pairing. Its mean is 0, its variance exactly ``1/(n−1)``, and it is asymptotically normal
(Hoeffding's combinatorial central limit theorem; with n ≥ 2000 the normal tail is accurate
at 1e-7). Ranks make the statistic immune to the heavy-tailed stalls of a loaded machine. So a
correct mechanism fails with probability about 1e-7, whatever the load.

Negative control: an exact but naive geometric sampler that flips Bernoulli(e^(−1/t)) coins one
at a time (its run time grows with |noise|) must be rejected by the same test.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from deniable.noise import bernoulli_exp_neg, discrete_gaussian, discrete_laplace, random_bits
from deniable.noise.discrete_laplace import MAX_SCALE

pytestmark = pytest.mark.stats

Z = float(stats.norm.isf(0.5e-7))  # two-sided 1e-7


def _timed(release: Callable[[], float], n: int, warmup: int = 50) -> tuple[np.ndarray, np.ndarray]:
    """Time ``n`` calls of ``release`` (returning its noise); return (times, |noise|)."""
    for _ in range(warmup):
        release()
    times = np.empty(n, dtype=np.float64)
    noise = np.empty(n, dtype=np.float64)
    clock = time.perf_counter_ns
    for i in range(n):
        start = clock()
        z = release()
        times[i] = clock() - start
        noise[i] = abs(z)
    return times, noise


def _correlation(times: np.ndarray, noise: np.ndarray) -> tuple[float, float]:
    r = float(stats.spearmanr(times, noise).statistic)
    return r, Z / np.sqrt(times.size - 1)


def test_grid_laplace_release_time_is_independent_of_the_noise() -> None:
    mechanisms = pytest.importorskip("deniable.mechanisms")

    def release() -> float:
        rel = mechanisms.laplace([0.0], sensitivity=1.0, epsilon=1.0)
        return float(rel.value[0])  # the true value is 0: the release is the noise

    times, noise = _timed(release, 10_000)
    r, limit = _correlation(times, noise)
    assert abs(r) < limit, f"release time correlates with |noise|: Spearman r = {r:.4f}"


@pytest.mark.parametrize(
    ("name", "draw", "n"),
    [
        ("discrete_laplace(3)", lambda: int(discrete_laplace(3, 1)[0]), 5_000),
        ("discrete_laplace(2^20)", lambda: int(discrete_laplace(2**20 + 1, 1)[0]), 5_000),
        ("discrete_gaussian(σ²=9) table", lambda: int(discrete_gaussian(9, 1)[0]), 5_000),
        ("discrete_gaussian(σ²=1e10) rejection", lambda: int(discrete_gaussian(10**10, 1)[0]),
         3_000),
    ],
    ids=["laplace(3)", "laplace(2^20)", "gaussian table", "gaussian rejection"],
)  # fmt: skip
def test_sampler_time_is_independent_of_the_noise(
    name: str, draw: Callable[[], int], n: int
) -> None:
    times, noise = _timed(lambda: float(draw()), n)
    r, limit = _correlation(times, noise)
    assert abs(r) < limit, f"{name}: time correlates with |noise|, Spearman r = {r:.4f}"


def test_sampler_time_is_independent_of_the_noise_at_the_largest_scale() -> None:
    times, noise = _timed(lambda: float(discrete_laplace(MAX_SCALE, 1)[0]), 5_000)
    r, limit = _correlation(times, noise)
    assert abs(r) < limit, f"discrete_laplace(2^32): Spearman r = {r:.4f} (limit {limit:.4f})"


def _naive_discrete_laplace(t: Fraction) -> int:
    """Exact discrete Laplace by coin flipping: correct law, leaky time (one coin per unit)."""
    while True:
        k = 0
        while bernoulli_exp_neg(1 / t, 1)[0]:
            k += 1
        negative = bool(random_bits(1)[0])
        if not (negative and k == 0):
            return -k if negative else k


def test_timing_test_rejects_a_leaky_sampler() -> None:
    """Negative control. Observed Spearman r ≈ 0.8 against a limit of 0.12 (n = 2000)."""
    times, noise = _timed(lambda: float(_naive_discrete_laplace(Fraction(3))), 2_000, warmup=20)
    r, limit = _correlation(times, noise)
    assert r > limit, f"the timing test missed a sampler whose time grows with |noise| (r = {r})"
