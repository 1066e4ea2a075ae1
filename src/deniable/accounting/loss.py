"""Privacy-loss values: ``Epsilon``, ``EpsilonDelta`` and ``Rho``.

They are immutable, keyword-only, validated on construction (negative, NaN and infinite values
are refused) and hold exact rationals: a float argument is converted to the dyadic rational it
denotes, so adding and comparing losses never rounds. ``(ε, δ)`` pairs are ordered
component-wise: ``a <= b`` means ``a.epsilon <= b.epsilon and a.delta <= b.delta``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Union

from deniable.errors import InvalidParameter

Number = Fraction | int | float


def exact(value: Number, name: str) -> Fraction:
    """Convert ``value`` exactly to a non-negative finite Fraction, or raise InvalidParameter.

    Examples:
        >>> exact(0.25, "epsilon")
        Fraction(1, 4)
    """
    if isinstance(value, bool) or not isinstance(value, Fraction | int | float):
        raise InvalidParameter(f"{name} must be a number (int, float or Fraction)")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidParameter(f"{name} must be finite, got {value!r}")
    f = Fraction(value)
    if f < 0:
        raise InvalidParameter(f"{name} must be ≥ 0, got {float(f)!r}")
    return f


@dataclass(frozen=True, slots=True, init=False)
class Epsilon:
    """Pure ε-differential privacy.

    Examples:
        >>> Epsilon(epsilon=0.5) + Epsilon(epsilon=0.25)
        Epsilon(epsilon=0.75)
    """

    value: Fraction

    def __init__(self, *, epsilon: Number) -> None:
        object.__setattr__(self, "value", exact(epsilon, "epsilon"))

    @property
    def epsilon(self) -> Fraction:
        """ε as an exact rational."""
        return self.value

    def __add__(self, other: Epsilon) -> Epsilon:
        if not isinstance(other, Epsilon):
            return NotImplemented
        return Epsilon(epsilon=self.value + other.value)

    def __le__(self, other: Epsilon) -> bool:
        if not isinstance(other, Epsilon):
            return NotImplemented
        return self.value <= other.value

    def __repr__(self) -> str:
        return f"Epsilon(epsilon={float(self.value):.6g})"


@dataclass(frozen=True, slots=True, init=False)
class EpsilonDelta:
    """Approximate (ε, δ)-differential privacy; δ must be < 1.

    Examples:
        >>> EpsilonDelta(epsilon=1, delta=1e-6).delta > 0
        True
    """

    epsilon: Fraction
    delta: Fraction

    def __init__(self, *, epsilon: Number, delta: Number) -> None:
        e, d = exact(epsilon, "epsilon"), exact(delta, "delta")
        if d >= 1:
            raise InvalidParameter("delta must be < 1")
        object.__setattr__(self, "epsilon", e)
        object.__setattr__(self, "delta", d)

    def __add__(self, other: EpsilonDelta) -> EpsilonDelta:
        if not isinstance(other, EpsilonDelta):
            return NotImplemented
        return EpsilonDelta(epsilon=self.epsilon + other.epsilon, delta=self.delta + other.delta)

    def __le__(self, other: EpsilonDelta) -> bool:
        if not isinstance(other, EpsilonDelta):
            return NotImplemented
        return self.epsilon <= other.epsilon and self.delta <= other.delta

    def __repr__(self) -> str:
        return f"EpsilonDelta(epsilon={float(self.epsilon):.6g}, delta={float(self.delta):.6g})"


@dataclass(frozen=True, slots=True, init=False)
class Rho:
    """ρ-zero-concentrated differential privacy (zCDP).

    Examples:
        >>> Rho(rho=0.125) + Rho(rho=0.125)
        Rho(rho=0.25)
    """

    value: Fraction

    def __init__(self, *, rho: Number) -> None:
        object.__setattr__(self, "value", exact(rho, "rho"))

    @property
    def rho(self) -> Fraction:
        """ρ as an exact rational."""
        return self.value

    def __add__(self, other: Rho) -> Rho:
        if not isinstance(other, Rho):
            return NotImplemented
        return Rho(rho=self.value + other.value)

    def __le__(self, other: Rho) -> bool:
        if not isinstance(other, Rho):
            return NotImplemented
        return self.value <= other.value

    def __repr__(self) -> str:
        return f"Rho(rho={float(self.value):.6g})"


PrivacyLoss = Union[Epsilon, EpsilonDelta, Rho]  # noqa: UP007 - used at runtime in isinstance
