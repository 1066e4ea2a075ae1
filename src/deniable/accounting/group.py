"""Group privacy: the guarantee for a group of ``k`` privacy units instead of one.

Two datasets that differ in ``k`` units are linked by a chain of ``k`` neighbouring steps, so
a mechanism's loss for groups of ``k`` follows from its loss for one unit:

* ``ε``-DP gives ``kε``;
* ``(ε, δ)``-DP gives ``(kε, k·e^((k−1)ε)·δ)`` (Vadhan 2017, Lemma 2.2, bounding
  ``Σ_{i<k} e^(iε)·δ``), with the δ rounded up;
* ``ρ``-zCDP gives ``k²ρ`` (Bun–Steinke 2016, Prop. 1.9).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import overload

from deniable.accounting.bounds import MAX_EXP_ARGUMENT, exp_interval, round_up
from deniable.accounting.composition import approx, positive_count
from deniable.accounting.loss import Epsilon, EpsilonDelta, PrivacyLoss, Rho
from deniable.errors import InvalidParameter

_VACUOUS = "the group δ reaches 1: the (ε, δ) guarantee is vacuous for groups of this size"


@overload
def group_privacy(loss: Epsilon, *, k: int) -> Epsilon: ...
@overload
def group_privacy(loss: EpsilonDelta, *, k: int) -> EpsilonDelta: ...
@overload
def group_privacy(loss: Rho, *, k: int) -> Rho: ...
def group_privacy(loss: PrivacyLoss, *, k: int) -> PrivacyLoss:
    """Return the loss that protects groups of ``k`` privacy units, of the same kind as ``loss``.

    ``k = 1`` returns ``loss`` unchanged.

    Raises:
        InvalidParameter: if ``k`` is not an integer ``≥ 1``, or the group δ reaches 1 (the
            ``(ε, δ)`` guarantee is then vacuous for such groups).

    Examples:
        >>> group_privacy(Epsilon(epsilon=0.5), k=3)
        Epsilon(epsilon=1.5)
        >>> group_privacy(Rho(rho=0.125), k=2)
        Rho(rho=0.5)
        >>> group_privacy(EpsilonDelta(epsilon=1, delta=1e-9), k=2)
        EpsilonDelta(epsilon=2, delta=5.43656e-09)
    """
    count = positive_count(k)
    if count == 1:
        return loss
    if isinstance(loss, Epsilon):
        return Epsilon(epsilon=count * loss.epsilon)
    if isinstance(loss, Rho):
        return Rho(rho=count * count * loss.rho)
    if isinstance(loss, EpsilonDelta):
        if loss.delta == 0:
            return EpsilonDelta(epsilon=count * loss.epsilon, delta=0)
        exponent = (count - 1) * loss.epsilon
        # e^x ≥ 2^⌊1.4426·x⌋ (log₂ e > 1.4426): settle vacuous cases without evaluating e^x.
        low_power = math.floor(min(exponent, Fraction(MAX_EXP_ARGUMENT)) * Fraction(14426, 10000))
        if count * loss.delta * Fraction(2) ** low_power >= 1:
            raise InvalidParameter(_VACUOUS)
        if exponent > MAX_EXP_ARGUMENT:
            raise InvalidParameter("(k − 1)·ε is too large to evaluate the group δ")
        _, growth_hi = exp_interval(exponent)
        return approx(count * loss.epsilon, round_up(count * growth_hi * loss.delta))
    raise InvalidParameter(
        f"expected an Epsilon, EpsilonDelta or Rho loss, got {type(loss).__name__}"
    )
