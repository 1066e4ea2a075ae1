"""BudgetFilter: behaviour, messages, and a 10⁴-sequence check against an exact model.

The model test drives the filter and an independent ``fractions.Fraction`` model with the
same random charge sequences (1/3, 0.1, 2⁻³⁰, 5e-324, just under / exactly / just over what is
left, in every cap kind) and requires that the filter accept exactly what the model accepts.
Its negative control runs the same harness against a float-arithmetic filter and requires
that the harness catch it.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Protocol

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deniable.accounting import BudgetFilter, Epsilon, EpsilonDelta, PrivacyLoss, Rho
from deniable.errors import BudgetExceeded, InvalidParameter

# ---------------------------------------------------------------- behaviour


def test_charge_within_cap_then_refuse_naming_what_is_left() -> None:
    budget = BudgetFilter(Epsilon(epsilon=1))
    assert budget.charge(Epsilon(epsilon=0.75)) == Epsilon(epsilon=0.75)
    with pytest.raises(BudgetExceeded) as info:
        budget.charge(Epsilon(epsilon=0.5))
    err = info.value
    assert err.requested == Epsilon(epsilon=0.5)
    assert err.remaining == Epsilon(epsilon=0.25)
    assert "0.25 is left" in str(err)
    assert "nothing was charged" in str(err)
    assert budget.spent == Epsilon(epsilon=0.75)
    assert budget.history == (Epsilon(epsilon=0.75),)


def test_exactly_the_remainder_is_accepted_and_then_nothing_more() -> None:
    budget = BudgetFilter(Epsilon(epsilon=1))
    for _ in range(3):
        budget.charge(Epsilon(epsilon=Fraction(1, 3)))
    assert budget.spent == Epsilon(epsilon=1)
    assert budget.remaining == Epsilon(epsilon=0)
    assert budget.can_charge(Epsilon(epsilon=0))
    assert not budget.can_charge(Epsilon(epsilon=5e-324))
    with pytest.raises(BudgetExceeded):
        budget.charge(Epsilon(epsilon=5e-324))


def test_float_sums_do_not_leak_budget() -> None:
    # In floats 0.1 + 0.2 > 0.3; exactly, the three charges 0.1, 0.2 fill Fraction(0.1)+... .
    cap = Epsilon(epsilon=Fraction(0.1) + Fraction(0.2))
    budget = BudgetFilter(cap)
    budget.charge(Epsilon(epsilon=0.1))
    budget.charge(Epsilon(epsilon=0.2))
    assert budget.remaining == Epsilon(epsilon=0)
    # 0.3 as a float is below the exact sum 0.1 + 0.2, so a cap of 0.3 refuses the pair.
    tight = BudgetFilter(Epsilon(epsilon=0.3))
    tight.charge(Epsilon(epsilon=0.1))
    with pytest.raises(BudgetExceeded):
        tight.charge(Epsilon(epsilon=0.2))


def test_message_shows_enough_digits_to_see_the_excess() -> None:
    budget = BudgetFilter(Epsilon(epsilon=Fraction(1, 3)))
    with pytest.raises(BudgetExceeded) as info:
        budget.charge(Epsilon(epsilon=Fraction(1, 3) + Fraction(1, 10**12)))
    text = str(info.value)
    assert "0.33333333333433" in text and "0.33333333333333" in text


def test_epsilon_delta_cap_is_component_wise() -> None:
    budget = BudgetFilter(EpsilonDelta(epsilon=1, delta=1e-6))
    budget.charge(Epsilon(epsilon=0.5))  # pure ε joins as (ε, 0)
    budget.charge(EpsilonDelta(epsilon=0.25, delta=1e-6))
    assert budget.spent == EpsilonDelta(epsilon=0.75, delta=1e-6)
    with pytest.raises(BudgetExceeded) as info:
        budget.charge(EpsilonDelta(epsilon=0.1, delta=1e-12))  # ε fits, δ does not
    assert info.value.remaining == EpsilonDelta(epsilon=0.25, delta=0)
    assert "δ = 0" in str(info.value)
    budget.charge(Epsilon(epsilon=0.25))
    assert budget.remaining == EpsilonDelta(epsilon=0, delta=0)


def test_rho_cap_converts_pure_epsilon() -> None:
    budget = BudgetFilter(Rho(rho=1))
    assert budget.charge(Epsilon(epsilon=1)) == Rho(rho=0.5)
    budget.charge(Rho(rho=0.25))
    budget.charge(EpsilonDelta(epsilon=Fraction(1, 2), delta=0))  # pure: 1/8
    assert budget.spent == Rho(rho=Fraction(7, 8))
    assert not budget.can_charge(Epsilon(epsilon=0.5 + 2**-40))
    assert budget.can_charge(Epsilon(epsilon=0.5))


@pytest.mark.parametrize(
    ("cap", "loss", "hint"),
    [
        (EpsilonDelta(epsilon=1, delta=1e-6), Rho(rho=0.01), "zcdp_to_approx"),
        (Epsilon(epsilon=1), Rho(rho=0.01), "pure"),
        (Epsilon(epsilon=1), EpsilonDelta(epsilon=0.1, delta=1e-9), "pure"),
        (Rho(rho=1), EpsilonDelta(epsilon=0.1, delta=1e-9), "does not imply ρ-zCDP"),
    ],
)
def test_incompatible_charges_are_refused_clearly(
    cap: PrivacyLoss, loss: PrivacyLoss, hint: str
) -> None:
    budget = BudgetFilter(cap)
    with pytest.raises(InvalidParameter, match=hint):
        budget.charge(loss)
    with pytest.raises(InvalidParameter, match=hint):
        budget.can_charge(loss)
    assert budget.history == ()
    assert budget.remaining == cap


def test_rebuild_from_stored_total_like_the_ledger() -> None:
    cap = EpsilonDelta(epsilon=2, delta=1e-6)
    first = BudgetFilter(cap)
    first.charge(EpsilonDelta(epsilon=Fraction(2, 3), delta=1e-7))
    again = BudgetFilter(cap, spent=first.spent)
    assert again.spent == first.spent and again.remaining == first.remaining
    assert again.history == ()
    over = BudgetFilter(Epsilon(epsilon=1), spent=Epsilon(epsilon=2))  # cap lowered later
    assert over.remaining == Epsilon(epsilon=0)
    assert not over.can_charge(Epsilon(epsilon=0))
    with pytest.raises(BudgetExceeded):
        over.charge(Epsilon(epsilon=0))
    with pytest.raises(InvalidParameter):
        BudgetFilter(Epsilon(epsilon=1), spent=Rho(rho=0.1))


def test_bad_caps_and_charges() -> None:
    with pytest.raises(InvalidParameter, match="cap"):
        BudgetFilter(1.0)  # type: ignore[arg-type]
    budget = BudgetFilter(Epsilon(epsilon=1))
    with pytest.raises(InvalidParameter, match="charge"):
        budget.charge(0.5)  # type: ignore[arg-type]
    assert repr(budget) == "BudgetFilter(cap=Epsilon(epsilon=1), spent=Epsilon(epsilon=0))"


def test_history_is_a_snapshot() -> None:
    budget = BudgetFilter(Epsilon(epsilon=1))
    budget.charge(Epsilon(epsilon=0.5))
    snapshot = budget.history
    budget.charge(Epsilon(epsilon=0.25))
    assert snapshot == (Epsilon(epsilon=0.5),)
    assert len(budget.history) == 2


# ---------------------------------------------------------------- the exact model

TINY = Fraction(2) ** -1074  # 5e-324
FIXED = (Fraction(1, 3), Fraction(0.1), Fraction(2) ** -30, TINY, Fraction(0))
CAPS = tuple(Fraction(x) for x in (1, Fraction(1, 3), 0.1, 2**-30, 5e-324, 10, 3.7, 1e300))
DELTA_CAPS = (Fraction(0), Fraction(1e-6), Fraction(1, 3), TINY, 1 - TINY)
KINDS = (Epsilon, EpsilonDelta, Rho)


class FilterLike(Protocol):
    def charge(self, loss: PrivacyLoss) -> object: ...
    def can_charge(self, loss: PrivacyLoss) -> bool: ...


@dataclass
class Model:
    """The specification, written independently of the filter: exact sums, ≤ per component."""

    kind: type
    cap: tuple[Fraction, ...]
    spent: list[Fraction] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.spent = [Fraction(0)] * len(self.cap)

    def amount(self, loss: PrivacyLoss) -> tuple[Fraction, ...] | None:
        """The charge in the cap's units, or None when the kinds are incompatible."""
        pure = None
        if isinstance(loss, Epsilon) or (isinstance(loss, EpsilonDelta) and loss.delta == 0):
            pure = loss.epsilon
        if self.kind is Epsilon:
            return (pure,) if pure is not None else None
        if self.kind is EpsilonDelta:
            if isinstance(loss, EpsilonDelta):
                return (loss.epsilon, loss.delta)
            return (pure, Fraction(0)) if pure is not None else None
        if isinstance(loss, Rho):
            return (loss.rho,)
        return (pure * pure / 2,) if pure is not None else None

    def left(self) -> list[Fraction]:
        return [c - s for c, s in zip(self.cap, self.spent, strict=True)]


