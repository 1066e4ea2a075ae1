"""Where the randomness comes from: the OS CSPRNG by default, a seeded stream only on request."""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Iterator
from fractions import Fraction

import numpy as np
import pytest

import deniable.noise.source as source_module
from deniable.noise import (
    RandomSource,
    SecureRandom,
    bernoulli,
    bernoulli_exp_neg,
    default_source,
    discrete_gaussian,
    discrete_laplace,
    geometric,
    random_bits,
    uniform_int,
)
from deniable.noise.source import resolve
from deniable.noise.testing import SeededRandom

SAMPLERS: dict[str, Callable[..., np.ndarray]] = {
    "bernoulli": lambda n, **kw: bernoulli(Fraction(1, 3), n, **kw),
    "bernoulli_exp_neg": lambda n, **kw: bernoulli_exp_neg(Fraction(1, 2), n, **kw),
    "uniform_int": lambda n, **kw: uniform_int(1000, n, **kw),
    "random_bits": lambda n, **kw: random_bits(n, **kw),
    "geometric": lambda n, **kw: geometric(3, n, **kw),
    "discrete_laplace": lambda n, **kw: discrete_laplace(Fraction(7, 3), n, **kw),
    "discrete_laplace_wide": lambda n, **kw: discrete_laplace(2**20 + 1, n, **kw),
    "discrete_gaussian": lambda n, **kw: discrete_gaussian(4, n, **kw),
    "discrete_gaussian_large": lambda n, **kw: discrete_gaussian(10**9, n, **kw),
}


def test_default_source_is_the_secure_one() -> None:
    src = default_source()
    assert isinstance(src, SecureRandom)
    assert src.secure is True
    assert default_source() is src  # one shared object, not re-created
    assert resolve(None) is src
    assert isinstance(src, RandomSource)


def test_seeded_random_is_reproducible_and_insecure() -> None:
    a, b = SeededRandom(42), SeededRandom(42)
    assert a.secure is False
    assert isinstance(a, RandomSource)
    first = a.words(5)
    assert first.dtype == np.uint64
    assert np.array_equal(first, b.words(5))
    assert np.array_equal(a.words(3), b.words(3))  # the streams continue in step
    assert not np.array_equal(SeededRandom(43).words(5), first)
    assert resolve(a) is a


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_samplers_are_reproducible_with_a_seed(name: str) -> None:
    draw = SAMPLERS[name]
    x = draw(500, source=SeededRandom(7))
    y = draw(500, source=SeededRandom(7))
    z = draw(500, source=SeededRandom(8))
    assert np.array_equal(x, y)
    assert not np.array_equal(x, z)


class FakeUrandom:
    """A deterministic stand-in for ``os.urandom`` that counts the bytes it hands out."""

    def __init__(self, seed: int) -> None:
        self._seed = seed
        self.calls = 0
        self.bytes = 0

    def __call__(self, n: int) -> bytes:
        self.calls += 1
        self.bytes += n
        h = hashlib.shake_256(self._seed.to_bytes(8, "little") + self.calls.to_bytes(8, "little"))
        return h.digest(n)


@pytest.fixture
def fresh_default(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # A new default source with an empty buffer, so every draw below reaches os.urandom.
    monkeypatch.setattr(source_module, "_DEFAULT", None)
    yield


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_release_path_draws_only_from_os_urandom(
    monkeypatch: pytest.MonkeyPatch, fresh_default: None, name: str
) -> None:
    """With ``source=None`` a sampler reads os.urandom, and nothing else: replacing os.urandom
    by a fixed byte stream makes its output a fixed function of that stream."""
    draw = SAMPLERS[name]
    outputs = []
    for _ in range(2):
        fake = FakeUrandom(seed=1)
        monkeypatch.setattr(source_module, "_DEFAULT", None)
        monkeypatch.setattr(os, "urandom", fake)
        outputs.append(draw(300))
        assert fake.calls >= 1, f"{name} did not read os.urandom"
    assert np.array_equal(outputs[0], outputs[1]), f"{name} used randomness besides os.urandom"
    other = FakeUrandom(seed=2)
    monkeypatch.setattr(source_module, "_DEFAULT", None)
    monkeypatch.setattr(os, "urandom", other)
    assert not np.array_equal(draw(300), outputs[0])


def test_secure_random_reads_in_bulk(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeUrandom(seed=3)
    monkeypatch.setattr(os, "urandom", fake)
    src = SecureRandom(chunk_bytes=1 << 12)
    for _ in range(100):
        src.words(1)
    assert fake.calls == 1  # 800 bytes from one 4 KiB read
    big = src.words(10_000)  # a large request goes straight to the OS
    assert big.shape == (10_000,) and fake.calls == 2


def test_secure_random_never_repeats_words() -> None:
    src = SecureRandom(chunk_bytes=1 << 10)
    sizes = [1, 3, 7, 64, 127, 128, 129, 2000, 5] * 20
    words = np.concatenate([src.words(n) for n in sizes])
    # 64-bit words from a CSPRNG: a repeat among ~2.6e5 has probability ~2e-9.
    assert np.unique(words).size == words.size


def test_secure_random_is_thread_safe(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another thread draws while this one is inside os.urandom: no word may be handed out
    twice. (os.urandom releases the GIL, so this interleaving happens in real servers; the
    fake just makes it deterministic.) With a lock, the other thread waits for the refill."""
    src = SecureRandom(chunk_bytes=64)
    src.words(7)  # 8 bytes left in the buffer
    real = os.urandom
    other: list[np.ndarray] = []
    started = threading.Event()

    def other_thread() -> None:
        started.set()
        other.append(src.words(1))

    thread = threading.Thread(target=other_thread)

    def slow_urandom(n: int) -> bytes:
        if not thread.is_alive() and not started.is_set():
            thread.start()
            thread.join(timeout=0.5)  # a correct lock makes this time out, then proceed
        return real(n)

    monkeypatch.setattr(os, "urandom", slow_urandom)
    mine = src.words(2)  # needs 16 bytes: refills
    thread.join(timeout=5)
    assert other, "the other thread never got its word"
    assert int(other[0][0]) not in {int(w) for w in mine}, "one word handed to two threads"
