"""The release object every mechanism returns, and exact intervals from its noise law."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from deniable.accounting.loss import PrivacyLoss
from deniable.errors import InvalidParameter
from deniable.noise.exact import exp_neg_bounds


def _check_level(level: float) -> float:
    if isinstance(level, bool) or not isinstance(level, numbers.Real) or not 0 < level < 1:
        raise InvalidParameter("level must be strictly between 0 and 1, e.g. 0.95")
    return float(level)


def laplace_half_width(scale: Fraction, level: float) -> int:
    """Smallest integer ``c`` with ``P[|Z| > c] ≤ 1 − level`` for discrete Laplace ``Z``.

    ``P[|Z| > c] = 2α^(c+1)/(1+α)`` with ``α = e^(−1/scale)``; the candidate from floats is
    checked against certified bounds, so the interval never covers less than ``level``.

    Examples:
        >>> laplace_half_width(Fraction(1), 0.5)
        1
    """
    a = Fraction(1) - Fraction(_check_level(level))
    t = float(scale)
    alpha = math.exp(-1.0 / t)
    guess = math.ceil(t * math.log(2.0 / (float(a) * (1.0 + alpha))) - 1.0)
    c = max(guess - 2, 0)

    def tail_upper(c: int) -> Fraction:
        prec = 96
        hi = exp_neg_bounds(Fraction(c + 1) / scale, prec)[1]
        lo_alpha = exp_neg_bounds(1 / scale, prec)[0]
        return Fraction(2 * hi, (1 << prec) + lo_alpha)

    while tail_upper(c) > a:
        c += 1
    return c


def gaussian_half_width(sigma2: Fraction, level: float) -> int:
    """Smallest integer ``c`` with a certified ``P[|Z| > c] ≤ 1 − level``, discrete Gaussian ``Z``.

    Uses ``P[|Z| > c] ≤ erfc(c/(σ√2))``: the tail sum is at most the Gaussian integral from
    ``c`` (the density decreases there) and the normaliser is at least ``σ√(2π)`` (Poisson
    summation). For small σ the exact sum is used instead when it gives a shorter interval.
    """
    a = 1.0 - _check_level(level)
    s = math.sqrt(float(sigma2))
    c = max(int(s * math.sqrt(2.0) * _erfc_inv(a)) - 1, 0)
    while math.erfc(c / (s * math.sqrt(2.0))) * (1 + 1e-12) > a:
        c += 1
    if s < 50:
        ks = np.arange(0, int(40 * s) + 50, dtype=np.float64)
        w = np.exp(-(ks**2) / (2 * float(sigma2)))
        total = w[0] + 2 * w[1:].sum()
        cdf_inside = (w[0] + 2 * np.cumsum(w[1:])) / total  # P[|Z| <= k], k = 1, 2, …
        ok = np.flatnonzero(1.0 - cdf_inside <= a * (1 - 1e-9))
        if w[0] / total >= 1.0 - a * (1 - 1e-9):
            return 0
        if ok.size:
            c = min(c, int(ok[0]) + 1)
    return c


def _erfc_inv(y: float) -> float:
    lo, hi = 0.0, 40.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if math.erfc(mid) > y:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(frozen=True, slots=True)
class NoiseLaw:
    """The law of the integer noise added, in units of ``granularity``."""

    kind: str  # "discrete_laplace" | "discrete_gaussian"
    parameter: Fraction  # scale t for Laplace, σ² for Gaussian (grid units)
    granularity: float  # 1.0 for integer mechanisms

    def half_width(self, level: float) -> float:
        """Half-width, in value units, of the interval covering the noise w.p. ≥ ``level``."""
        if self.kind == "discrete_laplace":
            c = laplace_half_width(self.parameter, level)
        else:
            c = gaussian_half_width(self.parameter, level)
        return c * self.granularity

    @property
    def std(self) -> float:
        """Standard deviation of the noise in value units."""
        if self.kind == "discrete_laplace":
            a = math.exp(-1.0 / float(self.parameter))
            return math.sqrt(2 * a) / (1 - a) * self.granularity
        return math.sqrt(float(self.parameter)) * self.granularity  # upper bound


@dataclass(frozen=True, slots=True)
class Release:
    """What a mechanism lets out: the noisy value(s) and what they cost.

    Attributes:
        value: the noisy value(s), int64 for integer mechanisms, float64 on a grid; for the
            exponential mechanism the chosen index; for randomized response the answers.
        loss: the privacy loss this release spends.
        mechanism: the mechanism's name.
        scale: the noise scale in value units (Laplace ``b``, Gaussian ``σ``); NaN if none.
        granularity: the grid the value is a multiple of (1 for integers), None if none.
        noise: the law of the additive noise, when there is one.
    """

    value: npt.NDArray[np.generic]
    loss: PrivacyLoss
    mechanism: str
    scale: float
    granularity: float | None = None
    noise: NoiseLaw | None = None

    def half_width(self, level: float = 0.95) -> float:
        """Half-width ``h`` such that ``[value − h, value + h]`` covers the truth w.p. ≥ level."""
        if self.noise is None:
            raise InvalidParameter(f"{self.mechanism} has no additive noise interval")
        return self.noise.half_width(level)

    def interval(
        self, level: float = 0.95
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """Per-element interval that contains the true value with probability ≥ ``level``.

        Exact from the noise distribution (not a normal approximation).
        """
        h = self.half_width(level)
        v = np.asarray(self.value, dtype=np.float64)
        return v - h, v + h
