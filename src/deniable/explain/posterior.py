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

(ε, δ)-DP (:func:`approx_posterior_bounds`). No bound holds for every single output: with
δ > 0 a mechanism may, with probability up to δ, print the truth. What does hold is a bound
for every piece of *evidence* that is not too rare. Let the attacker reason from an event
``S`` of outputs (any conclusion they draw: "the count is above 1000", "this exact value"),
and let ``π₀ = P[M(D_out) ∈ S]`` and ``π₁ = P[M(D_in) ∈ S]``. (ε, δ)-DP gives
``π₁ ≤ e^ε·π₀ + δ`` and ``π₀ ≤ e^ε·π₁ + δ``; Bayes' rule
``P[in | S] = p·π₁ / (p·π₁ + (1 − p)·π₀)`` then gives, for evidence with ``π₀ ≥ π``
(upper bound) and ``π₁ ≥ π`` (lower bound)::

    p / (p + (1 − p)·m)  ≤  P[in | S]  ≤  p·m / (p·m + 1 − p),    m = e^ε + δ/π,

(the upper bound is increasing in π₁ and ``π₁ ≤ (e^ε + δ/π₀)·π₀``; the lower one likewise).
That is the pure bound at ``ε_eff = ln(e^ε + δ/π)`` (:func:`effective_epsilon`); with δ = 0
it is Proposition 1 for every π. It is tight: the two-output mechanism with
``P[a | out] = π``, ``P[a | in] = e^ε·π + δ`` is (ε, δ)-DP for small π and reaches the upper
bound on ``S = {a}`` (checked by brute force in the tests). Evidence rarer than π can move
the attacker further, up to certainty; it has probability at most ``e^ε·π + δ``.
"""

from __future__ import annotations

import math
from fractions import Fraction

from deniable.accounting.loss import (
    Epsilon,
    EpsilonDelta,
    Number,
    PrivacyLoss,
    Rho,
    exact,
    show,
)
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
    return _bounds(p, _exp_neg(eps))


def _exp_neg(eps: Fraction) -> float:
    """``e^(−ε)`` as a float (0 beyond the float range)."""
    try:
        return math.exp(-float(eps))
    except OverflowError:  # ε beyond the float range: e^(−ε) is 0
        return 0.0


def _bounds(p: float, t: float) -> tuple[float, float]:
    """The posterior range for prior ``p`` when likelihood ratios lie in ``[t, 1/t]``."""
    if p in (0.0, 1.0):
        return p, p  # certainty cannot move
    low = p * t / (p * t + (1 - p))
    high = p / (p + (1 - p) * t)
    return low, high


DEFAULT_EVIDENCE = Fraction(1, 100)
"""The default least probability ``π`` of the evidence an (ε, δ) bound speaks of (1%)."""


def _delta(delta: Number) -> Fraction:
    d = exact(delta, "delta")
    if not d < 1:
        raise InvalidParameter(f"delta must be in [0, 1) (e.g. 1e-6), got {show(d, 6)}")
    return d


def _evidence(evidence: Number) -> Fraction:
    if isinstance(evidence, bool) or not isinstance(evidence, Fraction | int | float):
        raise InvalidParameter("evidence must be a probability in (0, 1], e.g. 0.01")
    if isinstance(evidence, float) and not math.isfinite(evidence):
        raise InvalidParameter("evidence must be a probability in (0, 1], e.g. 0.01")
    if not 0 < evidence <= 1:
        raise InvalidParameter(
            f"evidence must be a probability in (0, 1], e.g. 0.01, got {float(evidence):.6g}"
        )
    return Fraction(evidence)


def split_loss(
    epsilon: Number | PrivacyLoss, delta: Number | None = None
) -> tuple[Fraction, Fraction]:
    """Return exact ``(ε, δ)`` from a number and a δ, or from an ``Epsilon``/``EpsilonDelta``.

    Raises:
        InvalidParameter: a negative/non-finite ε, δ outside ``[0, 1)``, a δ given twice (in
            the loss and as ``delta``), or a ρ-zCDP loss.
    """
    if isinstance(epsilon, EpsilonDelta):
        if delta is not None:
            raise InvalidParameter("delta is given twice: in the EpsilonDelta and as delta")
        return epsilon.epsilon, epsilon.delta
    if isinstance(epsilon, Rho):
        raise InvalidParameter(
            "posterior bounds are stated for (ε, δ)-DP; for a ρ-zCDP loss convert it first "
            "(deniable.accounting.conversions.zcdp_to_approx)"
        )
    eps = epsilon.epsilon if isinstance(epsilon, Epsilon) else exact(epsilon, "epsilon")
    return eps, Fraction(0) if delta is None else _delta(delta)


def effective_epsilon(
    epsilon: Number, delta: Number, *, evidence: Number = DEFAULT_EVIDENCE
) -> float:
    """Return ``ln(e^ε + δ/π)``: the pure ε that (ε, δ) amounts to for evidence of probability ≥ π.

    Raises:
        InvalidParameter: for a negative/non-finite ε, δ outside ``[0, 1)``, π outside ``(0, 1]``.

    Examples:
        >>> effective_epsilon(1, 0)
        1.0
        >>> round(effective_epsilon(0, 0.01, evidence=0.1), 12) == round(math.log(1.1), 12)
        True
    """
    eps = exact(epsilon, "epsilon")
    d, pi = _delta(delta), _evidence(evidence)
    # ln(e^ε + r) = ε + log1p(r·e^(−ε)): no overflow for large ε.
    return float(eps) + math.log1p(float(d / pi) * _exp_neg(eps))


def approx_posterior_bounds(
    prior: Number,
    epsilon: Number | PrivacyLoss,
    delta: Number | None = None,
    *,
    evidence: Number = DEFAULT_EVIDENCE,
) -> tuple[float, float]:
    """Return ``(low, high)``: the posterior range after an (ε, δ)-DP release (module docstring).

    The bound holds for every piece of evidence the attacker could reason from that has
    probability at least ``evidence`` (π) in the world where it would move them: the upper bound
    for evidence with ``P[S | target absent] ≥ π``, the lower one for
    ``P[S | target present] ≥ π``. It is Proposition 1 with ε replaced by
    ``ln(e^ε + δ/π)``; with δ = 0 it equals :func:`posterior_bounds`. Rarer evidence is not
    bounded (with probability up to about δ an (ε, δ) mechanism may reveal the truth).

    Args:
        prior: the attacker's prior probability that the target is in the data, in ``[0, 1]``.
        epsilon: ε ``≥ 0`` (a number, an ``Epsilon`` or an ``EpsilonDelta``).
        delta: δ in ``[0, 1)``, unless ``epsilon`` is an ``EpsilonDelta`` (default 0).
        evidence: π in ``(0, 1]``, the least probability of the evidence considered.

    Raises:
        InvalidParameter: for a prior outside ``[0, 1]``, a negative or non-finite ε, δ outside
            ``[0, 1)``, π outside ``(0, 1]``, or a ρ-zCDP loss.

    Examples:
        >>> low, high = approx_posterior_bounds(0.5, math.log(3), 0.01, evidence=0.1)
        >>> round(high, 12)  # m = 3 + 0.1 = 3.1
        0.756097560976
        >>> approx_posterior_bounds(0.5, 1, 0) == posterior_bounds(0.5, 1)
        True
    """
    p = _probability(prior)
    eps, d = split_loss(epsilon, delta)
    pi = _evidence(evidence)
    if d == 0:
        return _bounds(p, _exp_neg(eps))
    t = _exp_neg(eps)
    # 1/m = 1/(e^ε + δ/π) = e^(−ε)/(1 + (δ/π)·e^(−ε)), finite for any ε.
    return _bounds(p, t / (1.0 + float(d / pi) * t))
