"""Privacy events: the facts of a release, apart from what they cost.

A release is recorded as immutable events — which mechanism ran, with which sensitivity and
noise parameter — and an accountant interprets them as a privacy loss (in the spirit of
Google's ``dp_accounting`` ``DpEvent``). Keeping the two apart keeps the record honest when
the accounting improves later: the events stay true, only their interpretation changes.

Each event's :meth:`loss` is the privacy map of its mechanism (the same function the
mechanism's own :class:`~deniable.mechanisms.Release` reports), and :func:`compose_events`
is basic sequential composition converted to the budget's kind.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import TypeAlias

from deniable.accounting.composition import compose
from deniable.accounting.conversions import convert
from deniable.accounting.loss import Epsilon, EpsilonDelta, PrivacyLoss, Rho
from deniable.mechanisms.gaussian import gaussian_loss
from deniable.mechanisms.laplace import laplace_loss


@dataclass(frozen=True, slots=True)
class GeometricEvent:
    """Discrete Laplace noise of scale ``sensitivity/epsilon`` on an integer vector.

    Attributes:
        sensitivity: L1 sensitivity of the vector (an integer).
        epsilon: ε given to the mechanism.
    """

    sensitivity: Fraction
    epsilon: Fraction

    def loss(self) -> PrivacyLoss:
        """``ε = Δ/t`` with ``t = Δ/ε``."""
        return laplace_loss(self.sensitivity, self.sensitivity / self.epsilon)


@dataclass(frozen=True, slots=True)
class DiscreteGaussianEvent:
    """Discrete Gaussian noise with ``σ² = Δ₂²/(2ρ)`` on an integer vector.

    Attributes:
        sensitivity: an upper bound of the vector's L2 sensitivity.
        rho: ρ given to the mechanism.
    """

    sensitivity: Fraction
    rho: Fraction

    def loss(self) -> PrivacyLoss:
        """``ρ = Δ₂²/(2σ²)``."""
        sigma2 = self.sensitivity * self.sensitivity / (2 * self.rho)
        return gaussian_loss(self.sensitivity, sigma2)


@dataclass(frozen=True, slots=True)
class ExponentialEvent:
    """One exponential-mechanism choice per partition, with score sensitivity ``sensitivity``.

    Attributes:
        sensitivity: L1 sensitivity of the scores over the partitions one unit touches.
        epsilon: ε of the choice.
    """

    sensitivity: Fraction
    epsilon: Fraction

    def loss(self) -> PrivacyLoss:
        """ε by the mechanism's contract."""
        return Epsilon(epsilon=self.epsilon)


@dataclass(frozen=True, slots=True)
class PartitionSelectionEvent:
    """Optimal partition selection (Desfontaines et al. 2022) over ``max_groups`` partitions.

    Attributes:
        epsilon: ε of the whole selection (ε/m per partition).
        delta: δ of the whole selection (δ/m per partition).
        max_groups: the most partitions one unit touches.
    """

    epsilon: Fraction
    delta: Fraction
    max_groups: int

    def loss(self) -> PrivacyLoss:
        """``(ε, δ)`` by basic composition over the ``m`` partitions."""
        return EpsilonDelta(epsilon=self.epsilon, delta=self.delta)


PrivacyEvent: TypeAlias = (
    GeometricEvent | DiscreteGaussianEvent | ExponentialEvent | PartitionSelectionEvent
)


def compose_events(events: Iterable[PrivacyEvent], kind: type[PrivacyLoss]) -> PrivacyLoss:
    """The loss of running every event, in the budget's kind (zero for no event).

    Raises:
        InvalidParameter: a loss that cannot be expressed in ``kind`` (e.g. a δ in a pure
            ε budget).

    Examples:
        >>> compose_events([GeometricEvent(Fraction(2), Fraction(1, 2))], Epsilon)
        Epsilon(epsilon=0.5)
    """
    losses = [e.loss() for e in events]
    if not losses:
        zero: PrivacyLoss = Rho(rho=0) if kind is Rho else Epsilon(epsilon=0)
        return convert(zero, kind)
    return convert(compose(losses), kind)
