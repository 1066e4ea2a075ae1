"""Exact uniform integers and the float interval of ``−ln U'`` used by the fast filters."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from deniable.errors import InvalidParameter
from deniable.noise.source import RandomSource, resolve

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

_TWO64 = 2.0**64
# Slack of the float filter, far above the real error: float(U) is within 2^-53 relative,
# numpy's log within one ulp; every decision the slack cannot cover is made exactly.
REL = 2.0**-46
ABS = 2.0**-46


def uniform_int(high: int, size: int, *, source: RandomSource | None = None) -> I64:
    """Return ``size`` independent integers uniform on ``{0, …, high−1}``, exactly.

    Rejection sampling on 64-bit words: a word is used only below the largest multiple of
    ``high``, so every residue is equally likely.

    Examples:
        >>> from deniable.noise.testing import SeededRandom
        >>> int(uniform_int(6, 1000, source=SeededRandom(1)).max()) <= 5
        True
    """
    if not isinstance(high, int) or isinstance(high, bool) or not 1 <= high <= 2**63:
        raise InvalidParameter("uniform_int needs an integer high in [1, 2^63]")
    src = resolve(source)
    limit = np.uint64((2**64 // high) * high - 1)  # last usable word
    out = np.empty(size, dtype=np.int64)
    todo = np.arange(size)
    while todo.size:
        w = src.words(todo.size)
        ok = w <= limit
        out[todo[ok]] = (w[ok] % np.uint64(high)).astype(np.int64)
        todo = todo[~ok]
    return out


def random_bits(size: int, *, source: RandomSource | None = None) -> npt.NDArray[np.bool_]:
    """Return ``size`` independent fair bits."""
    src = resolve(source)
    w = src.words((size + 63) // 64)
    return np.unpackbits(w.view(np.uint8))[:size].astype(bool)


def neg_log_interval(words: npt.NDArray[np.uint64]) -> tuple[F64, F64]:
    """Float bounds ``lo ≤ −ln U' ≤ hi`` for ``U' ∈ [w/2^64, (w+1)/2^64)``, ``w`` = words.

    For ``w = 0`` the upper bound is ``inf`` (the caller must decide those exactly).
    """
    uf = words.astype(np.float64)
    with np.errstate(divide="ignore"):
        top = -np.log(uf * (1.0 / _TWO64))  # = −ln(w/2^64), the upper end
        # ln(1 + 1/w) ≤ 1/w bounds the width of the interval.
        width = 1.0 / uf
    hi = top * (1.0 + REL) + ABS
    lo = (top - width * (1.0 + REL)) * (1.0 - REL) - ABS
    return lo, hi


U64_MAX = 2**64 - 1


def uniform_below(
    highs: npt.NDArray[np.int64], *, source: RandomSource | None = None
) -> I64:
    """Return one exact uniform draw on ``{0, …, h−1}`` for each ``h`` in ``highs`` (h ≥ 1).

    A word ``w`` is accepted for bound ``h`` when ``w < h·floor((2^64 − 1)/h)``, a multiple of
    ``h``, so ``w mod h`` is exactly uniform.
    """
    h = np.asarray(highs, dtype=np.int64)
    if h.size and int(h.min()) < 1:
        raise InvalidParameter("every bound must be ≥ 1")
    src = resolve(source)
    hu = h.astype(np.uint64)
    limit = (np.uint64(U64_MAX) // hu) * hu
    out = np.empty(h.size, dtype=np.int64)
    todo = np.arange(h.size)
    while todo.size:
        w = src.words(todo.size)
        ok = w < limit[todo]
        out[todo[ok]] = (w[ok] % hu[todo[ok]]).astype(np.int64)
        todo = todo[~ok]
    return out
