"""Privacy amplification by Bernoulli sampling (Li–Qardaji–Su 2012, Theorem 1).

If every privacy unit is kept independently with probability ``β`` and an ``(ε, δ)``-DP
mechanism runs on the sample, the whole is ``(ln(1 + β(e^ε − 1)), βδ)``-DP with respect to the
original data. The amplified ε is irrational in general; :func:`amplify_bernoulli` rounds it
*up* and :func:`epsilon_for_sampled`, which goes the other way (the ε a mechanism may spend
on the sample to meet a target), rounds *down*, both through the certified bounds of
:mod:`deniable.accounting.bounds`.

The sample must be drawn with a secret, secure coin per unit (``deniable.noise.bernoulli``)
and must not be revealed: the guarantee is about the sampling *and* the mechanism together.
"""

from __future__ import annotations

import math
from fractions import Fraction

from deniable.accounting.bounds import (
    expm1_interval,
    ln_interval,
    log1p_interval,
    round_down,
    round_up,
)
from deniable.accounting.conversions import convert
from deniable.accounting.loss import Epsilon, EpsilonDelta, Number, exact
from deniable.errors import InvalidParameter


def sampling_rate(rate: Number) -> Fraction:
    """Validate a Bernoulli sampling rate ``β ∈ (0, 1]`` and return it exactly."""
    beta = exact(rate, "rate")
    if not 0 < beta <= 1:
        raise InvalidParameter("the sampling rate must be in (0, 1]")
    return beta


_LARGE = 10_000
"""Above this ε, bound analytically instead of evaluating ``e^ε`` (≈ 14 000 bits)."""


def amplified_epsilon_upper(epsilon: Fraction, beta: Fraction) -> Fraction:
    """A Fraction ``≥ ln(1 + β(e^ε − 1))``, and never above ``ε`` (which is always valid)."""
    if beta == 1 or epsilon == 0:
        return epsilon
    if epsilon > _LARGE:
        # 1 + β(e^ε − 1) ≤ βe^ε(1 + e^(−ε)/β), so the log is ≤ ε + ln β + e^(−ε)/β, and
        # e^(−ε) ≤ 2^(−ε) ≤ 2^(−min(⌊ε⌋, 2000)).
        _, ln_beta_hi = ln_interval(beta)
        tail = Fraction(1, 2 ** min(math.floor(epsilon), 2000)) / beta
        return min(round_up(epsilon + ln_beta_hi + tail), epsilon)
    _, grow_hi = expm1_interval(epsilon)
    _, out_hi = log1p_interval(beta * grow_hi)
    return min(round_up(out_hi), epsilon)


def amplify_bernoulli(loss: Epsilon | EpsilonDelta, rate: Number) -> EpsilonDelta:
    """Return the loss of running ``loss``'s mechanism on a Bernoulli(``rate``) sample.

    The result is ``(ln(1 + β(e^ε − 1)), βδ)`` with the ε rounded up; it is never larger than
    ``loss`` component-wise, and equals it at ``β = 1``.

    Args:
        loss: the ``(ε, δ)`` (or pure ε) loss of the mechanism run on the sample.
        rate: the probability ``β ∈ (0, 1]`` with which each privacy unit is kept.

    Raises:
        InvalidParameter: for a ρ-zCDP loss (the theorem is about ``(ε, δ)``: convert first
            with ``zcdp_to_approx``), or a rate outside ``(0, 1]``.

    Examples:
        >>> out = amplify_bernoulli(Epsilon(epsilon=1), 0.1)
        >>> round(float(out.epsilon), 6)
        0.158565
        >>> amplify_bernoulli(EpsilonDelta(epsilon=2, delta=1e-6), 1)
        EpsilonDelta(epsilon=2, delta=1e-06)
    """
    if not isinstance(loss, Epsilon | EpsilonDelta):
        raise InvalidParameter(
            "amplification by sampling is stated for (ε, δ) losses; convert a ρ-zCDP loss "
            "first with deniable.accounting.zcdp_to_approx(loss, delta=...)"
        )
    beta = sampling_rate(rate)
    per = convert(loss, EpsilonDelta)
    return EpsilonDelta(epsilon=amplified_epsilon_upper(per.epsilon, beta), delta=beta * per.delta)


def epsilon_for_sampled(target: Epsilon | Number, rate: Number) -> Epsilon:
    """The largest ε (rounded down) to spend on a Bernoulli(``rate``) sample to meet ``target``.

    This inverts :func:`amplify_bernoulli`: the exact value is ``ln(1 + (e^t − 1)/β)`` for the
    target ``t``; the returned ε is at most that, at least ``t``, and satisfies
    ``amplify_bernoulli(Epsilon(epsilon=ε), rate).epsilon ≤ t`` exactly (checked before
    returning).

    Raises:
        InvalidParameter: for a negative/non-finite target or a rate outside ``(0, 1]``.

    Examples:
        >>> target = Epsilon(epsilon=0.25)
        >>> out = epsilon_for_sampled(target, 0.1)
        >>> round(float(out.epsilon), 6)
        1.345539
        >>> amplify_bernoulli(out, 0.1).epsilon <= target.epsilon
        True
    """
    t = target.epsilon if isinstance(target, Epsilon) else exact(target, "target epsilon")
    beta = sampling_rate(rate)
    if beta == 1 or t == 0 or t > _LARGE:
        return Epsilon(epsilon=t)  # t itself is always safe; above _LARGE we settle for it
    grow_lo, _ = expm1_interval(t)
    out_lo, _ = log1p_interval(grow_lo / beta)
    candidate = max(round_down(out_lo), t)
    # Verify with the very rounding amplify_bernoulli charges; step down if it lands above t.
    for _ in range(64):
        if amplified_epsilon_upper(candidate, beta) <= t:
            return Epsilon(epsilon=candidate)
        candidate = max(round_down(candidate - candidate / 2**52), t)
    return Epsilon(epsilon=t)  # always valid: amplification never increases ε
