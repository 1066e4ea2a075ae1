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
    e = grid_exponent(d / eps)
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
