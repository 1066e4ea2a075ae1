"""Laplace-type mechanisms: discrete Laplace on integers, and on a power-of-two grid for reals.

Neighbouring inputs differ by adding or removing one privacy unit; the caller states the L1
sensitivity Δ of the query under that relation.
"""

from __future__ import annotations

import numbers
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from deniable.accounting.loss import Epsilon
from deniable.errors import InvalidParameter
from deniable.mechanisms._values import add_units, as_integers
from deniable.mechanisms.release import NoiseLaw, Release
from deniable.noise.discrete_laplace import discrete_laplace
from deniable.noise.exact import RationalLike, positive_fraction, sensitivity_fraction
from deniable.noise.grid import grid_exponent, grid_sensitivity, snap, unsnap
from deniable.noise.source import RandomSource

MIN_GRID_EXPONENT = -1000
"""Grids finer than 2^-1000 are refused: their multiples are not representable as doubles."""


def laplace_grid_exponent(sensitivity: Fraction, epsilon: Fraction) -> int:
    """The grid ``2^e`` for Laplace noise of scale ``b = Δ/ε`` (public parameters only).

    Preferably ``Δ`` spans 2^20 grid units (rounding inflates the sensitivity by < 2^-20); but
    the scale in grid units, ``(floor(Δ/g) + 1)/ε``, must stay at most 2^32 for the sampler, so
    for ``ε < 2^-10`` the grid is set from ``b`` (2^30 to 2^31 units) and the inflation is
    ``1/(ε·2^30)``: 0.1% at ε = 10^-6. ε below 2^-31 is refused.

    Examples:
        >>> laplace_grid_exponent(Fraction(1), Fraction(1))
        -20
    """
    if epsilon < Fraction(1, 2**31):
        raise InvalidParameter("epsilon below 2^-31 (about 4.7e-10) is not supported")
    e = max(
        grid_exponent(min(sensitivity, sensitivity / epsilon), 20),
        grid_exponent(sensitivity / epsilon, 30),
    )
    if e < MIN_GRID_EXPONENT:
        raise InvalidParameter("sensitivity is too small for a representable noise grid")
    return e


def laplace_loss(sensitivity: RationalLike, scale: RationalLike) -> Epsilon:
    """Privacy map of discrete Laplace on integers: ε = Δ/t for integer sensitivity Δ.

    Examples:
        >>> laplace_loss(2, 4)
        Epsilon(epsilon=0.5)
    """
    return Epsilon(epsilon=sensitivity_fraction(sensitivity) / positive_fraction(scale, "scale"))


def geometric(
    values: npt.ArrayLike,
    *,
    sensitivity: int,
    epsilon: RationalLike,
    source: RandomSource | None = None,
) -> Release:
    """Add two-sided geometric (discrete Laplace) noise to integer values; ε-DP.

    The scale is ``t = Δ/ε`` exactly, i.e. ``α = e^(−ε/Δ)``, so the loss is exactly ``ε`` for an
    integer query of L1 sensitivity ``Δ``.

    Examples:
        >>> from deniable.noise.testing import SeededRandom
        >>> r = geometric([10, 20], sensitivity=1, epsilon=1.0, source=SeededRandom(1))
        >>> r.loss
        Epsilon(epsilon=1)
    """
    if not isinstance(sensitivity, numbers.Integral) or isinstance(sensitivity, bool):
        raise InvalidParameter("sensitivity of geometric() must be a positive integer")
    sensitivity = int(sensitivity)
    if sensitivity < 1:
        raise InvalidParameter("sensitivity of geometric() must be a positive integer")
    eps = positive_fraction(epsilon, "epsilon")
    x = as_integers(values)
    t = Fraction(sensitivity) / eps
    z = discrete_laplace(t, x.size, source=source).reshape(x.shape)
    return Release(
        value=x + z,
        loss=Epsilon(epsilon=eps),
        mechanism="geometric",
        scale=float(t),
        granularity=1.0,
        noise=NoiseLaw("discrete_laplace", t, 1.0),
    )


def laplace(
    values: npt.ArrayLike,
    *,
    sensitivity: RationalLike,
    epsilon: RationalLike,
    source: RandomSource | None = None,
) -> Release:
    """Release real values with Laplace-type noise on a power-of-two grid; ε-DP.

    Each value is rounded to the grid ``g = 2^e`` chosen from the public scale ``Δ/ε``, then
    discrete Laplace noise in grid units is added with scale ``(floor(Δ/g) + 1)/ε`` — the
    rounding can move neighbouring values one more grid step apart, and that is paid for. The
    released values are exact multiples of ``g`` (``Release.granularity``).

    Examples:
        >>> from deniable.noise.testing import SeededRandom
        >>> r = laplace([0.5], sensitivity=1.0, epsilon=0.5, source=SeededRandom(1))
        >>> float(r.value[0] / r.granularity).is_integer()
        True
    """
    d = sensitivity_fraction(sensitivity)
    eps = positive_fraction(epsilon, "epsilon")
    x = np.asarray(values, dtype=np.float64)
    if not np.isfinite(x).all():
        raise InvalidParameter("values must be finite; clamp them to declared bounds first")
    e = laplace_grid_exponent(d, eps)
    units_d = grid_sensitivity(d, e)
    t = Fraction(units_d) / eps
    units = snap(x.ravel(), e)
    z = discrete_laplace(t, x.size, source=source)
    noisy = unsnap(add_units(units, z), e).reshape(x.shape)
    g = float(Fraction(2) ** e)
    return Release(
        value=noisy,
        loss=Epsilon(epsilon=eps),
        mechanism="laplace",
        scale=float(t) * g,
        granularity=g,
        noise=NoiseLaw("discrete_laplace", t, g),
    )
