"""Repeated collection: what answering the same question many times costs, and memoisation.

A client that answers the same question ``T`` times with a *fresh* randomisation each time
releases ``T`` independent ε-LDP reports of the same value: by sequential composition the
loss is ``T·ε``, and it is real — averaging the reports recovers the value (the majority of
``T`` randomized responses is the truth with probability → 1). Collecting every day and
"resetting ε daily" therefore does not bound what the collector learns; it ignores that the
value is the same, or correlated, across days (the notes' criticism of such deployments).

The remedy, from RAPPOR, is *memoisation*: the client derives the randomised (permanent)
response of a value from a secret it holds, so it answers the same value the same way every
time, and the collector learns nothing new from a repeat. For an unchanged value the loss
stays that of one response however many reports are made (for the Bloom encoder: at most
``min(T·ε₁, ε∞)``, its instantaneous step being redone each time).

What memoisation does **not** hide. Memoised responses are equal exactly when the values are
equal, so the reports reveal *when the value changes* (two different memoised answers prove
a change). The guarantee of :attr:`MemoizedRandomizer.loss` is therefore stated for histories
with the same pattern of changes: two clients whose values agree in the same report slots,
``x_s = x_t ⇔ x'_s = x'_t``. Under that condition the loss is
``Σ_{distinct values v} min(T_v·ε, ε_perm)``. The fresh client's ``T·ε`` holds for any two
histories.

The secret must never leave the client: whoever knows it can recompute the memoised response
of every candidate value and match the reports, which reveals the value.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from fractions import Fraction
from typing import Any, Generic, TypeVar

import numpy as np

from deniable.accounting.loss import Epsilon
from deniable.errors import InvalidParameter
from deniable.local.randomizers import LocalRandomizer
from deniable.noise.source import U64, RandomSource, resolve

R = TypeVar("R")

_PERSON = b"deniable.memo"


def fresh_loss(per_report: Epsilon, reports: int) -> Epsilon:
    """The loss of ``reports`` fresh, independent ε-LDP reports of one client: ``T·ε``.

    Sequential composition; it is tight for randomized response (all ``T`` reports agreeing
    is ``e^(Tε)`` times likelier under one value than under the other).

    Examples:
        >>> fresh_loss(Epsilon(epsilon=1), 365)
        Epsilon(epsilon=365)
    """
    if isinstance(reports, bool) or not isinstance(reports, int) or reports < 0:
        raise InvalidParameter("reports must be an integer ≥ 0")
    return Epsilon(epsilon=per_report.epsilon * reports)


def memoized_loss(randomizer: LocalRandomizer[Any], reports_per_value: Iterable[int]) -> Epsilon:
    """The loss of memoised reports: ``Σ_v min(T_v·ε, ε_perm)`` over the distinct values.

    ``reports_per_value`` lists, for each distinct value the client reported, how many
    reports were made of it. The bound holds against histories with the same pattern of
    changes (see the module docstring).

    Examples:
        >>> from deniable.local.randomizers import CoinRandomizedResponse
        >>> rr = CoinRandomizedResponse(q=0.5)
        >>> memoized_loss(rr, [365]) == rr.loss
        True
    """
    eps, perm = randomizer.loss.epsilon, randomizer.permanent_loss.epsilon
    total = Fraction(0)
    for t in reports_per_value:
        if isinstance(t, bool) or not isinstance(t, int) or t < 0:
            raise InvalidParameter("report counts must be integers ≥ 0")
        if t:
            total += min(t * eps, perm)
    return Epsilon(epsilon=total)


class KeyedStream:
    """A deterministic stream of uniform words from a secret key and a label (a PRF).

    ``BLAKE2b(key=secret, label)`` seeds SHAKE-256 in counter mode. Two streams with the same
    secret and label are identical (that is the point: memoisation); streams with different
    labels are independent as long as the secret is unknown. ``secure`` is whatever the
    caller asserts about the secret (True only for a secret drawn from a secure source).
    """

    def __init__(self, secret: bytes, label: bytes, *, secure: bool) -> None:
        key = secret if len(secret) <= 64 else hashlib.blake2b(secret).digest()  # BLAKE2b: ≤ 64
        self._seed = hashlib.blake2b(label, key=key, person=_PERSON).digest()
        self._counter = 0
        self.secure = secure

    def words(self, n: int) -> U64:
        """Return the next ``n`` words of the stream."""
        h = hashlib.shake_256(self._seed + self._counter.to_bytes(16, "little"))
        self._counter += 1
        return np.frombuffer(h.digest(8 * n), dtype=np.uint64).copy()


def _label(value: Any) -> bytes:
    """An injective byte encoding of a report value (type-tagged)."""
    if isinstance(value, bool | np.bool_):
        return b"i:%d" % int(value)
    if isinstance(value, int | np.integer):
        return b"i:%d" % int(value)
    if isinstance(value, str):
        return b"s:" + value.encode("utf-8")
    if isinstance(value, bytes):
        return b"b:" + value
    raise InvalidParameter("memoised values must be int, bool, str or bytes")


class FreshRandomizer(Generic[R]):
    """A client that randomises afresh at every report: ``T`` reports cost ``T·ε``.

    Examples:
        >>> from deniable.local.randomizers import CoinRandomizedResponse
        >>> from deniable.noise.testing import SeededRandom
        >>> client = FreshRandomizer(CoinRandomizedResponse(q=0.5), source=SeededRandom(0))
        >>> for _ in range(10):
        ...     _ = client.report(1)
        >>> round(float(client.loss.epsilon), 4)  # 10·ln 3
        10.9861
    """

    def __init__(
        self, randomizer: LocalRandomizer[R], *, source: RandomSource | None = None
    ) -> None:
        self._source = resolve(source)
        self._randomizer = randomizer.for_client(self._source)
        self.reports = 0

    def report(self, value: Any) -> R:
        """A fresh randomised report of ``value`` (a batch of one)."""
        out = self._randomizer.randomize([value], source=self._source)
        self.reports += 1
        return out

    @property
    def loss(self) -> Epsilon:
        """``T·ε`` for the ``T`` reports made so far, whatever the values were."""
        return fresh_loss(self._randomizer.loss, self.reports)


class MemoizedRandomizer(Generic[R]):
    """A client that memoises its permanent response per value, keyed by a secret it holds.

    The permanent response of a value is drawn from :class:`KeyedStream` ``(secret, value)``,
    so it is the same at every report of that value; the instantaneous step (Bloom encoder)
    uses fresh randomness. Per-client state (a cohort) is derived from the secret too.

    Args:
        randomizer: the local randomiser.
        secret: at least 16 uniformly random bytes that never leave the client; None draws
            32 bytes from ``source``.
        source: randomness for the secret and the instantaneous steps (CSPRNG by default).

    Examples:
        >>> from deniable.local.randomizers import CoinRandomizedResponse
        >>> from deniable.noise.testing import SeededRandom
        >>> client = MemoizedRandomizer(CoinRandomizedResponse(q=0.5), source=SeededRandom(0))
        >>> answers = {bool(client.report(1)[0]) for _ in range(10)}
        >>> len(answers), round(float(client.loss.epsilon), 4)  # one answer, ln 3
        (1, 1.0986)
    """

    def __init__(
        self,
        randomizer: LocalRandomizer[R],
        *,
        secret: bytes | None = None,
        source: RandomSource | None = None,
    ) -> None:
        self._source = resolve(source)
        if secret is None:
            secret = self._source.words(4).tobytes()
            secure = self._source.secure
        elif not isinstance(secret, bytes) or len(secret) < 16:
            raise InvalidParameter("secret must be at least 16 random bytes")
        else:
            secure = True
        self._secret = secret
        self._secure = secure
        self._randomizer = randomizer.for_client(KeyedStream(secret, b"client", secure=secure))
        self._counts: dict[bytes, int] = {}

    def report(self, value: Any) -> R:
        """The report of ``value``: its memoised permanent response, then a fresh IRR."""
        label = _label(value)
        stream = KeyedStream(self._secret, b"value:" + label, secure=self._secure)
        permanent = self._randomizer.permanent([value], source=stream)
        out = self._randomizer.instantaneous(permanent, source=self._source)
        self._counts[label] = self._counts.get(label, 0) + 1
        return out

    @property
    def reports(self) -> int:
        """Number of reports made so far."""
        return sum(self._counts.values())

    @property
    def distinct_values(self) -> int:
        """Number of distinct values reported so far."""
        return len(self._counts)

    @property
    def loss(self) -> Epsilon:
        """``Σ_v min(T_v·ε, ε_perm)``, against histories with the same change pattern."""
        return memoized_loss(self._randomizer, self._counts.values())

    def __repr__(self) -> str:  # never show the secret
        return f"MemoizedRandomizer({self._randomizer!r}, reports={self.reports})"
