"""BudgetFilter: behaviour, messages, and a 10⁴-sequence check against an exact model.

The model test drives the filter and an independent ``fractions.Fraction`` model with the
same random charge sequences (1/3, 0.1, 2⁻³⁰, 5e-324, just under / exactly / just over what is
left, in every cap kind) and requires that the filter accept exactly what the model accepts.
Caps and charges are given partly as Python floats; the model reads a float itself, as the
shortest decimal that prints as it (``Fraction(repr(x))``: ``0.1`` is 1/10), which is the
reading the library promises. Its negative controls run the same harness against a
float-arithmetic filter, a filter that refuses landing exactly on the cap, and losses that read
floats as their binary values, and require that the harness catch each.
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

import deniable.accounting.loss as loss_module
from deniable.accounting import BudgetFilter, Epsilon, EpsilonDelta, PrivacyLoss, Rho
from deniable.errors import BudgetExceeded, InvalidParameter

Raw = Fraction | int | float  # a privacy parameter as a caller gives it


def read(x: Raw) -> Fraction:
    """The exact value a privacy parameter denotes: a float is the decimal it prints as."""
    return Fraction(repr(x)) if isinstance(x, float) else Fraction(x)


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


def test_ten_charges_of_a_tenth_exactly_exhaust_a_cap_of_one() -> None:
    # 0.1 is read as 1/10 exactly (not the double just above it), so ten fit a cap of 1 ...
    budget = BudgetFilter(Epsilon(epsilon=1))
    for _ in range(10):
        budget.charge(Epsilon(epsilon=0.1))
    assert budget.spent == Epsilon(epsilon=1)
    assert budget.remaining == Epsilon(epsilon=0)
    # ... and an eleventh is refused, changing nothing.
    assert not budget.can_charge(Epsilon(epsilon=0.1))
    with pytest.raises(BudgetExceeded) as info:
        budget.charge(Epsilon(epsilon=0.1))
    assert info.value.remaining == Epsilon(epsilon=0)
    assert budget.spent == Epsilon(epsilon=1)
    assert len(budget.history) == 10


def test_float_sums_do_not_leak_budget() -> None:
    # In floats ten 0.1s add up to 0.9999999999999999, leaving 1.1e-16 of a cap of 1; the exact
    # sum is 1, so not even the smallest positive charge fits afterwards.
    assert sum([0.1] * 10) < 1.0
    budget = BudgetFilter(Epsilon(epsilon=1))
    for _ in range(10):
        budget.charge(Epsilon(epsilon=0.1))
    for crumb in (1e-16, 5e-324):
        assert not budget.can_charge(Epsilon(epsilon=crumb))
        with pytest.raises(BudgetExceeded):
            budget.charge(Epsilon(epsilon=crumb))
    assert budget.spent == Epsilon(epsilon=1)
    # In floats 0.1 + 0.2 = 0.30000000000000004 > 0.3; exactly, 1/10 + 2/10 fills a cap of 0.3
    # and nothing more fits.
    assert 0.1 + 0.2 > 0.3
    tight = BudgetFilter(Epsilon(epsilon=0.3))
    tight.charge(Epsilon(epsilon=0.1))
    tight.charge(Epsilon(epsilon=0.2))
    assert tight.remaining == Epsilon(epsilon=0)
    with pytest.raises(BudgetExceeded):
        tight.charge(Epsilon(epsilon=5e-324))
    # The same holds for δ and ρ.
    approx = BudgetFilter(EpsilonDelta(epsilon=1, delta=3e-6))
    for _ in range(3):
        approx.charge(EpsilonDelta(epsilon=0.1, delta=1e-6))
    assert approx.remaining == EpsilonDelta(epsilon=Fraction(7, 10), delta=0)
    assert not approx.can_charge(EpsilonDelta(epsilon=0.1, delta=5e-324))
    rho = BudgetFilter(Rho(rho=0.3))
    rho.charge(Rho(rho=0.1))
    rho.charge(Rho(rho=0.2))
    assert rho.remaining == Rho(rho=0)


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

TINY = Fraction(2) ** -1074  # the smallest double, exactly (the float 5e-324 reads as 5/10^324)
# Fixed awkward charges: exact values and floats (read as decimals by the model), so sums of
# 0.1, 0.2, 0.3, 0.7 land exactly on decimal caps such as 1 and 0.3.
FIXED: tuple[Raw, ...] = (Fraction(1, 3), 0.1, Fraction(2) ** -30, TINY, Fraction(0))
FIXED_FLOATS: tuple[Raw, ...] = (0.1, 0.2, 0.3, 0.7, 2**-30, 5e-324, 1e-16)
CAPS: tuple[Raw, ...] = (1, Fraction(1, 3), 0.1, 0.3, 2**-30, 5e-324, TINY, 10, 3.7, 1e300)
DELTA_CAPS: tuple[Raw, ...] = (0, 1e-6, 3e-6, Fraction(1, 3), TINY, 5e-324, 1 - TINY)
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
        return self.amount_of(type(loss), tuple(_values(loss)))

    def amount_of(self, kind: type, values: tuple[Fraction, ...]) -> tuple[Fraction, ...] | None:
        """The charge of a ``kind`` loss with exact components ``values``, in the cap's units."""
        pure = None
        if kind is Epsilon or (kind is EpsilonDelta and values[1] == 0):
            pure = values[0]
        if self.kind is Epsilon:
            return (pure,) if pure is not None else None
        if self.kind is EpsilonDelta:
            if kind is EpsilonDelta:
                return values
            return (pure, Fraction(0)) if pure is not None else None
        if kind is Rho:
            return values
        return (pure * pure / 2,) if pure is not None else None

    def left(self) -> list[Fraction]:
        return [c - s for c, s in zip(self.cap, self.spent, strict=True)]


