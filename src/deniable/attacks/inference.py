"""The attacker's arithmetic: likelihoods of noisy counts and Bayesian posteriors.

The attacker knows the mechanism (Kerckhoffs): a count released with discrete Laplace noise
of scale ``b`` (``P[Z = k] = (1−α)/(1+α)·α^|k|``, ``α = e^(−1/b)``; ``b = 1/ε`` for a count
of sensitivity 1), possibly clamped at 0 (``nonnegative=True`` in deniable: post-processing;
deniable's counts are unclamped by default). Exact
answers are the limit ``b = 0``. Everything is in log space; nothing here touches data.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from deniable.explain.posterior import posterior_bounds

F64 = npt.NDArray[np.float64]


def _log_norm(scale: float) -> float:
    """``log((1 − α)/(1 + α))`` with ``α = e^(−1/scale)``, computed without cancellation."""
    return math.log(-math.expm1(-1.0 / scale)) - math.log1p(math.exp(-1.0 / scale))


def log_likelihood(
    observed: float | npt.ArrayLike,
    true: float | npt.ArrayLike,
    scale: float,
    *,
    clamped: bool = False,
) -> F64:
    """``log P[answer = observed | true count]`` for a discrete Laplace count of scale ``b``.

    Args:
        observed: the released value(s).
        true: the hypothesised true count(s) (broadcast against ``observed``).
        scale: ``b`` (0 means an exact answer: likelihood 1 or 0).
        clamped: the release is ``max(true + Z, 0)`` (deniable's ``nonnegative=True``): an
            observed 0 has probability ``P[Z ≤ −true]``.

    Examples:
        >>> float(np.exp(log_likelihood(3, 3, 1.0)))  # (1 − 1/e)/(1 + 1/e)
        0.46211715726000974
        >>> float(log_likelihood(3, 2, 0.0))
        -inf
    """
    y = np.asarray(observed, dtype=float)
    c = np.asarray(true, dtype=float)
    y, c = np.broadcast_arrays(y, c)
    if scale == 0:
        return np.where(y == c, 0.0, -np.inf)
    out = _log_norm(scale) - np.abs(y - c) / scale
    if clamped:
        # P[Z ≤ −c] = α^c/(1 + α) for c ≥ 0; 1 − α^(1−c)/(1 + α) for c < 0.
        a = math.exp(-1.0 / scale)
        tail = np.where(
            c >= 0,
            -c / scale - math.log1p(a),
            np.log1p(-np.exp(-(1 - np.minimum(c, 0)) / scale) / (1 + a)),
        )
        out = np.where(y <= 0, tail, out)
    return np.asarray(out, dtype=float)


def posterior_from_log_odds(log_odds: float) -> float:
    """The probability whose log-odds is ``log_odds`` (saturates cleanly at 0 and 1)."""
    if log_odds >= 0:
        return 1.0 / (1.0 + math.exp(-log_odds))
    e = math.exp(log_odds)
    return e / (1.0 + e)


def logit(p: float) -> float:
    """Log-odds of a probability in (0, 1)."""
    return math.log(p) - math.log1p(-p)


def success_bound(prior: float, epsilon: float | Fraction) -> float:
    """Largest probability that any guess of a secret bit is right after ``ε`` of loss.

    With prior ``p`` and an ε-DP view, the posterior lies in ``posterior_bounds(p, ε)``;
    a guess is right with probability at most ``max(high, 1 − low)``.

    Examples:
        >>> round(success_bound(0.5, math.log(3)), 12)
        0.75
    """
    low, high = posterior_bounds(prior, epsilon)
    return max(high, 1.0 - low)
