"""Privacy-loss values: ``Epsilon``, ``EpsilonDelta`` and ``Rho``.

They are immutable, keyword-only, validated on construction (negative, NaN and infinite values,
booleans, strings and ``δ ≥ 1`` are refused with :class:`~deniable.errors.InvalidParameter`)
and hold exact rationals: a float argument is read as the decimal it prints as (``0.1`` is
1/10, as the user typed it; mechanisms are calibrated with the same reading), so adding and
comparing losses never rounds. ``(ε, δ)`` pairs are ordered component-wise:
``a <= b`` means ``a.epsilon <= b.epsilon and a.delta <= b.delta``.

``+`` only adds losses of the same kind; :func:`deniable.accounting.composition.compose`
combines mixed kinds where that is unambiguous.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from fractions import Fraction
from typing import Union

from deniable.errors import InvalidParameter

Number = Fraction | int | float


def show(value: Fraction, digits: int = 6) -> str:
    """Format an exact amount for a message or repr: ``digits`` significant digits.

    Unlike ``float()``, this never overflows.

    Examples:
        >>> show(Fraction(1, 3))
        '0.333333'
        >>> show(Fraction(10) ** 400)
        '1e+400'
    """
    try:
        return f"{float(value):.{digits}g}"
    except OverflowError:  # beyond 1.8e308: print the leading digits of the integer part
        digits_text = str(abs(value.numerator) // value.denominator)
        mantissa = digits_text[0] + ("." + digits_text[1:digits] if digits > 1 else "")
        sign = "-" if value < 0 else ""
        return f"{sign}{mantissa.rstrip('0').rstrip('.')}e+{len(digits_text) - 1}"


def exact(value: Number, name: str) -> Fraction:
    """Convert ``value`` to a non-negative finite Fraction, or raise InvalidParameter.

    A float is read as the decimal it prints as (``0.1`` is exactly 1/10), the same reading as
    :func:`deniable.noise.exact.to_fraction`, so mechanisms are calibrated to exactly the loss
    that is charged, and ten charges of ``0.1`` fit a cap of ``1``.

    Examples:
        >>> exact(0.25, "epsilon")
        Fraction(1, 4)
    """
    f: Fraction
    if isinstance(value, bool):
        raise InvalidParameter(f"{name} must be a number, not a bool")
    if isinstance(value, Fraction):
        f = value
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidParameter(f"{name} must be finite, got {value!r}")
        f = Fraction(repr(float(value)))  # np.float64's repr is not a decimal literal
    elif isinstance(value, numbers.Integral):  # int, and numpy integers
        f = Fraction(int(value))
    else:
        raise InvalidParameter(
            f"{name} must be a number (int, float or Fraction), got {type(value).__name__}"
        )
    if f < 0:
        raise InvalidParameter(f"{name} must be ≥ 0, got {show(f)}")
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
        return f"Epsilon(epsilon={show(self.value)})"


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
            raise InvalidParameter(f"delta must be < 1, got {show(d)}")
        object.__setattr__(self, "epsilon", e)
        object.__setattr__(self, "delta", d)

    def __add__(self, other: EpsilonDelta) -> EpsilonDelta:
        if not isinstance(other, EpsilonDelta):
            return NotImplemented
        delta = self.delta + other.delta
        if delta >= 1:
            raise InvalidParameter("the composed delta reaches 1: the guarantee would be vacuous")
        return EpsilonDelta(epsilon=self.epsilon + other.epsilon, delta=delta)

    def __le__(self, other: EpsilonDelta) -> bool:
        if not isinstance(other, EpsilonDelta):
            return NotImplemented
        return self.epsilon <= other.epsilon and self.delta <= other.delta

    def __repr__(self) -> str:
        return f"EpsilonDelta(epsilon={show(self.epsilon)}, delta={show(self.delta)})"


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
        return f"Rho(rho={show(self.value)})"


PrivacyLoss = Union[Epsilon, EpsilonDelta, Rho]  # noqa: UP007 - used at runtime in isinstance
