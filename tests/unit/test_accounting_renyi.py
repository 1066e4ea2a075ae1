"""The zCDP and Rényi filters: conversions, admission rules, and a property test against
``dp_accounting``'s RDP accountant.

The property test drives :class:`ZCDPFilter` with random caps, δ splits and charge sequences
(ρ, pure ε, and (ε, δ) charges), then recomputes the guarantee of everything it admitted
independently: ``dp_accounting``'s :class:`RdpAccountant` composes the admitted ρ's (the ε
charges as ``ε²/2``-zCDP events) and converts at the conversion δ on a fine grid of orders;
the δ-charges must fit the δ pool exactly. The negative control runs the same check on a
filter whose ρ cap is 2 % too large (and one that converts at the whole δ while also spending
δ on charges) and requires that the check catch both.
"""

from __future__ import annotations

import math
import time
from fractions import Fraction

import numpy as np
import pytest
from dp_accounting import ZCDpEvent
from dp_accounting.rdp.rdp_privacy_accountant import RdpAccountant
from hypothesis import given, settings
from hypothesis import strategies as st

from deniable.accounting import BudgetFilter, Epsilon, EpsilonDelta, PrivacyLoss, Rho
from deniable.accounting.conversions import zcdp_epsilon_upper
from deniable.accounting.renyi import (
    RenyiFilter,
    ZCDPAccountant,
    ZCDPFilter,
    ZCDPSpent,
    rdp_loss,
    zcdp_charge,
    zcdp_epsilon,
    zcdp_rho_cap,
)
from deniable.errors import BudgetExceeded, InvalidParameter

# A fine grid of orders so that dp_accounting's conversion is within ~1e-6 of the optimum.
_ORDERS = [float(a) for a in 1 + np.exp(np.linspace(math.log(1e-3), math.log(1e6), 6000))]
_TOLERANCE = 1e-5  # relative: the grid's gap to the optimal order, far below the 2 % control


def _independent_epsilon(admitted: list[PrivacyLoss], delta: float) -> float:
    """The ε that dp_accounting's RDP accountant gives the admitted ρ's at ``delta``."""
    acc = RdpAccountant(orders=_ORDERS)
    for loss in admitted:
        if isinstance(loss, Rho):
            rho = float(loss.rho)
        else:
            assert isinstance(loss, Epsilon | EpsilonDelta)
            rho = float(loss.epsilon) ** 2 / 2
        acc.compose(ZCDpEvent(rho))
    return float(acc.get_epsilon(delta))


def _check_admitted(
    admitted: list[PrivacyLoss], cap: EpsilonDelta, share: Fraction
) -> tuple[bool, str]:
    """Whether the admitted sequence is within ``cap``, computed without the filter."""
    pool = cap.delta * share
    delta_spent = sum((x.delta for x in admitted if isinstance(x, EpsilonDelta)), start=Fraction(0))
    if delta_spent > pool:
        return False, f"δ-charges {float(delta_spent)} exceed the pool {float(pool)}"
    if not any(
        (isinstance(x, Rho) and x.rho > 0) or (not isinstance(x, Rho) and x.epsilon > 0)
        for x in admitted
    ):
        return True, ""
    eps = _independent_epsilon(admitted, float(cap.delta - pool))
    ok = eps <= float(cap.epsilon) * (1 + _TOLERANCE)
    return ok, f"ε = {eps} at δ_conv for cap ε = {float(cap.epsilon)}"


def _fill(budget: ZCDPFilter, charges: list[PrivacyLoss]) -> list[PrivacyLoss]:
    admitted = []
    for loss in charges:
        if budget.can_charge(loss):
            budget.charge(loss)
            admitted.append(loss)
        else:
            with pytest.raises(BudgetExceeded):
                budget.charge(loss)
    return admitted


# ---------------------------------------------------------------- conversions


def test_rho_cap_converts_within_the_cap_and_is_tight() -> None:
    for eps, delta in [(1, 1e-6), (0.1, 1e-6), (1, 1e-9), (5, 1e-5), (0.01, 1e-10)]:
        rho = zcdp_rho_cap(eps, delta)
        assert zcdp_epsilon(rho, delta) <= Fraction(repr(float(eps))) * (1 + Fraction(1, 10**12))
        # Tight: dp_accounting's optimum over a fine grid of orders allows at most 1e-5 more.
        acc = RdpAccountant(orders=_ORDERS)
        acc.compose(ZCDpEvent(float(rho) * (1 + 1e-4)))
        assert acc.get_epsilon(delta) > eps


def test_tighter_than_bun_steinke_and_never_below_the_rdp_bound() -> None:
    rho, delta = Fraction(1, 50), Fraction(1, 10**6)
    ours = zcdp_epsilon(rho, delta)
    assert ours < zcdp_epsilon_upper(rho, delta)
    acc = RdpAccountant(orders=_ORDERS)
    acc.compose(ZCDpEvent(float(rho)))
    assert float(ours) >= acc.get_epsilon(float(delta)) * (1 - 1e-6)


