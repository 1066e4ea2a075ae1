"""Real-valued noise on a power-of-two grid.

Floating-point Laplace noise leaks the true value through the set of doubles it can reach
(Mironov 2012). Here a real value is first rounded to the nearest multiple of a granularity
``g = 2^e``, and integer noise, in units of ``g``, is added to that integer. The released number
is ``(round(x/g) + Z)·g``, an exact multiple of ``g``, and ``g`` depends only on the public
noise scale. Rounding moves a value by at most ``g/2``, so the sensitivity in grid units is
``floor(Δ/g) + 1``; :func:`grid_sensitivity` gives it and the mechanisms calibrate to it.

The grid is chosen so that the noise scale is between 2^20 and 2^21 grid units: fine enough that
the rounding costs nothing visible, coarse enough for the samplers' fast path.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from deniable.errors import InvalidParameter
from deniable.noise.exact import RationalLike, positive_fraction, sensitivity_fraction

GRID_UNITS_LOG2 = 20

F64 = npt.NDArray[np.float64]


def grid_exponent(scale: RationalLike, units_log2: int = GRID_UNITS_LOG2) -> int:
    """Return ``e`` such that the grid ``2^e`` puts ``scale`` in ``[2^u, 2^(u+1))`` grid units.

    ``u`` is ``units_log2`` (20 by default; Gaussian noise uses 12 so that its sampler's
    tables stay small).

    Examples:
        >>> grid_exponent(1.0)
        -20
    """
    s = positive_fraction(scale, "scale")
    e = s.numerator.bit_length() - s.denominator.bit_length()  # 2^e ≤ s·2 and s < 2^(e+1)
    if Fraction(2) ** e > s:
        e -= 1
    return e - units_log2


def grid_sensitivity(sensitivity: RationalLike, exponent: int) -> int:
    """Return the integer sensitivity, in grid units, of a value rounded to the grid ``2^e``."""
    d = sensitivity_fraction(sensitivity)
    return int(d / Fraction(2) ** exponent) + 1


def snap(values: npt.ArrayLike, exponent: int) -> list[int] | npt.NDArray[np.int64]:
    """Round each finite value to the nearest multiple of ``2^e`` (ties to even), in grid units.

    Exact: scaling a double by a power of two is exact, and so is rounding it to an integer.
    Returns int64 when every unit count fits comfortably, Python ints otherwise.
    """
    x = np.asarray(values, dtype=np.float64)
    if not np.isfinite(x).all():
        raise InvalidParameter("values to be noised must be finite (clamp them first)")
    biggest = float(np.max(np.abs(x))) if x.size else 0.0
    if biggest < math.ldexp(1.0, 52 + exponent):
        return np.rint(np.ldexp(x, -exponent)).astype(np.int64)
    # Exact for every finite double, however large in grid units (round() of a Fraction
    # rounds half to even, like np.rint).
    step = Fraction(2) ** exponent
    return [round(Fraction(v) / step) for v in x.ravel().tolist()]


def unsnap(units: npt.ArrayLike | list[int], exponent: int) -> F64:
    """Return ``units·2^e`` as doubles.

    Exact whenever the result is below 2^53 grid units; beyond that the double nearest to the
    exact multiple is returned, which is still a multiple of ``2^e`` (the spacing of doubles
    there is a multiple of the grid) and is post-processing of the noisy integer.
    """
    if isinstance(units, list):
        return np.array([float(Fraction(u) * Fraction(2) ** exponent) for u in units])
    return np.ldexp(np.asarray(units, dtype=np.float64), exponent)
