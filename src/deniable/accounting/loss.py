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
from decimal import Decimal
from fractions import Fraction
from typing import Union

import numpy as np

from deniable.errors import InvalidParameter

Number = Fraction | int | float


def show(value: Fraction, digits: int = 6) -> str:
    """Format an exact amount for a message or repr: ``digits`` significant digits.

    Unlike ``float()`` or ``str()``, this never overflows nor underflows, whatever the size of
    the integers (digits beyond the ``digits`` first are cut, not rounded, out of doubles'
    range).

    Examples:
        >>> show(Fraction(1, 3))
        '0.333333'
        >>> show(Fraction(10) ** 400)
        '1e+400'
        >>> show(Fraction(3, 10**400))
        '3e-400'
    """
    digits = max(digits, 1)
    magnitude = abs(value)
    if magnitude == 0 or Fraction(1, 10**300) <= magnitude <= 10**300:
        return f"{float(value):.{digits}g}"
    # Out of doubles' comfortable range: find the decimal exponent with integers only (str()
    # of an int is refused beyond 4300 digits), then scale the leading digits into range.
    num, den = magnitude.numerator, magnitude.denominator
    exponent = int((num.bit_length() - den.bit_length()) * 0.30102999566398120)
    while magnitude >= Fraction(10) ** (exponent + 1):
        exponent += 1
    while magnitude < Fraction(10) ** exponent:
        exponent -= 1
    scaled = magnitude / Fraction(10) ** (exponent - digits + 1)  # in [10^(d-1), 10^d)
    leading = str(scaled.numerator // scaled.denominator)
    mantissa = (leading[0] + "." + leading[1:]).rstrip("0").rstrip(".")
    sign = "-" if value < 0 else ""
    return f"{sign}{mantissa}e{'+' if exponent >= 0 else '-'}{abs(exponent):02d}"


def exact(value: Number, name: str) -> Fraction:
    """Convert ``value`` to a non-negative finite Fraction, or raise InvalidParameter.

    A float is read as the decimal it prints as (``0.1`` is exactly 1/10), the same reading as
    :func:`deniable.noise.exact.to_fraction`, so mechanisms are calibrated to exactly the loss
    that is charged, and ten charges of ``0.1`` fit a cap of ``1``. Python and numpy integers,
    numpy floats and finite :class:`~decimal.Decimal` values are read exactly too. Any size is
    accepted (losses are exact); :func:`parameter` bounds what a user may *request*.

    Raises:
        InvalidParameter: anything else (bools, strings, None, NaN, infinities, negatives);
            never an untyped error.

    Examples:
        >>> exact(0.25, "epsilon")
        Fraction(1, 4)
    """
    f = _fraction(value, name)
    if f < 0:
        raise InvalidParameter(f"{name} must be ≥ 0, got {show(f)}")
    return f


def _fraction(value: object, name: str) -> Fraction:
    f: Fraction
    if isinstance(value, bool | np.bool_):
        raise InvalidParameter(f"{name} must be a number, not a bool")
    if isinstance(value, Fraction):
        f = value
    elif isinstance(value, float | np.floating):
        value = float(value)
        if not math.isfinite(value):
            raise InvalidParameter(f"{name} must be finite, got {value!r}")
        f = Fraction(repr(value))  # np.float64's repr is not a decimal literal
    elif isinstance(value, numbers.Integral):  # int, and numpy integers
        f = Fraction(int(value))
    elif isinstance(value, Decimal):
        if not value.is_finite():
            raise InvalidParameter(f"{name} must be finite, got {value!r}")
        f = Fraction(value)
    else:
        raise InvalidParameter(
            f"{name} must be a number (int, float or Fraction), got {type(value).__name__}"
        )
    return f


MAX_PARAMETER = Fraction(2**64)
"""The largest ε, ρ (or split weight) a user may request: ``2^64`` (about 1.8e19).

Far beyond any meaningful guarantee (``e^-ε`` is 0 in doubles from ε ≈ 745), and small
enough that the noise planner's floating-point side computations never overflow.
"""

MIN_PARAMETER = Fraction(1, 2**64)
"""The smallest positive ε or ρ a user may request: ``2^-64`` (about 5.4e-20).

Smaller amounts would ask for noise scales beyond 10^19 times the sensitivity, which no
release can use and which overflow floating-point side computations.
"""


def parameter(value: object, name: str) -> Fraction:
    """Validate a privacy amount a user asks for; return it as an exact Fraction.

    The single check of user-given amounts (a query's ``epsilon``/``rho``/``delta``, and
    split weights, named by anything else): ε, ρ and weights must lie in
    ``[MIN_PARAMETER, MAX_PARAMETER]`` (``2^-64 … 2^64``), δ in ``[0, 1)``. Unlike
    :func:`exact`, which accepts any size so that accounting stays exact, this refuses amounts
    whose noise no mechanism can draw, so that whatever a user types, the only errors are
    :class:`~deniable.errors.InvalidParameter`.

    Raises:
        InvalidParameter: not a finite number (huge ints, NaN, strings, None... included), or
            out of range; the message says what to pass.

    Examples:
        >>> parameter(0.5, "epsilon")
        Fraction(1, 2)
        >>> parameter(10**400, "epsilon")
        Traceback (most recent call last):
        ...
        deniable.errors.InvalidParameter: epsilon must be at most 2^64 (about 1.8e19), \
got 1e+400: pass an amount such as epsilon=1
    """
    f = _fraction(value, name)
    if name == "delta":
        if not 0 <= f < 1:
            raise InvalidParameter(
                f"delta must be ≥ 0 and < 1, got {show(f)}: pass e.g. delta=1e-6"
            )
        return f
    if f <= 0:
        raise InvalidParameter(f"{name} must be > 0, got {show(f)}: pass e.g. {name}=1")
    if f > MAX_PARAMETER:
        raise InvalidParameter(
            f"{name} must be at most 2^64 (about 1.8e19), got {show(f)}: "
            f"pass an amount such as {name}=1"
        )
    if f < MIN_PARAMETER:
        raise InvalidParameter(
            f"{name} must be at least 2^-64 (about 5.4e-20), got {show(f)}: "
            f"pass an amount such as {name}=0.1"
        )
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

    def __str__(self) -> str:
        """How messages name it: ``ε = 0.9``."""
        return f"ε = {show(self.value)}"


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

    def __str__(self) -> str:
        """How messages name it: ``ε = 0.9, δ = 1e-06``."""
        return f"ε = {show(self.epsilon)}, δ = {show(self.delta)}"


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

    def __str__(self) -> str:
        """How messages name it: ``ρ = 0.1``."""
        return f"ρ = {show(self.value)}"


PrivacyLoss = Union[Epsilon, EpsilonDelta, Rho]  # noqa: UP007 - used at runtime in isinstance
