"""Empirical privacy of every mechanism on neighbouring inputs, with negative controls.

Each honest test runs a mechanism on two neighbouring inputs (counts 41 vs 42, sums that
differ by the clamp bound, score vectors whose entries move by at most Δ, flipped answers) and
computes :func:`deniable.audit.estimate_epsilon` (or ``estimate_rho`` for zCDP) at
``alpha = 1e-7``: a lower confidence bound that exceeds the true loss with probability at most
1e-7 (exact Clopper–Pearson bounds, Bonferroni over the tested events, events chosen on a
separate selection split). The test fails when that bound is above the claimed loss, so a
mechanism that keeps its promise fails with probability below 1e-7 < 1e-6 (one estimate per
test).

Each negative control feeds the *same* check a deliberately broken variant — twice the ε
(half the noise) or a sensitivity one short — while claiming the honest loss, and requires
it to be refuted. The comment on each control gives the margin measured while writing it:
the estimate sits many standard deviations above the claim, so the control cannot flake.

zCDP (discrete Gaussian, Gaussian on a grid) is not a single ε, so its test checks the claim
itself: ρ-zCDP bounds every Rényi divergence, ``D_λ ≤ ρλ``, and post-processing the output
into the indicator of an event cannot increase a Rényi divergence. So for every event,
``sup_λ D_λ(Bern(P[M(D)∈E]) ‖ Bern(P[M(D')∈E]))/λ ≤ ρ``; ``estimate_rho`` lower-bounds the
left side. This is the strongest statement about ρ that one event can refute (unlike a lossy
ρ → (ε, δ) conversion); on Gaussian noise threshold events recover about 80% of the true ρ.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pytest
from _mechanisms_support import exponential_draws

from deniable.audit import EmpiricalLoss, Event, estimate_epsilon, estimate_rho
from deniable.mechanisms import (
    coin_randomized_response,
    discrete_gaussian,
    gaussian,
    geometric,
    k_randomized_response,
    laplace,
    randomized_response,
)

pytestmark = pytest.mark.stats

ALPHA = 1e-7
N = 200_000

Sampler = Callable[[int], npt.NDArray[np.generic]]


def _audit(
    a: Sampler, b: Sampler, n: int, *, measure: str = "epsilon", events: list[Event] | None = None
) -> EmpiricalLoss:
    if measure == "rho":
        return estimate_rho(a(n), b(n), alpha=ALPHA, events=events)
    return estimate_epsilon(a(n), b(n), alpha=ALPHA, events=events)


def _singletons(k: int) -> list[Event]:
    def is_value(v: int) -> Callable[[npt.NDArray[np.float64]], npt.NDArray[np.bool_]]:
        return lambda x: x == v

    return [Event(f"x = {v}", is_value(v)) for v in range(k)]


def _explain(est: EmpiricalLoss) -> str:
    best = est.events[0] if est.events else None
    return f"lower={est.lower:.4f} point={est.point:.4f} best={best}"


# ----------------------------------------------------------------------------- geometric


def _geometric(value: int, sensitivity: int, epsilon: float) -> Sampler:
    return lambda n: geometric(np.full(n, value), sensitivity=sensitivity, epsilon=epsilon).value


def test_geometric_counts_41_vs_42() -> None:
    est = _audit(_geometric(41, 1, 1.0), _geometric(42, 1, 1.0), N)
    assert est.passes(1.0), _explain(est)


def test_geometric_counts_control_half_the_noise() -> None:
    # Run at 2ε, claim ε = 1: true loss 2; measured lower ≈ 1.96 (sd ≈ 0.01).
    est = _audit(_geometric(41, 1, 2.0), _geometric(42, 1, 2.0), N)
    assert est.refutes(1.0), _explain(est)


def test_geometric_sums_differing_by_the_clamp_bound() -> None:
    # A sum whose values are clamped to [0, 3]: neighbours differ by up to Δ = 3.
    est = _audit(_geometric(100, 3, 0.5), _geometric(103, 3, 0.5), N)
    assert est.passes(0.5), _explain(est)


def test_geometric_sums_control_sensitivity_off_by_one() -> None:
    # Calibrated for Δ − 1 = 2 while the sums differ by 3: true loss 0.75 against the claimed
    # 0.5; measured lower ≈ 0.72 (sd ≈ 0.01).
    est = _audit(_geometric(100, 2, 0.5), _geometric(103, 2, 0.5), N)
    assert est.refutes(0.5), _explain(est)


# ----------------------------------------------------------------------------- laplace (grid)


def _laplace(value: float, sensitivity: float, epsilon: float) -> Sampler:
    return lambda n: laplace(np.full(n, value), sensitivity=sensitivity, epsilon=epsilon).value


def test_laplace_grid_sums_differing_by_the_bound() -> None:
    # 0.1 and 2.6 are not on the grid: the rounding is part of what is tested. The events
    # are bins of the released reals (quantiles of the selection split) and thresholds.
    est = _audit(_laplace(0.1, 2.5, 1.0), _laplace(2.6, 2.5, 1.0), N)
    assert est.passes(1.0), _explain(est)


def test_laplace_grid_control_half_the_noise() -> None:
    # Run at 2ε, claim 1: true loss ≈ 2; measured lower ≈ 1.95.
    est = _audit(_laplace(0.1, 2.5, 2.0), _laplace(2.6, 2.5, 2.0), N)
    assert est.refutes(1.0), _explain(est)


def test_laplace_grid_control_sensitivity_off_by_one() -> None:
    # Calibrated for Δ = 1.5 while the sums differ by 2.5: true loss ≈ 1.67; lower ≈ 1.6.
    est = _audit(_laplace(0.1, 1.5, 1.0), _laplace(2.6, 1.5, 1.0), N)
    assert est.refutes(1.0), _explain(est)


# ----------------------------------------------------------------------------- Gaussian (zCDP)


def _dgauss(value: int, sensitivity: int, rho: float) -> Sampler:
    return lambda n: discrete_gaussian(np.full(n, value), sensitivity=sensitivity, rho=rho).value


def _gauss(value: float, sensitivity: float, rho: float) -> Sampler:
    return lambda n: gaussian(np.full(n, value), sensitivity=sensitivity, rho=rho).value


def test_discrete_gaussian_sums_differing_by_the_bound() -> None:
    est = _audit(_dgauss(40, 2, 0.125), _dgauss(42, 2, 0.125), N, measure="rho")
    assert est.passes(0.125), _explain(est)


def test_discrete_gaussian_control_half_the_noise() -> None:
    # Calibrated for Δ/2 = 1 (σ halved): true ρ = 0.5 against the claimed 0.125; measured
    # lower ≈ 0.34 (sd ≈ 0.008).
    est = _audit(_dgauss(40, 1, 0.125), _dgauss(42, 1, 0.125), N, measure="rho")
    assert est.refutes(0.125), _explain(est)


def test_discrete_gaussian_control_twice_rho() -> None:
    # Run at 2ρ, claim ρ: the subtler break (σ/√2). Measured lower ≈ 0.158 (sd ≈ 0.004)
    # against the claimed 0.125: eight standard deviations.
    est = _audit(_dgauss(40, 2, 0.25), _dgauss(42, 2, 0.25), N, measure="rho")
    assert est.refutes(0.125), _explain(est)


def test_gaussian_grid_sums_differing_by_the_bound() -> None:
    est = _audit(_gauss(0.1, 2.0, 0.125), _gauss(2.1, 2.0, 0.125), N, measure="rho")
    assert est.passes(0.125), _explain(est)


def test_gaussian_grid_control_half_the_noise() -> None:
    # σ halved (calibrated for Δ = 1 while the sums differ by 2): true ρ = 0.5; lower ≈ 0.33.
    est = _audit(_gauss(0.1, 1.0, 0.125), _gauss(2.1, 1.0, 0.125), N, measure="rho")
    assert est.refutes(0.125), _explain(est)


# ----------------------------------------------------------------------------- exponential

# Scores (0, 1, 2) and (1, 0, 1) are neighbours for Δ = 1 (each entry moves by at most 1).
# For permute-and-flip the exact law gives P[0] = 0.1468 vs 0.3989 at ε = 1: a log-ratio of
# exactly ε (the bound is tight), and exactly 2 at ε = 2. Outputs are indices, so the events
# are the three singletons, fixed in advance (no selection split needed).
EXP_N = 4000


def _exponential(scores: tuple[float, ...], epsilon: float) -> Sampler:
    def draw(n: int) -> npt.NDArray[np.int64]:
        return exponential_draws(scores, epsilon, n)

    return draw


def test_exponential_neighbouring_scores() -> None:
    est = _audit(
        _exponential((0, 1, 2), 1.0), _exponential((1, 0, 1), 1.0), EXP_N, events=_singletons(3)
    )
    assert est.passes(1.0), _explain(est)


def test_exponential_control_half_the_noise() -> None:
    # Run at 2ε, claim 1: true loss 2; lower ≈ 1.45 with ~220 hits of the rare index (the
    # log of a Poisson(220) count has sd 0.07, so the margin is over six sd).
    est = _audit(
        _exponential((0, 1, 2), 2.0), _exponential((1, 0, 1), 2.0), EXP_N, events=_singletons(3)
    )
    assert est.refutes(1.0), _explain(est)


# ----------------------------------------------------------------------------- randomized response

RR_N = 100_000
LN3 = math.log(3)


def _rr(bit: int, p: Fraction) -> Sampler:
    return lambda n: randomized_response(np.full(n, bit), p=p).value


def _coin(bit: int, q: Fraction) -> Sampler:
    return lambda n: coin_randomized_response(np.full(n, bit), q=q).value


def _krr(value: int, k: int, epsilon: float) -> Sampler:
    return lambda n: k_randomized_response(np.full(n, value), k=k, epsilon=epsilon).value


BITS = [Event("yes", lambda x: x == 1), Event("no", lambda x: x == 0)]


def test_randomized_response_flipped_answer() -> None:
    # p = 3/4 is ln 3-LDP, exactly tight: P[yes | 1]/P[yes | 0] = 3.
    est = _audit(_rr(1, Fraction(3, 4)), _rr(0, Fraction(3, 4)), RR_N, events=BITS)
    assert est.passes(LN3), _explain(est)


def test_randomized_response_control() -> None:
    # Truth w.p. 9/10 (ln 9 = 2.2) while claiming ln 3 = 1.1: lower ≈ 2.15.
    est = _audit(_rr(1, Fraction(9, 10)), _rr(0, Fraction(9, 10)), RR_N, events=BITS)
    assert est.refutes(LN3), _explain(est)


def test_coin_randomized_response_flipped_answer() -> None:
    # q = 1/2: P[yes | 1] = 3/4, P[yes | 0] = 1/4, ε = ln 3 exactly.
    est = _audit(_coin(1, Fraction(1, 2)), _coin(0, Fraction(1, 2)), RR_N, events=BITS)
    assert est.passes(LN3), _explain(est)


def test_coin_randomized_response_control() -> None:
    # q = 4/5 gives ln 9 while ln 3 is claimed: lower ≈ 2.15.
    est = _audit(_coin(1, Fraction(4, 5)), _coin(0, Fraction(4, 5)), RR_N, events=BITS)
    assert est.refutes(LN3), _explain(est)


def test_k_randomized_response_changed_answer() -> None:
    # k = 4, ε = 1: the ratio P[0 | 0]/P[0 | 1] is e^ε (up to the safe rounding of p).
    est = _audit(_krr(0, 4, 1.0), _krr(1, 4, 1.0), RR_N, events=_singletons(4))
    assert est.passes(1.0), _explain(est)


def test_k_randomized_response_control() -> None:
    # Run at 2ε, claim 1: lower ≈ 1.9.
    est = _audit(_krr(0, 4, 2.0), _krr(1, 4, 2.0), RR_N, events=_singletons(4))
    assert est.refutes(1.0), _explain(est)


# ----------------------------------------------------------------------------- slow


@pytest.mark.slow
@pytest.mark.parametrize(("sensitivity", "epsilon"), [(1, 0.1), (1, 5.0), (7, 1.0), (50, 2.0)])
def test_geometric_many_scales(sensitivity: int, epsilon: float) -> None:
    a, b = (
        _geometric(1000, sensitivity, epsilon),
        _geometric(1000 + sensitivity, sensitivity, epsilon),
    )
    est = _audit(a, b, 2_000_000)
    assert est.passes(epsilon), _explain(est)
    broken_a = _geometric(1000, sensitivity, 2 * epsilon)
    broken_b = _geometric(1000 + sensitivity, sensitivity, 2 * epsilon)
    est = _audit(broken_a, broken_b, 2_000_000)
    assert est.refutes(epsilon), _explain(est)


@pytest.mark.slow
def test_gaussian_grid_control_twice_rho_large_n() -> None:
    est = _audit(_gauss(0.1, 2.0, 0.25), _gauss(2.1, 2.0, 0.25), 2_000_000, measure="rho")
    assert est.refutes(0.125), _explain(est)


@pytest.mark.slow
def test_exponential_five_candidates() -> None:
    # Larger candidate set; neighbours move every score by at most Δ = 1.
    a, b = (0, 2, 1, 3, 3), (1, 1, 2, 2, 4)
    est = _audit(_exponential(a, 1.0), _exponential(b, 1.0), 30_000, events=_singletons(5))
    assert est.passes(1.0), _explain(est)
    est = _audit(_exponential(a, 2.0), _exponential(b, 2.0), 30_000, events=_singletons(5))
    assert est.refutes(1.0), _explain(est)
