"""The exact noise laws of deniable's mechanisms, read from the mechanisms themselves.

:func:`noise_law` calls a mechanism of :mod:`deniable.mechanisms` on an *empty* input with a
random source that hands out no words, and returns the :class:`~deniable.mechanisms.NoiseLaw`
the mechanism reports: the law it would add to a real input with the same public parameters
(sensitivity, ε or ρ). So an explanation can never drift from what a release actually does,
and no data is read, no randomness drawn and no budget spent.

:func:`noise_pmf` is the probability mass function of such a law on integer offsets (in grid
units): discrete Laplace ``P[k] = (1−α)/(1+α)·α^|k|``, ``α = e^(−1/t)`` (the law sampled by
:func:`deniable.noise.discrete_laplace`), or discrete Gaussian
``P[k] = e^(−k²/(2σ²)) / Σ_j e^(−j²/(2σ²))``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import numpy as np
import numpy.typing as npt

from deniable.accounting.loss import Number
from deniable.errors import InternalError, InvalidParameter
from deniable.mechanisms import NoiseLaw, Release, discrete_gaussian, gaussian, geometric, laplace

MechanismName = Literal["geometric", "laplace", "discrete_gaussian", "gaussian"]
MECHANISMS: tuple[MechanismName, ...] = ("geometric", "laplace", "discrete_gaussian", "gaussian")
"""The additive mechanisms whose noise law can be explained."""

F64 = npt.NDArray[np.float64]


class _NoDraws:
    """A random source for an empty input: it hands out zero words and refuses any other call."""

    @property
    def secure(self) -> bool:
        return True

    def words(self, n: int) -> npt.NDArray[np.uint64]:
        if n:
            raise InternalError("explaining a noise law must not draw randomness")
        return np.zeros(0, dtype=np.uint64)


def budget_name(mechanism: MechanismName) -> str:
    """``"ε"`` for the Laplace-type mechanisms, ``"ρ"`` for the Gaussian ones."""
    return "ρ" if mechanism in ("discrete_gaussian", "gaussian") else "ε"


def noise_law(mechanism: MechanismName, *, sensitivity: Number, budget: Number) -> NoiseLaw:
    """Return the noise law ``mechanism`` adds at this sensitivity and budget (ε, or ρ).

    Reads no data, draws no randomness, spends nothing: the mechanism runs on an empty input.

    Args:
        mechanism: ``"geometric"`` (integers, ε-DP), ``"laplace"`` (reals on a grid, ε-DP),
            ``"discrete_gaussian"`` (integers, ρ-zCDP) or ``"gaussian"`` (reals, ρ-zCDP).
        sensitivity: the query's sensitivity (L1; L2 for the Gaussian ones; an integer for
            ``geometric``).
        budget: ε for the Laplace-type mechanisms, ρ for the Gaussian ones.

    Raises:
        InvalidParameter: an unknown mechanism or parameters the mechanism refuses.

    Examples:
        >>> noise_law("geometric", sensitivity=5, budget=1)
        NoiseLaw(kind='discrete_laplace', parameter=Fraction(5, 1), granularity=1.0)
    """
    source = _NoDraws()
    ints = np.zeros(0, dtype=np.int64)
    reals = np.zeros(0, dtype=np.float64)
    run: dict[str, Callable[[], Release]] = {
        "geometric": lambda: geometric(
            ints, sensitivity=_integer(sensitivity), epsilon=budget, source=source
        ),
        "laplace": lambda: laplace(reals, sensitivity=sensitivity, epsilon=budget, source=source),
        "discrete_gaussian": lambda: discrete_gaussian(
            ints, sensitivity=sensitivity, rho=budget, source=source
        ),
        "gaussian": lambda: gaussian(reals, sensitivity=sensitivity, rho=budget, source=source),
    }
    if mechanism not in run:
        raise InvalidParameter(
            f"mechanism must be one of {', '.join(MECHANISMS)}, got {str(mechanism)[:40]!r}"
        )
    law = run[mechanism]().noise
    if law is None:
        raise InternalError(f"{mechanism} reported no noise law")
    return law


def _integer(sensitivity: Number) -> int:
    if isinstance(sensitivity, bool) or int(sensitivity) != sensitivity:
        raise InvalidParameter("sensitivity of geometric() must be a positive integer")
    return int(sensitivity)


def noise_pmf(law: NoiseLaw, offsets: npt.ArrayLike) -> F64:
    """Return ``P[noise = k·granularity]`` for each integer ``k`` in ``offsets`` (exact formula).

    Raises:
        InvalidParameter: offsets that are not integers.

    Examples:
        >>> law = noise_law("geometric", sensitivity=1, budget=1)
        >>> p = noise_pmf(law, [-1, 0, 1])
        >>> bool(abs(p[1] - math.tanh(0.5)) < 1e-15 and abs(p[0] / p[1] - math.exp(-1)) < 1e-15)
        True
    """
    k = np.asarray(offsets)
    integral = k.dtype.kind in "iu" or (
        k.dtype.kind == "f" and bool(np.all(np.isfinite(k))) and bool(np.all(k == np.round(k)))
    )
    if not integral:
        raise InvalidParameter("offsets must be integers (in units of the noise grid)")
    k = k.astype(np.float64)
    if law.kind == "discrete_laplace":
        t = float(law.parameter)
        # (1−α)/(1+α) = tanh(1/(2t)) without cancellation for large t.
        out: F64 = math.tanh(1.0 / (2.0 * t)) * np.exp(-np.abs(k) / t)
        return out
    if law.kind == "discrete_gaussian":
        s2 = float(law.parameter)
        reach = math.ceil(40.0 * math.sqrt(s2)) + 40  # e^(−800) beyond: below a double
        js = np.arange(-reach, reach + 1, dtype=np.float64)
        norm = float(np.exp(-(js**2) / (2.0 * s2)).sum())
        gauss: F64 = np.exp(-(k**2) / (2.0 * s2)) / norm
        return gauss
    raise InternalError(f"unknown noise law {law.kind!r}")