def component_value(rng: random.Random, left: Fraction, *, below_one: bool) -> Fraction:
    """A charge component: a fixed awkward number, or one just around what is left."""
    r = max(left, Fraction(0))
    choice = rng.randrange(14)
    if choice < len(FIXED):
        value = FIXED[choice]
    elif choice == 5:
        value = r  # exactly the remainder
    elif choice == 6:
        value = max(r - TINY, Fraction(0))  # just under
    elif choice == 7:
        value = r + TINY  # just over
    elif choice == 8:
        value = r * (1 - Fraction(1, 2**52))
    elif choice == 9:
        value = r * (1 + Fraction(1, 2**52))
    elif choice == 10:
        value = Fraction(float(r))  # the nearest double: either side
    elif choice == 11:
        value = Fraction(math.nextafter(float(r), math.inf))
    elif choice == 12:
        value = Fraction(math.nextafter(float(r), 0.0))
    else:
        value = r / rng.choice([2, 3, 7, 10**6])
    if below_one and value >= 1:
        value = Fraction(1) - TINY
    return value


def random_charge(rng: random.Random, model: Model) -> PrivacyLoss:
    left = model.left()
    kind = model.kind if rng.random() < 0.7 else rng.choice(KINDS)
    if model.kind is Rho and kind is Epsilon:
        # "Exactly the remainder" in ε for a ρ cap is √(2·left): use doubles around it.
        root = math.sqrt(2 * float(max(left[0], Fraction(0))))
        eps = rng.choice(
            [
                Fraction(root),
                Fraction(math.nextafter(root, math.inf)),
                Fraction(math.nextafter(root, 0.0)),
                component_value(rng, left[0], below_one=False),
            ]
        )
        return Epsilon(epsilon=eps)
    first = component_value(rng, left[0], below_one=False)
    if kind is Epsilon:
        return Epsilon(epsilon=first)
    if kind is Rho:
        return Rho(rho=first)
    delta_left = left[1] if model.kind is EpsilonDelta else Fraction(0)
    delta = component_value(rng, delta_left, below_one=True) if rng.random() < 0.8 else 0
    return EpsilonDelta(epsilon=first, delta=delta)