def test_conversion_inputs_are_validated() -> None:
    with pytest.raises(InvalidParameter):
        zcdp_epsilon(1, 0)
    with pytest.raises(InvalidParameter):
        zcdp_rho_cap(1, 1)
    assert zcdp_epsilon(0, 1e-6) == 0
    assert zcdp_rho_cap(0, 1e-6) == 0


def test_charges_count_as_the_theorems_say() -> None:
    assert zcdp_charge(Rho(rho=0.25)) == ZCDPSpent(rho=Fraction(1, 4))
    assert zcdp_charge(Epsilon(epsilon=1)) == ZCDPSpent(rho=Fraction(1, 2))
    assert zcdp_charge(EpsilonDelta(epsilon=1, delta=1e-7)) == ZCDPSpent(
        rho=Fraction(1, 2), delta=Fraction(1, 10**7)
    )


# ---------------------------------------------------------------- the zCDP filter


def test_gaussian_answers_fit_far_more_than_with_plain_addition() -> None:
    cap = EpsilonDelta(epsilon=1, delta=1e-6)
    budget = ZCDPFilter(cap, delta_share=0)
    per = Rho(rho=Fraction(1, 2000))  # σ ≈ 31.6 for a count
    n = 0
    while budget.can_charge(per):
        budget.charge(per)
        n += 1
    assert n == int(budget.rho_max / per.rho)
    # Plain addition with δ split equally: each answer pays (ε(ρ, 10⁻⁶/k), 10⁻⁶/k).
    k = 1
    while k * zcdp_epsilon_upper(per.rho, cap.delta / (k + 1)) <= 1:
        k += 1
    assert n >= 3 * k


def test_refusal_changes_nothing_and_names_what_is_left() -> None:
    budget = ZCDPFilter(EpsilonDelta(epsilon=1, delta=1e-6))
    budget.charge(Rho(rho=Fraction(1, 100)))
    before = budget.used
    with pytest.raises(BudgetExceeded) as info:
        budget.charge(Rho(rho=Fraction(1, 50)))
    assert budget.used == before
    assert info.value.requested == Rho(rho=Fraction(1, 50))
    assert info.value.remaining == budget.remaining_rho
    assert "nothing was charged" in str(info.value)
    assert budget.history == (Rho(rho=Fraction(1, 100)),)


def test_delta_charges_spend_the_pool_only() -> None:
    cap = EpsilonDelta(epsilon=1, delta=Fraction(1, 10**6))
    budget = ZCDPFilter(cap, delta_share=Fraction(1, 4))
    assert budget.delta_pool == Fraction(1, 4 * 10**6)
    assert budget.conversion_delta == Fraction(3, 4 * 10**6)
    small = EpsilonDelta(epsilon=Fraction(1, 100), delta=Fraction(1, 10**7))
    budget.charge(small)
    budget.charge(small)
    assert not budget.can_charge(small)  # 3e-7 > 2.5e-7
    assert budget.can_charge(EpsilonDelta(epsilon=Fraction(1, 100), delta=Fraction(1, 2 * 10**7)))
    # With no pool, any δ > 0 is refused.
    assert not ZCDPFilter(cap, delta_share=0).can_charge(small)


def test_remaining_is_a_charge_that_fits_exactly() -> None:
    budget = ZCDPFilter(EpsilonDelta(epsilon=1, delta=1e-6))
    budget.charge(Rho(rho=Fraction(1, 200)))
    left = budget.remaining
    assert budget.can_charge(left)
    bigger = EpsilonDelta(epsilon=left.epsilon * (1 + Fraction(1, 10**9)), delta=left.delta)
    assert not budget.can_charge(bigger)
    spent = budget.spent
    assert spent.delta == budget.conversion_delta
    assert 0 < spent.epsilon <= 1


def test_spent_guarantee_at_the_cap_equals_the_cap() -> None:
    cap = EpsilonDelta(epsilon=1, delta=1e-6)
    budget = ZCDPFilter(cap, delta_share=0)
    budget.charge(Rho(rho=budget.rho_max))
    assert budget.spent == EpsilonDelta(epsilon=1, delta=1e-6)
    assert budget.remaining_rho == Rho(rho=0)


def test_bad_caps_and_shares_are_refused() -> None:
    with pytest.raises(InvalidParameter):
        ZCDPFilter(EpsilonDelta(epsilon=1, delta=0))
    with pytest.raises(InvalidParameter):
        ZCDPFilter(Epsilon(epsilon=1))  # type: ignore[arg-type]
    with pytest.raises(InvalidParameter):
        ZCDPFilter(EpsilonDelta(epsilon=1, delta=1e-6), delta_share=1)
    with pytest.raises(InvalidParameter):
        ZCDPAccountant.parse("rényi")
    assert ZCDPAccountant.parse(ZCDPAccountant(delta_share=Fraction(1, 3)).spec) == (
        ZCDPAccountant(delta_share=Fraction(1, 3))
    )


