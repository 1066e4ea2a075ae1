"""Input handling shared by the additive mechanisms."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from deniable.errors import InvalidParameter

_SAFE_INT = 2**62


def as_integers(values: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Return ``values`` as int64, refusing non-integers and magnitudes that could overflow."""
    arr = np.asarray(values)
    if arr.dtype.kind == "b" or arr.dtype.kind not in "iu":
        if arr.dtype.kind == "O" and all(isinstance(v, int) for v in arr.ravel()):
            pass
        else:
            raise InvalidParameter("this mechanism needs integer values; use laplace() for reals")
    if arr.size and max(abs(int(arr.max())), abs(int(arr.min()))) >= _SAFE_INT:
        raise InvalidParameter("integer values must be below 2^62 in magnitude")
    return arr.astype(np.int64)


def add_units(
    units: npt.NDArray[np.int64] | list[int], noise: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64] | list[int]:
    """Add integer noise to integer units without overflow (Python ints when needed)."""
    if isinstance(units, list):
        return [u + int(z) for u, z in zip(units, noise.ravel(), strict=True)]
    return units + noise