def random_cap(rng: random.Random) -> PrivacyLoss:
    kind = rng.choice(KINDS)
    if kind is Epsilon:
        return Epsilon(epsilon=rng.choice(CAPS))
    if kind is Rho:
        return Rho(rho=rng.choice(CAPS))
    return EpsilonDelta(epsilon=rng.choice(CAPS), delta=rng.choice(DELTA_CAPS))


def run_model_check(
    make: type[FilterLike], *, sequences: int, seed: int, stop_at_first: bool = False
) -> tuple[int, list[str]]:
    """Drive ``make(cap)`` and the model with the same charges; return (charges, mismatches)."""
    rng = random.Random(seed)
    mismatches: list[str] = []
    charges = 0
    for s in range(sequences):
        cap = random_cap(rng)
        model = Model(type(cap), tuple(_values(cap)))
        subject = make(cap)  # type: ignore[call-arg]
        for _ in range(rng.randint(1, 6)):
            loss = random_charge(rng, model)
            charges += 1
            amount = model.amount(loss)
            if amount is None:
                try:
                    subject.charge(loss)
                    mismatches.append(f"seq {s}: accepted an incompatible {loss!r}")
                except InvalidParameter:
                    pass
                continue
            expect = all(
                sp + a <= c for sp, a, c in zip(model.spent, amount, model.cap, strict=True)
            )
            if subject.can_charge(loss) != expect:
                mismatches.append(f"seq {s}: can_charge({loss!r}) != {expect}")
            try:
                subject.charge(loss)
                accepted = True
            except BudgetExceeded:
                accepted = False
            if accepted != expect:
                mismatches.append(f"seq {s}: charge({loss!r}) accepted={accepted}")
            if expect:
                model.spent = [sp + a for sp, a in zip(model.spent, amount, strict=True)]
            if mismatches and stop_at_first:
                return charges, mismatches
        if isinstance(subject, BudgetFilter) and _values(subject.spent) != model.spent:
            mismatches.append(f"seq {s}: spent drifted from the model")
    return charges, mismatches


