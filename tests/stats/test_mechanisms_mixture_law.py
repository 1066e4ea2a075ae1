"""Mixtures of mechanisms: exact output law, empirical privacy at the max, accuracy.

The mixture under test picks discrete Laplace with ε = 2 (scale 1/2) with probability 1/3
and with ε = 1/4 (scale 4) with probability 2/3, on a count of 41 (or 42), Δ = 1. Its
charge is the maximum, ε = 2; the sum would be 9/4 and the minimum 1/4.
A second mixture, of discrete Gaussians with ρ = 1/2 and 1/32, checks the ρ-zCDP claim
(``estimate_rho``) the same way.

Every check rejects at level 1e-7 under its null hypothesis (helpers in
``_mechanisms_support``; ``estimate_epsilon`` at ``alpha = 1e-7``), and each test makes at
most two honest checks, so a correct mixture fails a test with probability < 2e-7 < 1e-6.
Each negative control feeds the same check a wrong claim (swapped weights, the minimum's ε,
the narrow component's interval for every draw) and must reject it; the margins measured
while writing them are in the comments. One release per draw (~0.1 ms); the draws are shared
between tests (each test still sees independent draws of the law it checks).
"""

from __future__ import annotations

import functools
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pytest
from _mechanisms_support import (
    ALPHA,
    chi2_binned,
    chi2_counts,
    coverage_too_low,
    laplace_cdf,
    laplace_moments,
    mom_check,
    quantile_edges,
)

from deniable.accounting.loss import Epsilon, Rho
from deniable.audit import estimate_epsilon, estimate_rho
from deniable.mechanisms import Candidate, Release, discrete_gaussian, geometric, mixture
from deniable.noise.source import RandomSource

pytestmark = pytest.mark.stats

N = 25_000
EPS = (Fraction(2), Fraction(1, 4))
SCALES = (0.5, 4.0)  # t = Δ/ε
WEIGHTS = (Fraction(1, 3), Fraction(2, 3))
LEVEL = 0.9


def _candidates(value: int) -> list[Candidate]:
    def run(eps: Fraction) -> Candidate:
        def draw(src: RandomSource) -> Release:
            return geometric([value], sensitivity=1, epsilon=eps, source=src)

        return Candidate(draw, Epsilon(epsilon=eps), WEIGHTS[EPS.index(eps)])

    return [run(e) for e in EPS]


