"""Tight composition through dp_accounting, and our own formulas checked against it.

Each comparison has a direction that catches an unsafe formula: our closed forms are valid
upper bounds, so they must never be *below* dp_accounting's (near-)exact answers, and must
not be wildly above them either (that would catch a formula that is safe but wrong).
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

pld_lib = pytest.importorskip("dp_accounting.pld.privacy_loss_distribution")
dp_accounting = pytest.importorskip("dp_accounting")

from deniable.accounting import (  # noqa: E402 - after the importorskip guards
    DiscreteLaplaceEvent,
    Epsilon,
    EpsilonDelta,
    GaussianEvent,
    LaplaceEvent,
    Rho,
    advanced_composition,
    amplify_bernoulli,
    compose,
    compose_pld,
    zcdp_to_approx,
)
from deniable.accounting.pld import PldItem  # noqa: E402
from deniable.errors import InvalidParameter  # noqa: E402


def test_k_fold_laplace_is_below_the_sum_and_advanced_composition() -> None:
    k, eps, delta = 100, Fraction(1, 10), Fraction(1, 10**6)
    tight = compose_pld([LaplaceEvent(scale=10, sensitivity=1)] * k, delta=delta)
    assert tight.delta == delta
    plain = compose([Epsilon(epsilon=eps)] * k)
    advanced = advanced_composition(Epsilon(epsilon=eps), k=k, delta_slack=delta)
    assert tight.epsilon < plain.epsilon
    assert tight.epsilon < advanced.epsilon
    # ... but not below what a single tail event forces: the PLD ε of 100 Laplace(10)
    # is about 4.69 (dp_accounting's own figure at this discretisation).
    assert 4.5 < float(tight.epsilon) < 4.8


def test_generic_pure_losses_compose_like_their_worst_case_pld() -> None:
    out = compose_pld([Epsilon(epsilon=0.1)] * 100, delta=1e-6)
    assert 4.5 < float(out.epsilon) < 10
    # A sum that already fits is never beaten by a worse PLD figure.
    few = compose_pld([Epsilon(epsilon=0.5), Epsilon(epsilon=0.25)], delta=1e-9)
    assert few.epsilon <= Fraction(3, 4)


def test_heterogeneous_mix() -> None:
    items: list[PldItem] = []
    items += [GaussianEvent(sigma=10, sensitivity=1)] * 10
    items += [DiscreteLaplaceEvent(scale=5, sensitivity=2)] * 5
    items += [EpsilonDelta(epsilon=0.3, delta=1e-8), LaplaceEvent(scale=2, sensitivity=0.5)]
    out = compose_pld(items, delta=1e-6)
    # Gaussian part alone is ρ = 10·1/200 = 0.05-zCDP; the Laplace parts are 2 + 0.3 + 0.25.
    loose = zcdp_to_approx(Rho(rho=0.05), delta=1e-7).epsilon + Fraction(255, 100)
    assert 0 < out.epsilon < loose


def test_result_is_at_least_dp_accounting_and_rounded_up() -> None:
    k, scale = 50, 7
    out = compose_pld([LaplaceEvent(scale=scale, sensitivity=1)] * k, delta=1e-5)
    raw = pld_lib.from_laplace_mechanism(parameter=scale).self_compose(k)
    assert out.epsilon >= Fraction(raw.get_epsilon_for_delta(1e-5))


def test_zcdp_conversion_is_safe_against_dp_accounting_for_gaussian() -> None:
    # A Gaussian with σ (sensitivity 1) is 1/(2σ²)-zCDP. Our ρ → (ε, δ) conversion must be a
    # valid bound: never below dp_accounting's tighter RDP and PLD figures for that Gaussian,
    # and not far above them (ρ + 2√(ρ ln 1/δ) is within ~35% of RDP at these settings).
    for sigma in (1.0, 5.0, 20.0):
        for delta in (1e-5, 1e-9):
            ours = float(
                zcdp_to_approx(
                    Rho(rho=Fraction(1) / (2 * Fraction(sigma) ** 2)), delta=delta
                ).epsilon
            )
            rdp = dp_accounting.rdp.RdpAccountant()
            rdp.compose(dp_accounting.GaussianDpEvent(sigma))
            pld = dp_accounting.pld.PLDAccountant()
            pld.compose(dp_accounting.GaussianDpEvent(sigma))
            assert ours >= rdp.get_epsilon(delta) >= pld.get_epsilon(delta) * (1 - 1e-9)
            assert ours <= 1.35 * rdp.get_epsilon(delta)


@pytest.mark.parametrize(("eps", "beta"), [(1.0, 0.1), (0.5, 0.5), (2.0, 0.01), (0.1, 0.9)])
def test_amplification_matches_poisson_sampled_laplace(eps: float, beta: float) -> None:
    # For Laplace noise the Li–Qardaji–Su bound is attained: the privacy loss of the
    # Poisson-subsampled Laplace mechanism peaks at ln(1 + β(e^ε − 1)). dp_accounting's PLD
    # at δ = 0 is that maximum, rounded up to its 1e-4 grid.
    ours = float(amplify_bernoulli(Epsilon(epsilon=eps), beta).epsilon)
    theirs = pld_lib.from_laplace_mechanism(
        parameter=1 / eps, sampling_prob=beta
    ).get_epsilon_for_delta(0)
    assert ours <= theirs + 1e-12  # ours is not looser than the truth...
    assert theirs - ours <= 2e-4  # ...and not tighter than it (a wrong formula is caught)


def test_bad_inputs() -> None:
    with pytest.raises(InvalidParameter, match="GaussianEvent"):
        compose_pld([Rho(rho=0.1)], delta=1e-6)  # type: ignore[list-item]
    with pytest.raises(InvalidParameter, match="compose_pld takes"):
        compose_pld([0.5], delta=1e-6)  # type: ignore[list-item]
    with pytest.raises(InvalidParameter, match="delta"):
        compose_pld([Epsilon(epsilon=1)], delta=1)
    with pytest.raises(InvalidParameter, match="discretization"):
        compose_pld([Epsilon(epsilon=1)], delta=1e-6, discretization=0)
    with pytest.raises(InvalidParameter, match="larger delta"):
        compose_pld([GaussianEvent(sigma=1, sensitivity=1)], delta=0)
    with pytest.raises(InvalidParameter, match="scale"):
        LaplaceEvent(scale=0, sensitivity=1)
    with pytest.raises(InvalidParameter, match="integer"):
        DiscreteLaplaceEvent(scale=1, sensitivity=1.5)  # type: ignore[arg-type]


def test_edges() -> None:
    assert compose_pld([], delta=1e-6) == EpsilonDelta(epsilon=0, delta=1e-6)
    assert compose_pld([Epsilon(epsilon=0)] * 5, delta=0) == EpsilonDelta(epsilon=0, delta=0)
    pure = compose_pld([Epsilon(epsilon=1)], delta=0)
    assert pure == EpsilonDelta(epsilon=1, delta=0)
    huge = compose_pld([Epsilon(epsilon=10**300)], delta=1e-6)  # too big for floats
    assert huge.epsilon == 10**300
    assert math.isfinite(
        float(compose_pld([LaplaceEvent(scale=1, sensitivity=1)], delta=0).epsilon)
    )