def _values(loss: PrivacyLoss) -> list[Fraction]:
    if isinstance(loss, Epsilon):
        return [loss.epsilon]
    if isinstance(loss, EpsilonDelta):
        return [loss.epsilon, loss.delta]
    return [loss.rho]


def test_filter_matches_exact_model_on_10k_random_sequences() -> None:
    start = time.perf_counter()
    charges, mismatches = run_model_check(BudgetFilter, sequences=10_000, seed=20240611)
    elapsed = time.perf_counter() - start
    assert mismatches == [], mismatches[:5]
    assert charges > 30_000  # about 3.5 charges per sequence
    assert elapsed < 30, f"model check took {elapsed:.1f}s"


def _float(x: Fraction) -> float:
    try:
        return float(x)
    except OverflowError:
        return math.inf


class FloatBudgetFilter:
    """Negative control: the same filter written with floats, as a naive implementation would."""

    def __init__(self, cap: PrivacyLoss) -> None:
        self.kind = type(cap)
        self.cap = [_float(v) for v in _values(cap)]
        self.spent = [0.0] * len(self.cap)

    def _amount(self, loss: PrivacyLoss) -> list[float]:
        model = Model(self.kind, tuple(Fraction(0) for _ in self.cap))
        amount = model.amount(loss)
        if amount is None:
            raise InvalidParameter("incompatible")
        return [_float(a) for a in amount]

    def can_charge(self, loss: PrivacyLoss) -> bool:
        amount = self._amount(loss)
        return all(s + a <= c for s, a, c in zip(self.spent, amount, self.cap, strict=True))

    def charge(self, loss: PrivacyLoss) -> object:
        if not self.can_charge(loss):
            raise BudgetExceeded("over", requested=loss, remaining=None)
        self.spent = [s + a for s, a in zip(self.spent, self._amount(loss), strict=True)]
        return loss


class StrictBudgetFilter(BudgetFilter):
    """Negative control: exact, but refuses a charge that lands exactly on the cap."""

    def _fits(self, total: tuple[Fraction, ...]) -> bool:
        return all(t < c or t == 0 for t, c in zip(total, self._cap_values, strict=True))


@pytest.mark.parametrize("broken", [FloatBudgetFilter, StrictBudgetFilter])
def test_negative_controls_are_caught(broken: type[FilterLike]) -> None:
    _, mismatches = run_model_check(broken, sequences=10_000, seed=20240611, stop_at_first=True)
    assert mismatches, f"the model check failed to catch {broken.__name__}"


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(st.integers(0, 2**32))
def test_filter_matches_model_hypothesis(seed: int) -> None:
    _, mismatches = run_model_check(BudgetFilter, sequences=3, seed=seed)
    assert mismatches == []


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(
    st.lists(st.integers(0, 10**6).map(lambda n: Fraction(n, 10**6)), max_size=20),
    st.integers(0, 3 * 10**6).map(lambda n: Fraction(n, 3 * 10**5)),
)
def test_refusal_changes_nothing(charges: list[Fraction], cap: Fraction) -> None:
    budget = BudgetFilter(Epsilon(epsilon=cap))
    for c in charges:
        before = (budget.spent, budget.remaining, budget.history)
        try:
            budget.charge(Epsilon(epsilon=c))
        except BudgetExceeded as err:
            assert (budget.spent, budget.remaining, budget.history) == before
            assert err.remaining == budget.remaining
    spent = budget.spent
    assert isinstance(spent, Epsilon) and spent.epsilon <= cap