@functools.lru_cache(maxsize=4)
def _draws(
    value: int, n: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """``n`` mixture releases (secure source): values, chosen index, interval half-widths."""
    values = np.empty(n, dtype=np.int64)
    chosen = np.empty(n, dtype=np.int64)
    half = np.empty(n, dtype=np.float64)
    cands = _candidates(value)
    for i in range(n):
        r = mixture(cands)
        values[i] = int(r.value[0])
        chosen[i] = r.chosen
        half[i] = r.half_width(LEVEL)
    return values, chosen, half


def _mixture_cdf(m: npt.ArrayLike, w0: float) -> npt.NDArray[np.float64]:
    return np.asarray(
        w0 * laplace_cdf(m, SCALES[0]) + (1 - w0) * laplace_cdf(m, SCALES[1]), dtype=np.float64
    )


# ----------------------------------------------------------------------------- distribution


def test_output_law_is_the_exact_mixture() -> None:
    # Honest: the noise Z = value − 41 against w₀·L(1/2) + w₁·L(4) (chi-square at 1e-7).
    values, _, _ = _draws(41, N)
    z = values - 41
    grid = np.arange(-60, 61, dtype=np.int64)
    w0 = float(WEIGHTS[0])
    edges = quantile_edges(_mixture_cdf(grid, w0), grid, N, 40)
    honest = chi2_binned(z, edges, _mixture_cdf, cdf_args=(w0,))
    assert not honest.rejected, str(honest)
    # Negative control: the same samples against swapped weights (2/3, 1/3). Measured
    # statistic ≈ 7400 against a threshold of 60 on 14 df (honest: 6 to 24).
    wrong = chi2_binned(z, edges, _mixture_cdf, cdf_args=(1 - w0,))
    assert wrong.rejected, str(wrong)


def test_choice_frequencies_are_the_weights() -> None:
    _, chosen, _ = _draws(41, N)
    counts = np.bincount(chosen, minlength=2)
    honest = chi2_counts(counts, [float(w) for w in WEIGHTS])
    assert not honest.rejected, str(honest)
    # Control: weights (2/5, 3/5), 1/15 off: measured statistic ≈ 535 against 28.4.
    wrong = chi2_counts(counts, [0.4, 0.6])
    assert wrong.rejected, str(wrong)


# ----------------------------------------------------------------------------- privacy


def _revealed(value: int) -> npt.NDArray[np.float64]:
    # The guarantee holds with the choice revealed: encode (choice, value) as one number
    # (|noise| < 500 except with probability e^-125), so threshold events can single out a
    # component's tail.
    values, chosen, _ = _draws(value, N)
    return values.astype(np.float64) + 1000.0 * chosen


def test_empirical_loss_is_within_the_max() -> None:
    # Neighbours 41 vs 42 (Δ = 1), choice revealed: the true loss is exactly max ε = 2.
    est = estimate_epsilon(_revealed(41), _revealed(42), alpha=ALPHA)
    assert est.passes(2.0), f"lower={est.lower:.4f} point={est.point:.4f}"


def test_control_charging_the_min_is_refuted() -> None:
    # A mixture charged min ε = 1/4 instead of the max: the same estimate refutes it.
    # Measured lower ≈ 1.73 (event 41 < x ≤ 42 of the ε = 2 component) against 0.25.
    est = estimate_epsilon(_revealed(41), _revealed(42), alpha=ALPHA)
    assert est.refutes(0.25), f"lower={est.lower:.4f} point={est.point:.4f}"


def test_control_charging_the_weighted_average_is_refuted() -> None:
    # A subtler wrong charge, the weighted mean Σ wᵢεᵢ = 5/6: refuted too (lower ≈ 1.73).
    est = estimate_epsilon(_revealed(41), _revealed(42), alpha=ALPHA)
    claimed = float(sum(w * e for w, e in zip(WEIGHTS, EPS, strict=True)))
    assert est.refutes(claimed), f"lower={est.lower:.4f} point={est.point:.4f}"


# zCDP: discrete Gaussian with ρ = 1/2 (σ² = 1) or ρ = 1/32 (σ² = 16), w.p. 1/2 each.
# The mixture is max ρ = 1/2-zCDP by joint quasi-convexity of Rényi divergence. The test is
# the one of test_mechanisms_privacy.py: a lower bound of sup_λ D_λ/λ over events, at 1e-7.
RHOS = (Fraction(1, 2), Fraction(1, 32))
RHO_WEIGHTS = (Fraction(1, 2), Fraction(1, 2))


@functools.lru_cache(maxsize=2)
def _gaussian_revealed(value: int, n: int) -> npt.NDArray[np.float64]:
    def cand(rho: Fraction, w: Fraction) -> Candidate:
        def draw(src: RandomSource) -> Release:
            return discrete_gaussian([value], sensitivity=1, rho=rho, source=src)

        return Candidate(draw, Rho(rho=rho), w)

    cands = [cand(r, w) for r, w in zip(RHOS, RHO_WEIGHTS, strict=True)]
    out = np.empty(n, dtype=np.float64)
    for i in range(n):
        r = mixture(cands)
        assert r.loss == Rho(rho=RHOS[0])
        out[i] = float(r.value[0]) + 1000.0 * r.chosen
    return out


def test_zcdp_mixture_within_the_max_rho() -> None:
    est = estimate_rho(_gaussian_revealed(41, N), _gaussian_revealed(42, N), alpha=ALPHA)
    assert est.passes(0.5), f"lower={est.lower:.4f} point={est.point:.4f}"
    # Control: charged the min, ρ = 1/32. Measured lower ≈ 0.17 (twice) against 0.031;
    # the honest claim 0.5 stays well above it.
    assert est.refutes(1 / 32), f"lower={est.lower:.4f} point={est.point:.4f}"


# ----------------------------------------------------------------------------- accuracy


def test_intervals_cover_at_the_level() -> None:
    # The reported interval (the chosen mechanism's) covers 41 with probability ≥ 0.9.
    values, chosen, half = _draws(41, N)
    hits = int((np.abs(values - 41) <= half).sum())
    assert not coverage_too_low(hits, N, LEVEL), hits / N
    # Control: the narrow component's half-width for every draw (as if the wide one never
    # ran): measured coverage 0.53 (honest: 0.925), far below 0.9.
    narrow = float(half[chosen == 0][0])
    hits = int((np.abs(values - 41) <= narrow).sum())
    assert coverage_too_low(hits, N, LEVEL), hits / N


def test_mean_square_error_is_the_mixtures() -> None:
    # E[Z²] = Σ wᵢ E[Zᵢ²] by median-of-means (false rejection ≤ 5.6e-8).
    values, _, _ = _draws(41, N)
    z2 = (values - 41).astype(np.float64) ** 2
    m = [laplace_moments(t) for t in SCALES]
    w = [float(x) for x in WEIGHTS]

    def target(w0: float) -> tuple[float, float]:
        ws = (w0, 1 - w0)
        mean = sum(wi * m2 for wi, (m2, _) in zip(ws, m, strict=True))
        fourth = sum(wi * (v4 + m2 * m2) for wi, (m2, v4) in zip(ws, m, strict=True))
        return mean, fourth - mean * mean

    honest = mom_check(z2, *target(w[0]))
    assert not honest.rejected, str(honest)
    # Control: swapped weights give E[Z²] ≈ 10.8 instead of 21.3 (measured 21.8 and
    # 22.2, bound ±6.4: the control passes only if the median block mean is 2 block-sd low).
    wrong = mom_check(z2, target(w[1])[0], target(w[0])[1])
    assert wrong.rejected, str(wrong)
