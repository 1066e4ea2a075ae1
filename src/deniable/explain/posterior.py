"""What an ε-DP release lets an attacker conclude: bounds on the posterior (Bayesian reading).

Desfontaines' Proposition 1: an attacker who believes with probability ``p`` (the prior) that
a target is in the data, and then sees the output of an ε-DP mechanism, ends with a posterior
in ``[p / (p + (1−p)e^ε),  p·e^ε / (1 + p(e^ε − 1))]``, whatever they knew besides and
whatever the output was. In log-odds the statement is simply
``|logit(posterior) − logit(prior)| ≤ ε``.

Examples: ε = ln 3 and p = 50% give 25%..75%; ε = 5 and p = 10% give at most 94.3%.

These are explanations, not charges: the values are floats, computed in a form that neither
overflows nor cancels (with ``t = e^(−ε) ∈ (0, 1]``, ``low = pt/(pt + 1 − p)`` and
``high = p/(p + (1 − p)t)``), accurate to a few units in the last place.
"""

from __future__ import annotations

import math
from fractions import Fraction

from deniable.accounting.loss import Epsilon, EpsilonDelta, Number, PrivacyLoss, Rho, exact
from deniable.errors import InvalidParameter


def pure_epsilon(epsilon: Number | PrivacyLoss) -> Fraction:
    """Return ε (exact, ``≥ 0``) from a number, an ``Epsilon`` or an ``EpsilonDelta`` with δ = 0.

    Raises:
        InvalidParameter: for a negative/non-finite ε, ``δ > 0`` or a ρ-zCDP loss, for which the
            posterior bounds of pure ε-DP do not hold.
    """
    if isinstance(epsilon, Epsilon):
        return epsilon.epsilon
    if isinstance(epsilon, EpsilonDelta):
        if epsilon.delta > 0:
            raise InvalidParameter(
                "posterior bounds are stated for pure ε-DP; with δ > 0 they can fail with "
                "probability up to about δ, so pass the pure ε (δ = 0) you want explained"
            )
        return epsilon.epsilon
    if isinstance(epsilon, Rho):
        raise InvalidParameter(
            "posterior bounds are stated for pure ε-DP; a ρ-zCDP loss has no pure ε: "
            "pass an Epsilon"
        )
    return exact(epsilon, "epsilon")


def _probability(prior: Number) -> float:
    if isinstance(prior, bool) or not isinstance(prior, Fraction | int | float):
        raise InvalidParameter("prior must be a probability (a number in [0, 1])")
    if isinstance(prior, float) and math.isnan(prior):
        raise InvalidParameter("prior must be a probability in [0, 1], got nan")
    if not 0 <= prior <= 1:
        raise InvalidParameter(
            f"prior must be a probability in [0, 1] (e.g. 0.5 for 50%), got {float(prior):.6g}"
        )
    return float(prior)


def posterior_bounds(prior: Number, epsilon: Number | PrivacyLoss) -> tuple[float, float]:
    """Return ``(low, high)``: the range of an attacker's posterior after an ε-DP release.

    Args:
        prior: the attacker's prior probability that the target is in the data, in ``[0, 1]``.
        epsilon: ε ``≥ 0``, as a number, an ``Epsilon``, or an ``EpsilonDelta`` with δ = 0.

    Raises:
        InvalidParameter: for a prior outside ``[0, 1]`` (or NaN), a negative or non-finite ε,
            or a loss that is not pure ε-DP.

    Examples:
        >>> low, high = posterior_bounds(0.5, math.log(3))
        >>> round(low, 12), round(high, 12)
        (0.25, 0.75)
        >>> round(posterior_bounds(0.1, 5)[1], 4)
        0.9428
    """
    p = _probability(prior)
    eps = pure_epsilon(epsilon)
    if p in (0.0, 1.0):
        return p, p  # certainty cannot move
    try:
        t = math.exp(-float(eps))
    except OverflowError:  # ε beyond the float range: e^(−ε) is 0
        t = 0.0
    low = p * t / (p * t + (1 - p))
    high = p / (p + (1 - p) * t)
    return low, high
