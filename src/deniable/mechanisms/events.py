"""Privacy events: the facts of a release, apart from what they cost.

A release is recorded as immutable events — which mechanism ran, with which sensitivity and
noise parameter — and an accountant interprets them as a privacy loss (in the spirit of
Google's ``dp_accounting`` ``DpEvent``). Keeping the two apart keeps the record honest when
the accounting improves later: the events stay true, only their interpretation changes.

Each event's :meth:`loss` is the privacy map of its mechanism (the same function the
mechanism's own :class:`~deniable.mechanisms.Release` reports), and :func:`compose_events`
is basic sequential composition converted to the budget's kind. A :class:`MixtureEvent`
(one of several releases chosen at random, only it run) costs the maximum of its
candidates' losses.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import TypeAlias

from deniable.accounting.composition import compose
from deniable.accounting.conversions import convert
from deniable.accounting.loss import Epsilon, EpsilonDelta, PrivacyLoss, Rho
from deniable.errors import InvalidParameter
from deniable.mechanisms.gaussian import gaussian_loss
from deniable.mechanisms.laplace import laplace_loss
from deniable.mechanisms.mixture import mixture_loss, mixture_weights


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


@dataclass(frozen=True, slots=True)
class MixtureEvent:
    """One of several releases, chosen at random with public weights, and only it run.

    The loss is the component-wise maximum of the candidates' losses, not their sum
    (thesis Proposition 3): the ``(ε, δ)`` inequality is preserved by convex combinations,
    and Rényi divergence is jointly quasi-convex, so both hold even with the choice revealed
    (see :mod:`deniable.mechanisms.mixture`).

    Attributes:
        candidates: the candidates' events, in order.
        weights: the public probability of each (positive, summing to exactly 1).

    Raises:
        InvalidParameter: on construction, when the weights are not a distribution or do not
            match the candidates.

    Examples:
        >>> one, two = Fraction(1), Fraction(2)
        >>> MixtureEvent(
        ...     (GeometricEvent(one, one), GeometricEvent(one, two)), (one / 2, one / 2)
        ... ).loss()
        Epsilon(epsilon=2)
    """

    candidates: tuple[PrivacyEvent, ...]
    weights: tuple[Fraction, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "candidates", tuple(self.candidates))
        object.__setattr__(self, "weights", mixture_weights(self.weights))
        if len(self.weights) != len(self.candidates):
            raise InvalidParameter("a mixture event needs one weight per candidate event")

    def loss(self) -> PrivacyLoss:
        """The component-wise maximum of the candidates' losses, in their common kind."""
        return mixture_loss(e.loss() for e in self.candidates)


PrivacyEvent: TypeAlias = (
    GeometricEvent
    | DiscreteGaussianEvent
    | ExponentialEvent
    | PartitionSelectionEvent
    | MixtureEvent
)


def compose_events(events: Iterable[PrivacyEvent], kind: type[PrivacyLoss]) -> PrivacyLoss:
    """The loss of running every event, in the budget's kind (zero for no event).

    Raises:
        InvalidParameter: a loss that cannot be expressed in ``kind`` (e.g. a δ in a pure
            ε budget).

    A :class:`MixtureEvent` counts once, at the maximum of its candidates' losses.

    Examples:
        >>> compose_events([GeometricEvent(Fraction(2), Fraction(1, 2))], Epsilon)
        Epsilon(epsilon=0.5)
    """
    losses = [e.loss() for e in events]
    if not losses:
        zero: PrivacyLoss = Rho(rho=0) if kind is Rho else Epsilon(epsilon=0)
        return convert(zero, kind)
    if kind is Rho:
        # In a zCDP budget each event is converted on its own and the ρ's add: composing
        # pure-ε events first would charge (Σε)²/2, far more than Σ ε²/2.
        losses = [convert(loss, Rho) for loss in losses]
    return convert(compose(losses), kind)
