"""Loss values: validation, exactness, immutability, ordering."""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np
import pytest

from deniable.accounting.loss import Epsilon, EpsilonDelta, Rho, exact, show
from deniable.errors import InvalidParameter

BAD_NUMBERS = [-1, -1e-300, -Fraction(1, 3), math.nan, math.inf, -math.inf, True, False, "1", None]


@pytest.mark.parametrize("bad", BAD_NUMBERS, ids=repr)
def test_epsilon_refuses_bad_values(bad: object) -> None:
    with pytest.raises(InvalidParameter, match="epsilon"):
        Epsilon(epsilon=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", BAD_NUMBERS, ids=repr)
def test_rho_refuses_bad_values(bad: object) -> None:
    with pytest.raises(InvalidParameter, match="rho"):
        Rho(rho=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", BAD_NUMBERS, ids=repr)
def test_epsilon_delta_refuses_bad_values(bad: object) -> None:
    with pytest.raises(InvalidParameter, match="epsilon"):
        EpsilonDelta(epsilon=bad, delta=0)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameter, match="delta"):
        EpsilonDelta(epsilon=1, delta=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("delta", [1, 1.0, Fraction(3, 2), 2, 1 + 2**-52])
def test_delta_must_be_below_one(delta: float) -> None:
    with pytest.raises(InvalidParameter, match="delta must be < 1"):
        EpsilonDelta(epsilon=1, delta=delta)


def test_delta_just_below_one_and_zero_are_fine() -> None:
    # The float 1 - 2**-53 prints as 0.9999999999999999, the decimal it is read as; still < 1.
    assert EpsilonDelta(epsilon=0, delta=1 - 2**-53).delta == Fraction(9999999999999999, 10**16)
    assert EpsilonDelta(epsilon=0, delta=1 - Fraction(1, 2**53)).delta == 1 - Fraction(1, 2**53)
    assert EpsilonDelta(epsilon=0, delta=0).delta == 0


def test_constructors_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        Epsilon(1)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        EpsilonDelta(1, 0)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Rho(0.5)  # type: ignore[call-arg]


def test_values_are_exact_rationals() -> None:
    # A float is read as the shortest decimal that prints as it: 0.1 is exactly 1/10.
    a, b = Epsilon(epsilon=0.1), Epsilon(epsilon=0.2)
    assert a.epsilon == Fraction(1, 10) and b.epsilon == Fraction(2, 10)
    assert (a + b).epsilon == Fraction(3, 10)  # no float rounding ...
    assert (a + b) == Epsilon(epsilon=0.3)
    assert (a + b).epsilon != Fraction(repr(0.1 + 0.2))  # ... unlike 0.30000000000000004
    assert Epsilon(epsilon=Fraction(1, 3)).epsilon == Fraction(1, 3)
    assert Epsilon(epsilon=5e-324).epsilon == Fraction(5, 10**324)
    assert Epsilon(epsilon=Fraction(1, 2**1074)).epsilon == Fraction(1, 2**1074)
    assert Epsilon(epsilon=1e300).epsilon == 10**300
    assert Epsilon(epsilon=2**-30).epsilon == Fraction(repr(2**-30))  # 9.313225746154785e-10
    assert Rho(rho=10**400).rho == 10**400


def test_numpy_numbers_are_accepted_exactly() -> None:
    assert Epsilon(epsilon=np.int64(3)).epsilon == 3  # type: ignore[arg-type]
    assert Epsilon(epsilon=np.float64(0.1)).epsilon == Fraction(1, 10)  # read like 0.1
    assert EpsilonDelta(epsilon=1, delta=np.float64(1e-6)).delta == Fraction(1, 10**6)
    with pytest.raises(InvalidParameter):
        Epsilon(epsilon=np.bool_(True))  # type: ignore[arg-type]
    with pytest.raises(InvalidParameter):
        Epsilon(epsilon=np.float64("nan"))


def test_losses_are_immutable() -> None:
    e = Epsilon(epsilon=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.value = Fraction(2)  # type: ignore[misc]
    d = EpsilonDelta(epsilon=1, delta=0.1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.delta = Fraction(0)  # type: ignore[misc]


def test_addition_only_within_a_kind() -> None:
    with pytest.raises(TypeError):
        Epsilon(epsilon=1) + Rho(rho=1)  # type: ignore[operator]
    with pytest.raises(TypeError):
        EpsilonDelta(epsilon=1, delta=0) + Epsilon(epsilon=1)  # type: ignore[operator]


def test_adding_deltas_up_to_one_is_refused_clearly() -> None:
    half = EpsilonDelta(epsilon=0, delta=0.5)
    with pytest.raises(InvalidParameter, match="vacuous"):
        half + half


def test_component_wise_order() -> None:
    assert EpsilonDelta(epsilon=1, delta=0) <= EpsilonDelta(epsilon=1, delta=1e-9)
    assert not EpsilonDelta(epsilon=2, delta=0) <= EpsilonDelta(epsilon=1, delta=0.5)
    assert not EpsilonDelta(epsilon=0, delta=0.5) <= EpsilonDelta(epsilon=1, delta=0.1)
    assert Epsilon(epsilon=Fraction(1, 3)) <= Epsilon(epsilon=Fraction(1, 3))
    assert not Rho(rho=Fraction(1, 3) + Fraction(1, 10**50)) <= Rho(rho=Fraction(1, 3))


def test_repr_and_show_never_overflow() -> None:
    assert repr(Epsilon(epsilon=10**400)) == "Epsilon(epsilon=1e+400)"
    assert show(Fraction(123456789) * 10**400) == "1.23456e+408"
    assert repr(EpsilonDelta(epsilon=0.5, delta=1e-6)) == "EpsilonDelta(epsilon=0.5, delta=1e-06)"


def test_exact_names_the_parameter() -> None:
    with pytest.raises(InvalidParameter, match=r"^scale must be"):
        exact(-1, "scale")
