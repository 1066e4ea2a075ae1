"""Confidence-interval helpers of the local estimators: normal quantiles and Clopper–Pearson.

Everything here is post-processing of already-randomised reports: it costs no privacy. The
exact binomial (Clopper–Pearson) interval and the incomplete beta function behind it are
:mod:`deniable.stats`' (one implementation for the whole package), re-exported here.
"""

from __future__ import annotations

from statistics import NormalDist

from deniable.errors import InvalidParameter
from deniable.stats import beta_cdf, clopper_pearson

__all__ = ["beta_cdf", "check_level", "clopper_pearson", "normal_quantile"]


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
