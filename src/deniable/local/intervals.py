"""Confidence-interval helpers of the local estimators: normal quantiles and Clopper–Pearson.

Everything here is post-processing of already-randomised reports: it costs no privacy.
scipy is not a runtime dependency, so the regularised incomplete beta function behind the
Clopper–Pearson bounds is computed here (continued fraction, modified Lentz; accurate to
about 1e-13, checked against scipy in the tests) and inverted by bisection.
"""

from __future__ import annotations

import math
from statistics import NormalDist

from deniable.errors import InvalidParameter

_CF_EPS = 1e-15
_CF_TINY = 1e-300
_CP_SLACK = 1e-11


def check_level(level: float) -> float:
    """Return ``level`` if it is a confidence level in (0, 1), else raise InvalidParameter."""
    if isinstance(level, bool) or not isinstance(level, int | float) or not 0 < level < 1:
        raise InvalidParameter("level must be a number in (0, 1), e.g. 0.95")
    return float(level)


def normal_quantile(level: float) -> float:
    """Return ``z`` with ``P[|Z| ≤ z] = level`` for a standard normal ``Z`` (two-sided).

    Examples:
        >>> round(normal_quantile(0.95), 4)
        1.96
    """
    return NormalDist().inv_cdf(0.5 + check_level(level) / 2)


def _beta_cf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = 1.0
    d = 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _CF_TINY else _CF_TINY)
    h = d
    m = 1
    # Convergence takes O(sqrt(max(a, b))) terms; the cap is far above that for n ≤ 10^12.
    while m < 10_000_000:
        m2 = 2 * m
        for aa in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > _CF_TINY else _CF_TINY)
            c = 1.0 + aa / c
            c = c if abs(c) > _CF_TINY else _CF_TINY
            step = c * d
            h *= step
        if abs(step - 1.0) < _CF_EPS:
            return h
        m += 1
    raise InvalidParameter("incomplete beta did not converge")  # pragma: no cover


def beta_cdf(x: float, a: float, b: float) -> float:
    """Regularised incomplete beta ``I_x(a, b)``: the CDF of Beta(a, b) at ``x``.

    Examples:
        >>> round(beta_cdf(0.5, 2.0, 2.0), 12)
        0.5
    """
    if a <= 0 or b <= 0:
        raise InvalidParameter("beta_cdf needs a, b > 0")
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    front = math.exp(log_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_cf(a, b, x) / a
    return 1.0 - front * _beta_cf(b, a, 1.0 - x) / b


def _beta_quantile(prob: float, a: float, b: float) -> float:
    """``x`` with ``I_x(a, b) = prob``: bracketing regula falsi (Illinois), then bisection.

    The CDF is increasing in ``x``, so ``[lo, hi]`` always brackets the root; the Illinois
    steps converge superlinearly and a bisection step is forced whenever they stall.
    """
    lo, hi = 0.0, 1.0
    f_lo, f_hi = -prob, 1.0 - prob
    side = 0
    for i in range(300):
        if hi - lo <= 1e-15 * max(hi, 1e-300):
            break
        if i % 4 == 3 or f_hi == f_lo:
            x = (lo + hi) / 2  # guaranteed progress
        else:
            x = (lo * f_hi - hi * f_lo) / (f_hi - f_lo)
            if not lo < x < hi:
                x = (lo + hi) / 2
        fx = beta_cdf(x, a, b) - prob
        if fx == 0:
            return x
        if fx < 0:
            lo, f_lo = x, fx
            if side == -1:
                f_hi /= 2
            side = -1
        else:
            hi, f_hi = x, fx
            if side == 1:
                f_lo /= 2
            side = 1
    return (lo + hi) / 2


def clopper_pearson(successes: int, trials: int, level: float) -> tuple[float, float]:
    """Exact (Clopper–Pearson) two-sided interval for a binomial proportion.

    For ``X ~ Binomial(n, θ)`` the interval contains ``θ`` with probability at least
    ``level`` for every ``θ``: the lower end is the ``(1−level)/2`` quantile of
    ``Beta(x, n−x+1)``, the upper end the ``(1+level)/2`` quantile of ``Beta(x+1, n−x)``.

    Examples:
        >>> lo, hi = clopper_pearson(400, 1000, 0.95)
        >>> round(lo, 4), round(hi, 4)
        (0.3695, 0.4311)
    """
    if not isinstance(trials, int) or not isinstance(successes, int) or trials < 1:
        raise InvalidParameter("clopper_pearson needs integer trials ≥ 1")
    if not 0 <= successes <= trials:
        raise InvalidParameter("successes must be between 0 and trials")
    tail = (1.0 - check_level(level)) / 2
    lower = 0.0 if successes == 0 else _beta_quantile(tail, successes, trials - successes + 1)
    upper = (
        1.0 if successes == trials else _beta_quantile(1 - tail, successes + 1, trials - successes)
    )
    # Widen by far more than the ~1e-13 numerical error, so the coverage claim is not eroded.
    return max(0.0, lower - _CP_SLACK), min(1.0, upper + _CP_SLACK)