def test_admission_decision_is_fast() -> None:
    budget = ZCDPFilter(EpsilonDelta(epsilon=1, delta=1e-6))
    per = Rho(rho=Fraction(1, 10**7))
    start = time.perf_counter()
    for _ in range(2000):
        budget.charge(per)
    assert (time.perf_counter() - start) / 2000 < 1e-3


# ---------------------------------------------------------------- property test

_charge = st.one_of(
    st.fractions(min_value=0, max_value=Fraction(1, 20), max_denominator=10**6).map(
        lambda r: Rho(rho=r)
    ),
    st.fractions(min_value=0, max_value=Fraction(1, 4), max_denominator=10**4).map(
        lambda e: Epsilon(epsilon=e)
    ),
    st.tuples(
        st.fractions(min_value=0, max_value=Fraction(1, 4), max_denominator=10**4),
        st.sampled_from([Fraction(0), Fraction(1, 10**8), Fraction(1, 10**7), Fraction(3, 10**7)]),
    ).map(lambda p: EpsilonDelta(epsilon=p[0], delta=p[1])),
)


@settings(max_examples=150, deadline=None)
@given(
    epsilon=st.sampled_from([Fraction(1, 10), Fraction(1, 2), Fraction(1), Fraction(3)]),
    delta=st.sampled_from([Fraction(1, 10**9), Fraction(1, 10**6), Fraction(1, 10**4)]),
    share=st.sampled_from([Fraction(0), Fraction(1, 4), Fraction(1, 2), Fraction(9, 10)]),
    charges=st.lists(_charge, min_size=1, max_size=60),
)
def test_never_admits_beyond_the_cap(
    epsilon: Fraction, delta: Fraction, share: Fraction, charges: list[PrivacyLoss]
) -> None:
    cap = EpsilonDelta(epsilon=epsilon, delta=delta)
    budget = ZCDPFilter(cap, delta_share=share)
    admitted = _fill(budget, charges)
    ok, why = _check_admitted(admitted, cap, share)
    assert ok, why
    # And the filter refused only what did not fit: exact sums, recomputed here.
    total = sum((zcdp_charge(x) for x in admitted), start=ZCDPSpent())
    assert total == budget.used


class _TooGenerous(ZCDPFilter):
    """Negative control: a ρ cap 2 % above the certified one."""

    @property
    def rho_max(self) -> Fraction:
        return super().rho_max * Fraction(102, 100)

    def _fits(self, total: ZCDPSpent) -> bool:
        return total.rho <= self.rho_max and total.delta <= self.delta_pool


class _DoubleSpendsDelta(ZCDPFilter):
    """Negative control: converts at the whole δ while δ-charges also spend the pool."""

    def __init__(self, cap: EpsilonDelta, *, delta_share: Fraction) -> None:
        super().__init__(cap, delta_share=delta_share)
        self._rho_max = zcdp_rho_cap(cap.epsilon, cap.delta)


@pytest.mark.parametrize("broken", [_TooGenerous, _DoubleSpendsDelta])
def test_negative_controls_are_caught(broken: type[ZCDPFilter]) -> None:
    cap = EpsilonDelta(epsilon=1, delta=Fraction(1, 10**6))
    share = Fraction(1, 2)
    charges: list[PrivacyLoss] = [Rho(rho=Fraction(1, 100_000))] * 3000
    admitted = _fill(broken(cap, delta_share=share), charges)
    assert not _check_admitted(admitted, cap, share)[0]
    # The same harness passes the real filter on the same sequence.
    assert _check_admitted(_fill(ZCDPFilter(cap, delta_share=share), charges), cap, share)[0]


# ---------------------------------------------------------------- the Rényi filter


def test_renyi_filter_at_one_order() -> None:
    f = RenyiFilter(alpha=8, bound=2)
    assert f.charge(Rho(rho=Fraction(1, 8))) == 1
    assert f.charge(Epsilon(epsilon=1)) == 1  # min(ε, αε²/2) = min(1, 4)
    assert not f.can_charge(Rho(rho=Fraction(1, 1000)))
    with pytest.raises(BudgetExceeded):
        f.charge(Rho(rho=Fraction(1, 1000)))
    assert f.spent == 2
    with pytest.raises(InvalidParameter):
        rdp_loss(EpsilonDelta(epsilon=1, delta=1e-6), 2)
    with pytest.raises(InvalidParameter):
        RenyiFilter(alpha=1, bound=1)
    # (α, B)-RDP → (ε, δ): agrees with dp_accounting's conversion at that single order.
    acc = RdpAccountant(orders=[8.0])
    acc.compose(ZCDpEvent(2 / 8))
    assert float(f.epsilon(1e-6)) == pytest.approx(acc.get_epsilon(1e-6), rel=1e-12)
    assert float(f.epsilon(1e-6)) >= acc.get_epsilon(1e-6)


def test_basic_filter_still_refuses_rho_against_an_epsilon_delta_cap() -> None:
    with pytest.raises(InvalidParameter):
        BudgetFilter(EpsilonDelta(epsilon=1, delta=1e-6)).charge(Rho(rho=0.01))
