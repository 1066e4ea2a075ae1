"""A reproducible random source for tests only.

:class:`SeededRandom` expands a seed with SHAKE-256 in counter mode. It is deterministic by
design and therefore **not** private: it reports ``secure = False``, nothing in deniable
creates it, and it must be passed explicitly to reach a sampler.
"""

from __future__ import annotations

import hashlib

import numpy as np

from deniable.noise.source import U64


class SeededRandom:
    """Deterministic uniform words from a seed (tests only; not for releases).

    Examples:
        >>> a, b = SeededRandom(7).words(4), SeededRandom(7).words(4)
        >>> bool((a == b).all())
        True
    """

    secure = False

    def __init__(self, seed: int) -> None:
        self._seed = seed.to_bytes(32, "little", signed=True)
        self._counter = 0

    def words(self, n: int) -> U64:
        """Return ``n`` words, continuing the stream of this seed."""
        h = hashlib.shake_256(self._seed + self._counter.to_bytes(16, "little"))
        self._counter += 1
        return np.frombuffer(h.digest(8 * n), dtype=np.uint64).copy()
