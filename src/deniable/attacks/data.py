"""Synthetic populations for the attack lab (seeded: they are demonstration data, not releases).

Randomness comes from :mod:`deniable.noise` with a :class:`~deniable.noise.testing.SeededRandom`
so that every run of an attack sees the same people; the *deniable* side of every attack
still draws its noise from the OS CSPRNG.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import numpy as np
import pandas as pd

from deniable.errors import InvalidParameter
from deniable.noise import bernoulli, uniform_int
from deniable.noise.testing import SeededRandom

_EPOCH = dt.date(1990, 1, 1)
_DAYS = 3650


@dataclass(frozen=True)
class Population:
    """A table of people with one target the attacker is after.

    Attributes:
        frame: columns ``id`` (0..n−1, public), ``birth_date`` (text, unique for the
            target), ``zip`` (int), ``age`` (int), ``notepad`` (the secret bit, 0/1).
        target: the target's ``id``.
        target_birth_date: the quasi-identifier the attacker knows.
    """

    frame: pd.DataFrame
    target: int
    target_birth_date: str

    @property
    def secret(self) -> int:
        """The target's secret bit (ground truth, for scoring the attack)."""
        return int(self.frame["notepad"].to_numpy()[self.target])

    @property
    def secrets(self) -> np.ndarray:
        """Everyone's secret bit (ground truth, for scoring reconstruction)."""
        return self.frame["notepad"].to_numpy(dtype=np.int64)


def population(n: int, *, seed: int | None, target_secret: int | None = None) -> Population:
    """``n`` people with uniform secret bits; the target (``id = n // 2``) has a unique birthday.

    Args:
        n: number of people (≥ 2).
        seed: the data's seed (None: drawn from the OS CSPRNG, a fresh population).
        target_secret: force the target's bit (None: drawn like everyone's).
    """
    if n < 2:
        raise InvalidParameter("a population needs at least 2 people")
    src = None if seed is None else SeededRandom(seed)
    days = uniform_int(_DAYS, n, source=src)
    target = n // 2
    days[target] = _DAYS  # outside everyone else's range: unique
    secret = bernoulli(0.5, n, source=src).astype(np.int64)
    if target_secret is not None:
        secret[target] = int(target_secret)
    dates = [(_EPOCH + dt.timedelta(days=int(d))).isoformat() for d in days]
    frame = pd.DataFrame(
        {
            "id": np.arange(n, dtype=np.int64),
            "birth_date": dates,
            "zip": 10_000 + uniform_int(90, n, source=src),
            "age": 18 + uniform_int(60, n, source=src),
            "notepad": secret,
        }
    )
    return Population(frame, target, dates[target])


def town(n: int, *, seed: int, rich: bool = True, rich_worth: int = 35_000_000) -> pd.DataFrame:
    """Net worth and age of ``n`` townspeople; with ``rich``, one (the last) has ``rich_worth``.

    Everyone else's net worth is below 10 million (a public fact the attacker knows), so a
    value above it can only be the rich person's.
    """
    if n < 2:
        raise InvalidParameter("a town needs at least 2 people")
    src = SeededRandom(seed)
    worth = 10_000 * (1 + uniform_int(900, n, source=src))  # 10k .. 9M
    age = 18 + uniform_int(70, n, source=src)
    frame = pd.DataFrame({"id": np.arange(n, dtype=np.int64), "age": age, "net_worth": worth})
    if rich:
        frame.loc[n - 1, "net_worth"] = rich_worth
    else:
        frame = frame.iloc[: n - 1].reset_index(drop=True)
    return frame