def component_value(rng: random.Random, left: Fraction, *, below_one: bool) -> Raw:
    """A charge component: a fixed awkward number, or one just around what is left.

    Floats among them are read by the model as the decimals they print as.
    """
    r = max(left, Fraction(0))
    choice = rng.randrange(16)
    value: Raw
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
        value = Fraction(float(r))  # the nearest double, exactly: either side
    elif choice == 11:
        value = _float(r)  # the same double as a float: its decimal reading, either side
    elif choice == 12:
        value = math.nextafter(_float(r), math.inf)
    elif choice == 13:
        value = math.nextafter(_float(r), 0.0)
    elif choice == 14:
        value = rng.choice(FIXED_FLOATS)
    else:
        value = r / rng.choice([2, 3, 7, 10**6])
    if below_one and read(value) >= 1:
        value = Fraction(1) - TINY
    return value


Charge = tuple[type, tuple[Raw, ...]]  # a loss kind and its components as given


def build(charge: Charge) -> PrivacyLoss:
    """The library's loss for ``charge``, built from the components as given (floats too)."""
    kind, raw = charge
    if kind is Epsilon:
        return Epsilon(epsilon=raw[0])
    if kind is Rho:
        return Rho(rho=raw[0])
    return EpsilonDelta(epsilon=raw[0], delta=raw[1])


def random_charge(rng: random.Random, model: Model) -> Charge:
    left = model.left()
    kind = model.kind if rng.random() < 0.7 else rng.choice(KINDS)
    if model.kind is Rho and kind is Epsilon:
        # "Exactly the remainder" in ε for a ρ cap is √(2·left): use doubles around it, both
        # exactly and as floats (read as decimals).
        root = math.sqrt(2 * _float(max(left[0], Fraction(0))))
        eps = rng.choice(
            [
                Fraction(root),
                root,
                Fraction(math.nextafter(root, math.inf)),
                math.nextafter(root, 0.0),
                component_value(rng, left[0], below_one=False),
            ]
        )
        return (Epsilon, (eps,))
    first = component_value(rng, left[0], below_one=False)
    if kind is not EpsilonDelta:
        return (kind, (first,))
    delta_left = left[1] if model.kind is EpsilonDelta else Fraction(0)
    delta = component_value(rng, delta_left, below_one=True) if rng.random() < 0.8 else 0
    return (EpsilonDelta, (first, delta))


def random_cap(rng: random.Random) -> Charge:
    kind = rng.choice(KINDS)
    if kind is EpsilonDelta:
        return (EpsilonDelta, (rng.choice(CAPS), rng.choice(DELTA_CAPS)))
    return (kind, (rng.choice(CAPS),))


def run_model_check(
    make: type[FilterLike], *, sequences: int, seed: int, stop_at_first: bool = False
) -> tuple[int, list[str]]:
    """Drive ``make(cap)`` and the model with the same charges; return (charges, mismatches)."""
    rng = random.Random(seed)
    mismatches: list[str] = []
    charges = 0
    for s in range(sequences):
        cap_kind, cap_raw = random_cap(rng)
        model = Model(cap_kind, tuple(read(v) for v in cap_raw))
        cap = build((cap_kind, cap_raw))
        if _values(cap) != list(model.cap):
            mismatches.append(f"seq {s}: the cap {cap_raw!r} is not read as the model reads it")
        subject = make(cap)  # type: ignore[call-arg]
        for _ in range(rng.randint(1, 6)):
            kind, raw = random_charge(rng, model)
            loss = build((kind, raw))
            charges += 1
            exact_values = tuple(read(v) for v in raw)
            if tuple(_values(loss)) != exact_values:
                mismatches.append(f"seq {s}: {raw!r} is not read as the model reads it")
            amount = model.amount_of(kind, exact_values)
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


READ_AS_DECIMAL = loss_module.exact


def _binary_reading(value: loss_module.Number, name: str) -> Fraction:
    """The old reading of a float: the dyadic rational it stores (0.1 is just above 1/10)."""
    if isinstance(value, float) and math.isfinite(value) and value >= 0:
        return Fraction(value)
    return READ_AS_DECIMAL(value, name)


def test_negative_control_binary_reading_of_floats_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Losses that read floats as their binary values: ten charges of 0.1 overrun a cap of 1,
    # and the harness, whose model reads 0.1 as 1/10, must notice.
    monkeypatch.setattr(loss_module, "exact", _binary_reading)
    budget = BudgetFilter(Epsilon(epsilon=1))
    for _ in range(9):
        budget.charge(Epsilon(epsilon=0.1))
    assert not budget.can_charge(Epsilon(epsilon=0.1))  # the broken reading shows here
    _, mismatches = run_model_check(
        BudgetFilter, sequences=10_000, seed=20240611, stop_at_first=True
    )
    assert mismatches, "the model check failed to catch the binary reading of floats"


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
