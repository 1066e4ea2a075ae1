"""Tight ``(ε, δ)`` composition of many mechanisms through privacy-loss distributions (PLDs).

Summing ε's is exact bookkeeping but loose: composing ``k`` Laplace mechanisms is in fact
``(ε', δ)``-DP with ``ε'`` far below ``kε`` for any small ``δ > 0``. Google's ``dp_accounting``
computes the privacy-loss distribution of each mechanism, convolves them (FFT) and reads off
the ε at a target δ. We use it rather than re-deriving it.

Inputs are *facts* about releases, not interpretations: either a generic loss
(``Epsilon`` / ``EpsilonDelta``, for which the worst-case PLD of Kairouz et al. is used) or a
description of the noise actually added (:class:`LaplaceEvent`, :class:`DiscreteLaplaceEvent`,
:class:`GaussianEvent`), which lets the accountant use the exact PLD of that noise. Neighbouring
datasets are add/remove-one-unit, as everywhere in deniable.

Safety of the number: ``dp_accounting`` discretises losses *pessimistically* (rounding each
privacy loss up), so in exact arithmetic its answer is an upper bound. Its FFT convolutions run
in floating point; the result is multiplied by ``1 + 2^-20`` and rounded up to a Fraction to
cover that error with a wide margin. When every input has a pure or ``(ε, δ)`` loss and their
plain sum already fits the target δ, the result is never worse than that sum.
"""

from __future__ import annotations

import math
import numbers
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, NoReturn

from deniable.accounting.bounds import round_up
from deniable.accounting.loss import Epsilon, EpsilonDelta, Number, Rho, exact
from deniable.errors import InvalidParameter

if TYPE_CHECKING:
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

_FLOAT_MARGIN = 1 + Fraction(1, 2**20)


def _positive(value: Number, name: str) -> Fraction:
    f = exact(value, name)
    if f == 0:
        raise InvalidParameter(f"{name} must be > 0")
    return f


