"""Gaussian-type mechanisms: exact discrete Gaussian on integers and on a grid; ρ-zCDP."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from deniable.accounting.loss import Rho
from deniable.errors import InvalidParameter
from deniable.mechanisms._values import add_units, as_integers
from deniable.mechanisms.laplace import MIN_GRID_EXPONENT
from deniable.mechanisms.release import NoiseLaw, Release
from deniable.noise.discrete_gaussian import discrete_gaussian as _dg
from deniable.noise.exact import RationalLike, positive_fraction, sensitivity_fraction
from deniable.noise.grid import grid_exponent, grid_sensitivity, snap, unsnap
from deniable.noise.source import RandomSource

GAUSSIAN_UNITS_LOG2 = 12
"""σ is 2^12 to 2^13 grid units: rounding adds at most one unit to Δ₂ (≤ 0.03% at ρ = 1/2),
and the exact table sampler applies."""


def gaussian_loss(sensitivity: RationalLike, sigma2: RationalLike) -> Rho:
    """Privacy map of the discrete Gaussian: ``ρ = Δ₂²/(2σ²)``.

    Examples:
        >>> gaussian_loss(1, 2)
        Rho(rho=0.25)
    """
    d = sensitivity_fraction(sensitivity)
    return Rho(rho=d * d / (2 * positive_fraction(sigma2, "sigma2")))


def discrete_gaussian(
    values: npt.ArrayLike,
    *,
    sensitivity: RationalLike,
    rho: RationalLike,
    source: RandomSource | None = None,
) -> Release:
    """Add exact discrete Gaussian noise with ``σ² = Δ₂²/(2ρ)`` to integer values; ρ-zCDP.

    Examples:
        >>> from deniable.noise.testing import SeededRandom
        >>> discrete_gaussian([3], sensitivity=1, rho=0.5, source=SeededRandom(2)).loss
        Rho(rho=0.5)
    """
    d = sensitivity_fraction(sensitivity)
    r = positive_fraction(rho, "rho")
    x = as_integers(values)
    s2 = d * d / (2 * r)
    z = _dg(s2, x.size, source=source).reshape(x.shape)
    return Release(
        value=x + z,
        loss=Rho(rho=r),
        mechanism="discrete_gaussian",
        scale=math.sqrt(float(s2)),
        granularity=1.0,
        noise=NoiseLaw("discrete_gaussian", s2, 1.0),
    )


def gaussian(
    values: npt.ArrayLike,
    *,
    sensitivity: RationalLike,
    rho: RationalLike,
    source: RandomSource | None = None,
) -> Release:
    """Release real values with discrete Gaussian noise on a power-of-two grid; ρ-zCDP.

    The grid is chosen from the public ``σ = Δ₂/√(2ρ)``; the sensitivity in grid units is
    ``floor(Δ₂/g) + 1`` (rounding), and ``σ²`` in grid units is set so the loss is exactly ρ.
    """
    d = sensitivity_fraction(sensitivity)
    r = positive_fraction(rho, "rho")
    x = np.asarray(values, dtype=np.float64)
    if not np.isfinite(x).all():
        raise InvalidParameter("values must be finite; clamp them to declared bounds first")
    sigma = float(d) / math.sqrt(2 * float(r))
    # Grid from min(Δ₂, σ) so that rounding never inflates Δ₂ by more than 2^-12, but coarse
    # enough that σ stays below 2^31 grid units (the sampler's range).
    e = max(
        grid_exponent(min(d, Fraction(sigma)), GAUSSIAN_UNITS_LOG2),
        grid_exponent(Fraction(sigma), 30),
    )
    if e < MIN_GRID_EXPONENT:
        raise InvalidParameter("sensitivity is too small for a representable noise grid")
    units_d = grid_sensitivity(d, e)
    s2 = Fraction(units_d * units_d) / (2 * r)
    z = _dg(s2, x.size, source=source)
    noisy = unsnap(add_units(snap(x.ravel(), e), z), e).reshape(x.shape)
    g = float(Fraction(2) ** e)
    return Release(
        value=noisy,
        loss=Rho(rho=r),
        mechanism="gaussian",
        scale=math.sqrt(float(s2)) * g,
        granularity=g,
        noise=NoiseLaw("discrete_gaussian", s2, g),
    )
