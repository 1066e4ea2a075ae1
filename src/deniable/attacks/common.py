"""What every attack shares: one attacker step, a deniable session to attack, stop reasons.

The deniable side of every attack runs against a real :class:`~deniable.curator.Session`
(a temporary ledger, the OS CSPRNG for noise) and records, for each question, whether it was
answered (and what it cost), replayed from the cache at no cost, or stopped: by the budget
(:class:`~deniable.errors.BudgetExceeded`) or by a refusal (an unsafe or malformed query).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Literal

import pandas as pd

from deniable.accounting.loss import Epsilon
from deniable.curator import Session
from deniable.errors import BudgetExceeded, InvalidParameter, SQLError, UnsafeQuery
from deniable.query.answer import Answer
from deniable.query.catalog import ROW

StopReason = Literal["budget", "refusal"]
"""Why deniable gave no answer: the budget is spent, or the query was refused."""

DENIABLE = "deniable session"


@dataclass(frozen=True)
class Step:
    """One question an attacker asked and what came back.

    Attributes:
        query: the question (SQL text).
        answer: the value released (None when nothing was).
        cost: ε charged for it (0 for the unsafe systems, which keep no account, and for a
            replay from deniable's cache).
        cached: deniable served it from the answer cache (no new information, no cost).
        stopped: ``"budget"`` or ``"refusal"`` when deniable answered nothing.
        posterior: the attacker's belief after this step (probability that the secret is 1,
            or that the target is present), or None when the attack has no per-step belief.
    """

    query: str
    answer: float | None
    cost: float = 0.0
    cached: bool = False
    stopped: StopReason | None = None
    posterior: float | None = None


@dataclass(frozen=True)
class PosteriorRun:
    """One system under an attack on one secret bit, answer by answer.

    Attributes:
        system: the system's name.
        safe: whether it is deniable (True) or an unsafe baseline.
        steps: every question, its answer and the attacker's posterior after it.
        posterior: the attacker's final posterior that the bit is 1.
        guess: the attacker's guess of the bit (posterior ≥ 1/2).
        epsilon_spent: ε charged in total (deniable), None for the unsafe systems.
        bound: deniable's posterior bounds at the charged ε (None for the unsafe systems).
        stopped_by: why deniable stopped answering (None: it did not).
        cached: answers replayed free from deniable's cache.
        charged: answers deniable charged for.
    """

    system: str
    safe: bool
    steps: tuple[Step, ...]
    posterior: float
    guess: int
    epsilon_spent: float | None = None
    bound: tuple[float, float] | None = None
    stopped_by: StopReason | None = None
    cached: int = 0
    charged: int = 0


@dataclass(frozen=True)
class Asked:
    """The outcome of one question to a deniable session."""

    answer: Answer | None
    stopped: StopReason | None
    cost: Fraction

    @property
    def cached(self) -> bool:
        """Whether the answer was a free replay of an earlier one."""
        return self.answer is not None and self.answer.metadata.cached


def ask(session: Session, sql: str, *, epsilon: Fraction) -> Asked:
    """Ask ``sql`` at ``epsilon``; a budget refusal or an unsafe query becomes a stop reason.

    Spends what the session charges (``epsilon``, or nothing for a replay or a refusal).
    """
    try:
        answer = session.sql(sql, epsilon=epsilon)
    except BudgetExceeded:
        return Asked(None, "budget", Fraction(0))
    except (UnsafeQuery, SQLError):
        return Asked(None, "refusal", Fraction(0))
    loss = answer.loss
    cost = loss.epsilon if isinstance(loss, Epsilon) else Fraction(0)
    return Asked(answer, None, cost)


@contextmanager
def deniable_session(
    budget: float | Fraction,
    tables: Mapping[str, pd.DataFrame],
    *,
    public_keys: Mapping[str, Mapping[str, Sequence[object]]] | None = None,
) -> Iterator[Session]:
    """A fresh session (temporary ledger, CSPRNG noise) over ``tables`` with an ε cap.

    The attack lab's tables hold one row per person, so they are registered with row-level
    privacy, stated (:data:`deniable.ROW`): one row is one person.

    Raises:
        InvalidParameter: a budget that is not a number > 0.
    """
    cap = exact(budget, "budget")
    with tempfile.TemporaryDirectory(prefix="deniable-attack-") as tmp:
        session = Session(budget=Epsilon(epsilon=cap), ledger=Path(tmp) / "ledger.db")
        try:
            for name, frame in tables.items():
                keys = None if public_keys is None else public_keys.get(name)
                session.add_table(name, frame, privacy_unit=ROW, public_keys=keys)
            yield session
        finally:
            session.close()


def exact(value: float | Fraction, name: str) -> Fraction:
    """An exact finite number > 0 (a float is read as its shortest decimal: 0.1 is 1/10).

    Raises:
        InvalidParameter: anything else.
    """
    if isinstance(value, bool) or not isinstance(value, int | float | Fraction):
        raise InvalidParameter(f"{name} must be a number > 0")
    try:
        out = value if isinstance(value, Fraction) else Fraction(repr(value))
    except (ValueError, OverflowError):
        raise InvalidParameter(f"{name} must be a finite number > 0") from None
    if not out > 0:
        raise InvalidParameter(f"{name} must be > 0")
    return out
