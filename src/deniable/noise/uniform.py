"""Exact uniform integers, fair bits, and the fast float filter on ``−ln U'``.

The filter: a uniform ``U' ∈ [0, 1)`` is represented by a prefix ``u`` of ``B`` random bits
(``U' ∈ [u/2^B, (u+1)/2^B)``), converted to a double *exactly* (``B ≤ 53``). Then
``E = −ln U'`` lies in ``[E_hi − 1/u, E_hi]`` with ``E_hi = B·ln 2 − ln u``. Float error is
absorbed by a relative slack ``REL`` and an absolute slack ``ABS``, both far above the error
of the few correctly-rounded operations involved; any decision the slack cannot settle is
made exactly from the full word and more random bits (:class:`~deniable.noise.exact.LazyUniform`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from deniable.errors import InvalidParameter
from deniable.noise.source import RandomSource, resolve

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

CHUNK = 1 << 15
"""Batch size of the vectorised samplers: small enough that a batch's temporaries stay in cache."""

# Slack of the float filters. The operations involved (a uint→double conversion that is exact,
# one log or exp, a few multiplications) are off by a few ulps at most — about 2^-47 absolute on
# E ≤ 45 even if numpy's vectorised log/exp were 4 ulps off; 2^-40 leaves a factor of >100.
REL = 2.0**-40
ABS = 2.0**-40
U64_MAX = 2**64 - 1


def uniform_int(high: int, size: int, *, source: RandomSource | None = None) -> I64:
    """Return ``size`` independent integers uniform on ``{0, …, high−1}``, exactly.

    Examples:
        >>> from deniable.noise.testing import SeededRandom
        >>> int(uniform_int(6, 1000, source=SeededRandom(1)).max()) <= 5
        True
    """
    if not isinstance(high, int) or isinstance(high, bool) or not 1 <= high < 2**63:
        raise InvalidParameter("uniform_int needs an integer high in [1, 2^63 - 1]")
    return uniform_below(np.full(size, high, dtype=np.int64), source=source)


def uniform_below(highs: npt.ArrayLike, *, source: RandomSource | None = None) -> I64:
    """Return one exact uniform draw on ``{0, …, h−1}`` for each ``h`` in ``highs`` (h ≥ 1).

    A word ``w`` is accepted for bound ``h`` when ``w < h·floor((2^64 − 1)/h)``, a multiple of
    ``h``, so ``w mod h`` is exactly uniform; rejected words are redrawn.
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


def random_bits(size: int, *, source: RandomSource | None = None) -> npt.NDArray[np.bool_]:
    """Return ``size`` independent fair bits."""
    src = resolve(source)
    w = src.words((size + 63) // 64)
    return np.unpackbits(w.view(np.uint8))[:size].astype(bool)


@dataclass(frozen=True, slots=True)
class ExpPrefix:
    """Uniform prefixes and float bounds of ``E = −ln U'`` for a batch of draws.

    Attributes:
        e_hi: upper float bound of ``E`` (``inf`` when the prefix is 0).
        width: upper bound of the width of ``E``'s interval (``1/u``).
        sign: an independent fair bit per draw (only when requested).
        word: the full prefix of ``U'`` for the exact path, with ``bits`` bits.
        bits: the number of bits in ``word``.
    """

    e_hi: F64
    width: F64
    sign: npt.NDArray[np.bool_] | None
    word: npt.NDArray[np.uint64] | npt.NDArray[np.uint32]
    bits: int


def exp_prefix(n: int, *, wide: bool, signed: bool, source: RandomSource) -> ExpPrefix:
    """Draw ``n`` uniforms (64-bit words if ``wide`` else 32-bit) and bound ``−ln U'``.

    With ``signed``, bit 0 of each word is a separate fair sign bit and ``U'`` uses the rest.
    """
    if wide:
        w64 = source.words(n)
        sign = (w64 & np.uint64(1)).astype(bool) if signed else None
        word: npt.NDArray[np.uint64] | npt.NDArray[np.uint32] = (
            w64 >> np.uint64(1) if signed else w64
        )
        bits = 63 if signed else 64
        u = (w64 >> np.uint64(11)).view(np.int64).astype(np.float64)
        ubits = 53
    else:
        w32 = source.words((n + 1) // 2).view(np.uint32)[:n]
        sign = (w32 & np.uint32(1)).astype(bool) if signed else None
        word = w32 >> np.uint32(1) if signed else w32
        bits = 31 if signed else 32
        u = word.astype(np.float64)
        ubits = bits
    with np.errstate(divide="ignore"):
        width = np.divide(1.0, u)
        np.log(u, out=u)
    np.subtract(ubits * math.log(2.0), u, out=u)
    return ExpPrefix(u, width, sign, word, bits)


def chunked(size: int, fill: Callable[[int], I64]) -> I64:
    """Return ``size`` draws made by ``fill(n)`` in batches of at most :data:`CHUNK`."""
    if size <= CHUNK:
        return fill(size)
    out = np.empty(size, dtype=np.int64)
    for start in range(0, size, CHUNK):
        stop = min(start + CHUNK, size)
        out[start:stop] = fill(stop - start)
    return out
