"""The numbers behind the explanation figures: posterior bounds and noise on neighbouring counts.

Each function here computes what one figure of :mod:`deniable.explain.plots` draws, so that
tests check numbers rather than pixels. Nothing here reads data or spends budget.

* :func:`posterior_curve` / :func:`posterior_family` — the posterior range against the prior
  for one ε or a family of ε, pure or (ε, δ) (the thesis' Figures 2.1 and 2.2);
* :func:`neighbour_noise` — the exact law of a count released by
  :func:`deniable.mechanisms.geometric` when the true count is ``n`` and when it is
  ``n + contribution`` (Figures 2.4–2.6, including one person contributing 5 rows).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from deniable.accounting.loss import Number, exact, show
from deniable.errors import InvalidParameter
from deniable.explain.distributions import noise_law, noise_pmf
from deniable.explain.posterior import DEFAULT_EVIDENCE, approx_posterior_bounds, split_loss
from deniable.mechanisms import NoiseLaw

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class PosteriorCurve:
    """The posterior range against the prior for one (ε, δ).

    Attributes:
        epsilon: ε (exact).
        delta: δ (exact; 0 for pure ε-DP).
        evidence: the least probability π of the evidence the bound covers (only meaningful
            when δ > 0).
        priors: the priors, increasing from 0 to 1.
        low: the least posterior at each prior.
        high: the largest posterior at each prior.
    """

    epsilon: Fraction
    delta: Fraction
    evidence: Fraction
    priors: F64
    low: F64
    high: F64

    @property
    def label(self) -> str:
        """``ε = 1.1`` or ``ε = 1.1, δ = 1e-06 (evidence ≥ 1%)``."""
        text = f"ε = {show(self.epsilon, 3)}"
        if self.delta:
            text += f", δ = {show(self.delta, 2)} (evidence ≥ {float(self.evidence):.3g})"
        return text


def _points(points: int) -> int:
    if isinstance(points, bool) or not isinstance(points, int) or points < 2:
        raise InvalidParameter("points must be an integer ≥ 2")
    return points


def posterior_curve(
    epsilon: Number,
    *,
    delta: Number = 0,
    evidence: Number = DEFAULT_EVIDENCE,
    points: int = 201,
) -> PosteriorCurve:
    """Return the posterior bounds at ``points`` evenly spaced priors from 0 to 1.

    Each point is :func:`~deniable.explain.posterior.approx_posterior_bounds` (which is
    :func:`~deniable.explain.posterior.posterior_bounds` when δ = 0).

    Raises:
        InvalidParameter: a negative/non-finite ε, δ outside ``[0, 1)``, π outside ``(0, 1]``,
            or fewer than 2 points.

    Examples:
        >>> import math
        >>> c = posterior_curve(math.log(3), points=3)
        >>> [round(float(x), 12) for x in c.high]
        [0.0, 0.75, 1.0]
    """
    eps, d = split_loss(epsilon, delta)
    priors = np.linspace(0.0, 1.0, _points(points))
    pairs = [approx_posterior_bounds(float(p), eps, d, evidence=evidence) for p in priors]
    return PosteriorCurve(
        epsilon=eps,
        delta=d,
        evidence=Fraction(evidence),
        priors=priors,
        low=np.array([lo for lo, _ in pairs], dtype=np.float64),
        high=np.array([hi for _, hi in pairs], dtype=np.float64),
    )


def posterior_family(
    epsilons: Sequence[Number],
    *,
    delta: Number = 0,
    evidence: Number = DEFAULT_EVIDENCE,
    points: int = 201,
) -> list[PosteriorCurve]:
    """Return one :func:`posterior_curve` per ε, in the order given.

    Raises:
        InvalidParameter: no ε, or any parameter :func:`posterior_curve` refuses.
    """
    if len(epsilons) == 0:
        raise InvalidParameter("give at least one epsilon")
    return [posterior_curve(e, delta=delta, evidence=evidence, points=points) for e in epsilons]


@dataclass(frozen=True)
class NeighbourNoise:
    """The law of the released count on two neighbouring datasets.

    Attributes:
        count: the true count ``n`` without the target.
        contribution: how much the target adds to the count (their rows).
        sensitivity: the sensitivity the noise is calibrated to.
        epsilon: the ε given to the mechanism.
        law: the mechanism's noise law (discrete Laplace of scale ``sensitivity/ε``).
        values: the released values shown (integers around ``n``).
        without: ``P[release = v]`` when the true count is ``n``.
        with_target: ``P[release = v]`` when it is ``n + contribution``.
    """

    count: int
    contribution: int
    sensitivity: int
    epsilon: Fraction
    law: NoiseLaw
    values: I64
    without: F64
    with_target: F64

    @property
    def actual_epsilon(self) -> float:
        """The largest ``|ln(P_with(v)/P_without(v))|`` over all ``v``: ``contribution/t``.

        Equal to ε when the contribution is within the sensitivity, and
        ``contribution/sensitivity`` times ε when it is not (the thesis' Figure 2.5).
        """
        return float(Fraction(self.contribution) / self.law.parameter)

    @property
    def guaranteed(self) -> bool:
        """Whether the mechanism's ε covers the target (contribution ≤ sensitivity)."""
        return self.contribution <= self.sensitivity


def _positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise InvalidParameter(f"{name} must be a positive integer")
    return int(value)


def neighbour_noise(
    count: int,
    *,
    epsilon: Number,
    sensitivity: int = 1,
    contribution: int | None = None,
    coverage: float = 0.999,
) -> NeighbourNoise:
    """Return the exact law of ``geometric(count, sensitivity=…, epsilon=…)`` and of its neighbour.

    The neighbour's true count is ``count + contribution`` (default: ``sensitivity``). The
    values shown run from ``count`` minus to ``count + contribution`` plus the half-width
    that covers ``coverage`` of the noise. The law is the mechanism's own
    (:func:`~deniable.explain.distributions.noise_law`); no data is read, no randomness drawn
    and no budget spent.

    Args:
        count: the true count without the target (an integer ≥ 0).
        epsilon: ε given to the mechanism.
        sensitivity: the sensitivity the noise is calibrated to (most rows one person may add).
        contribution: the rows the target actually adds (more than ``sensitivity`` shows what
            an under-calibrated mechanism leaks).
        coverage: the share of the noise the plotted range covers.

    Raises:
        InvalidParameter: a negative count, non-positive sensitivity/contribution, a bad ε.

    Examples:
        >>> nn = neighbour_noise(1000, epsilon=1, sensitivity=1, contribution=5)
        >>> nn.actual_epsilon
        5.0
    """
    if isinstance(count, bool) or not isinstance(count, int | np.integer) or count < 0:
        raise InvalidParameter("count must be an integer ≥ 0")
    sens = _positive_int(sensitivity, "sensitivity")
    contrib = sens if contribution is None else _positive_int(contribution, "contribution")
    eps = exact(epsilon, "epsilon")
    if eps == 0:
        raise InvalidParameter("epsilon must be > 0 for a noise distribution to exist")
    if not 0 < coverage < 1:
        raise InvalidParameter("coverage must be strictly between 0 and 1")
    law = noise_law("geometric", sensitivity=sens, budget=eps)
    reach = int(law.half_width(coverage))
    values = np.arange(int(count) - reach, int(count) + contrib + reach + 1, dtype=np.int64)
    return NeighbourNoise(
        count=int(count),
        contribution=contrib,
        sensitivity=sens,
        epsilon=eps,
        law=law,
        values=values,
        without=noise_pmf(law, values - int(count)),
        with_target=noise_pmf(law, values - (int(count) + contrib)),
    )
