"""Sources of uniform random bits.

A release path takes its randomness from :class:`SecureRandom`, which reads the operating
system's CSPRNG (``os.urandom``) in bulk. The only other source, the seeded
:class:`deniable.noise.testing.SeededRandom`, lives in a module of its own, reports
``secure = False`` and is refused by every release path unless the caller passes it
explicitly: no release can fall back to it by accident.
"""

from __future__ import annotations

import os
import threading
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

U64 = npt.NDArray[np.uint64]


@runtime_checkable
class RandomSource(Protocol):
    """Anything that hands out independent uniform 64-bit words."""

    @property
    def secure(self) -> bool:
        """Whether the words come from a cryptographically secure generator."""
        ...

    def words(self, n: int) -> U64:
        """Return ``n`` independent uniform 64-bit words."""
        ...


class SecureRandom:
    """Uniform words from the OS CSPRNG, read in bulk.

    Reads are at least ``chunk_bytes`` long so that many small requests (one release at a
    time) do not each pay a system call; unused bytes are kept for the next request and never
    handed out twice.

    Examples:
        >>> SecureRandom().words(3).dtype
        dtype('uint64')
    """

    secure = True

    def __init__(self, *, chunk_bytes: int = 1 << 16) -> None:
        self._chunk = chunk_bytes
        self._buf = b""
        # One lock per source: concurrent releases (a server's threads) must never be handed
        # the same bytes twice.
        self._lock = threading.Lock()

    def words(self, n: int) -> U64:
        """Return ``n`` uniform 64-bit words from ``os.urandom`` (thread-safe)."""
        need = 8 * n
        if need >= self._chunk:
            # Large requests go straight to the OS and never touch the shared buffer.
            return np.frombuffer(os.urandom(need), dtype=np.uint64).copy()
        with self._lock:
            if need > len(self._buf):
                self._buf += os.urandom(self._chunk)
            out, self._buf = self._buf[:need], self._buf[need:]
        return np.frombuffer(out, dtype=np.uint64).copy()


_DEFAULT: SecureRandom | None = None


_DEFAULT_LOCK = threading.Lock()


def default_source() -> SecureRandom:
    """Return the process's shared secure source (created on first use, never seeded)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = SecureRandom()
        return _DEFAULT


def resolve(source: RandomSource | None) -> RandomSource:
    """Return ``source`` or, when it is None, the secure default."""
    return default_source() if source is None else source
