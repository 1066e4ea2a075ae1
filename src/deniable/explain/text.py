"""Plain-language explanations of a privacy loss."""

from __future__ import annotations

import math

from deniable.accounting.loss import Number, PrivacyLoss, show
from deniable.explain.posterior import (
    DEFAULT_EVIDENCE,
    approx_posterior_bounds,
    posterior_bounds,
    pure_epsilon,
    split_loss,
)

_MAX_DECIMALS = 12


def percent(x: float, *, rounding: str = "nearest") -> str:
    """Format a probability as a percentage with a sensible number of decimals.

    One decimal by default; near 0% or 100% enough decimals to show two significant digits of
    the distance to the end (at most 12). ``rounding`` is ``"up"``, ``"down"`` or
    ``"nearest"``; ``"up"``/``"down"`` round in that direction except for floating-point noise
    below a millionth of the last shown digit, so that 75.00000000000001% prints as 75%.

    Examples:
        >>> percent(0.9428256, rounding="up")
        '94.3%'
        >>> percent(0.000749, rounding="down")
        '0.074%'
        >>> percent(0.5)
        '50%'
    """
    p = 100 * x
    decimals = 1
    distance = min(p, 100 - p)
    if 0 < distance < 1:
        decimals = min(_MAX_DECIMALS, 1 - math.floor(math.log10(distance)))
    scaled = p * 10**decimals
    if rounding == "up":
        digits = math.ceil(scaled - 1e-6)
    elif rounding == "down":
        digits = math.floor(scaled + 1e-6)
    else:
        digits = round(scaled)
    text = f"{digits / 10**decimals:.{decimals}f}".rstrip("0").rstrip(".")
    return f"{text}%"


def explain_epsilon(epsilon: Number | PrivacyLoss, prior: Number = 0.5) -> str:
    """Say in one plain sentence what ε means for an attacker with the given prior.

    The numbers are :func:`~deniable.explain.posterior.posterior_bounds`, the upper one
    rounded up and the lower one rounded down.

    Raises:
        InvalidParameter: as :func:`~deniable.explain.posterior.posterior_bounds`.

    Examples:
        >>> print(explain_epsilon(math.log(3)))
        With ε = 1.099, an attacker who was 50% sure that a person is in the data can become at most 75% sure after seeing the result (and no less than 25%).
    """  # noqa: E501
    eps = pure_epsilon(epsilon)
    low, high = posterior_bounds(prior, eps)
    return (
        f"With ε = {show(eps, 4)}, an attacker who was {percent(float(prior))} sure that a "
        f"person is in the data can become at most {percent(high, rounding='up')} sure after "
        f"seeing the result (and no less than {percent(low, rounding='down')})."
    )


def explain_loss(
    epsilon: Number | PrivacyLoss,
    delta: Number | None = None,
    prior: Number = 0.5,
    *,
    evidence: Number = DEFAULT_EVIDENCE,
) -> str:
    """Say in plain words what an ε or (ε, δ) guarantee means for an attacker with ``prior``.

    With δ = 0 this is :func:`explain_epsilon`. With δ > 0 the numbers are
    :func:`~deniable.explain.posterior.approx_posterior_bounds` for evidence of probability at
    least ``evidence`` (rounded outwards), and the sentence says that rarer evidence is not
    covered.

    Raises:
        InvalidParameter: as :func:`~deniable.explain.posterior.approx_posterior_bounds`.

    Examples:
        >>> print(explain_loss(math.log(3), 1e-6))
        With ε = 1.099 and δ = 1e-06, an attacker who was 50% sure that a person is in the data can become at most 75.1% sure after seeing the result (and no less than 24.9%), from any evidence that had at least a 1% chance to appear; rarer evidence can tell more, which is why δ must be tiny.
    """  # noqa: E501
    eps, d = split_loss(epsilon, delta)
    if d == 0:
        return explain_epsilon(eps, prior)
    low, high = approx_posterior_bounds(prior, eps, d, evidence=evidence)
    return (
        f"With ε = {show(eps, 4)} and δ = {show(d, 3)}, an attacker who was "
        f"{percent(float(prior))} sure that a person is in the data can become at most "
        f"{percent(high, rounding='up')} sure after seeing the result (and no less than "
        f"{percent(low, rounding='down')}), from any evidence that had at least a "
        f"{percent(float(evidence))} chance to appear; rarer evidence can tell more, which is "
        "why δ must be tiny."
    )