def _sensitivity_int(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise InvalidParameter("sensitivity must be an integer ≥ 1 for discrete noise")
    return int(value)


@dataclass(frozen=True, slots=True, init=False)
class LaplaceEvent:
    """A release with continuous Laplace noise of ``scale`` b for an L1 ``sensitivity`` Δ.

    Its pure loss is ``ε = Δ/b``.
    """

    scale: Fraction
    sensitivity: Fraction

    def __init__(self, *, scale: Number, sensitivity: Number) -> None:
        object.__setattr__(self, "scale", _positive(scale, "scale"))
        object.__setattr__(self, "sensitivity", _positive(sensitivity, "sensitivity"))

    @property
    def epsilon(self) -> Fraction:
        """The pure ε of the release, ``Δ/b``."""
        return self.sensitivity / self.scale


@dataclass(frozen=True, slots=True, init=False)
class DiscreteLaplaceEvent:
    """A release with discrete Laplace noise, ``P[k] ∝ e^(−|k|/t)``, for an integer Δ.

    ``scale`` is ``t`` in the units of the released integers (grid units for grid releases,
    where the sensitivity is the grid-rounded one). Its pure loss is ``ε = Δ/t``.
    """

    scale: Fraction
    sensitivity: int

    def __init__(self, *, scale: Number, sensitivity: int) -> None:
        object.__setattr__(self, "scale", _positive(scale, "scale"))
        object.__setattr__(self, "sensitivity", _sensitivity_int(sensitivity))

    @property
    def epsilon(self) -> Fraction:
        """The pure ε of the release, ``Δ/t``."""
        return self.sensitivity / self.scale


@dataclass(frozen=True, slots=True, init=False)
class GaussianEvent:
    """A release with continuous Gaussian noise of standard deviation σ for an L2 Δ.

    It is ``Δ²/(2σ²)``-zCDP; its PLD gives a much tighter ``(ε, δ)`` than that.
    """

    sigma: Fraction
    sensitivity: Fraction

    def __init__(self, *, sigma: Number, sensitivity: Number) -> None:
        object.__setattr__(self, "sigma", _positive(sigma, "sigma"))
        object.__setattr__(self, "sensitivity", _positive(sensitivity, "sensitivity"))


PldItem = Epsilon | EpsilonDelta | LaplaceEvent | DiscreteLaplaceEvent | GaussianEvent
"""What :func:`compose_pld` accepts."""


_SUPPORTED = (Epsilon, EpsilonDelta, LaplaceEvent, DiscreteLaplaceEvent, GaussianEvent)


def _float_up(x: Fraction) -> float:
    f = float(x)
    return f if Fraction(f) >= x else math.nextafter(f, math.inf)


def _float_down(x: Fraction) -> float:
    f = float(x)
    return f if Fraction(f) <= x else math.nextafter(f, -math.inf)


def _refuse(item: object) -> NoReturn:
    if isinstance(item, Rho):
        raise InvalidParameter(
            "a bare ρ-zCDP loss has no tight privacy-loss distribution: describe the release "
            "as a GaussianEvent, or convert it with deniable.accounting.zcdp_to_approx first"
        )
    raise InvalidParameter(
        "compose_pld takes Epsilon, EpsilonDelta, LaplaceEvent, DiscreteLaplaceEvent or "
        f"GaussianEvent items, got {type(item).__name__}"
    )


def _pld_of(item: PldItem, discretization: float) -> pld_lib.PrivacyLossDistribution:
    """The PLD of one release; every float parameter is rounded towards *more* loss."""
    # Imported here: dp_accounting takes seconds to import and most sessions never need it.
    from dp_accounting.pld import common as pld_common
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    if isinstance(item, Epsilon | EpsilonDelta):
        delta = item.delta if isinstance(item, EpsilonDelta) else Fraction(0)
        params = pld_common.DifferentialPrivacyParameters(
            epsilon=_float_up(item.epsilon), delta=_float_up(delta)
        )
        return pld_lib.from_privacy_parameters(params, value_discretization_interval=discretization)
    if isinstance(item, LaplaceEvent):
        return pld_lib.from_laplace_mechanism(
            parameter=_float_down(item.scale / item.sensitivity),
            sensitivity=1,
            value_discretization_interval=discretization,
        )
    if isinstance(item, DiscreteLaplaceEvent):
        return pld_lib.from_discrete_laplace_mechanism(
            parameter=_float_up(1 / item.scale),
            sensitivity=item.sensitivity,
            value_discretization_interval=discretization,
        )
    if isinstance(item, GaussianEvent):
        return pld_lib.from_gaussian_mechanism(
            standard_deviation=_float_down(item.sigma / item.sensitivity),
            sensitivity=1,
            value_discretization_interval=discretization,
        )
    _refuse(item)


def _basic_bound(items: Iterable[PldItem]) -> tuple[Fraction, Fraction] | None:
    """The plain sum ``(Σε, Σδ)`` when every item has a pure or ``(ε, δ)`` loss, else None."""
    eps, delta = Fraction(0), Fraction(0)
    for item in items:
        if isinstance(item, Epsilon | LaplaceEvent | DiscreteLaplaceEvent):
            eps += item.epsilon
        elif isinstance(item, EpsilonDelta):
            eps += item.epsilon
            delta += item.delta
        else:
            return None
    return eps, delta


def _is_zero(item: PldItem) -> bool:
    if isinstance(item, Epsilon):
        return item.epsilon == 0
    if isinstance(item, EpsilonDelta):
        return item.epsilon == 0 and item.delta == 0
    return False


def compose_pld(
    items: Iterable[PldItem], *, delta: Number, discretization: float = 1e-4
) -> EpsilonDelta:
    """Return a tight ``(ε, δ)`` for the adaptive sequential composition of ``items``.

    Identical items are grouped and self-composed, so ``[event] * 1000`` is cheap.

    Args:
        items: the releases, as losses or noise events (may be heterogeneous).
        delta: the target δ in ``[0, 1)``.
        discretization: ``dp_accounting``'s value discretisation interval; smaller is
            tighter and slower. The result is an upper bound for every choice.

    Returns:
        ``EpsilonDelta(epsilon=ε, delta=delta)`` with ε rounded up (see the module docstring).

    Raises:
        InvalidParameter: for an unsupported item (e.g. a bare ``Rho``), a bad δ or
            discretisation, or when no finite ε exists at this δ (e.g. δ = 0 with Gaussian
            noise, or a δ below the items' own δ).

    Examples:
        >>> ten = [LaplaceEvent(scale=10, sensitivity=1)] * 100
        >>> out = compose_pld(ten, delta=1e-6)
        >>> 2 < float(out.epsilon) < 10  # the plain sum is 10
        True
    """
    target = exact(delta, "delta")
    if target >= 1:
        raise InvalidParameter("delta must be < 1")
    if not (isinstance(discretization, float | int) and 0 < discretization <= 1):
        raise InvalidParameter("discretization must be a number in (0, 1]")
    all_items = list(items)
    for item in all_items:
        if not isinstance(item, _SUPPORTED):
            _refuse(item)
    basic = _basic_bound(all_items)
    counts = Counter(item for item in all_items if not _is_zero(item))
    if not counts:
        return EpsilonDelta(epsilon=0, delta=target)
    try:
        plds = []
        for item, count in counts.items():
            pld = _pld_of(item, float(discretization))
            plds.append(pld.self_compose(count) if count > 1 else pld)
        total = plds[0]
        for pld in plds[1:]:
            total = total.compose(pld)
        # A smaller δ gives a larger ε, so asking at δ rounded down is the safe side.
        eps_float = float(total.get_epsilon_for_delta(_float_down(target)))
    except (OverflowError, ValueError) as exc:
        if basic is not None and basic[1] <= target:
            return EpsilonDelta(epsilon=basic[0], delta=target)
        raise InvalidParameter(
            "these losses are too large for PLD accounting; use compose() instead"
        ) from exc
    candidates: list[Fraction] = []
    if math.isfinite(eps_float):
        candidates.append(round_up(max(Fraction(eps_float), Fraction(0)) * _FLOAT_MARGIN))
    if basic is not None and basic[1] <= target:
        candidates.append(basic[0])
    if not candidates:
        raise InvalidParameter(
            "no finite ε exists at this δ for these releases: choose a larger delta"
        )
    return EpsilonDelta(epsilon=min(candidates), delta=target)
