"""The one error hierarchy of deniable.

Every error raised on purpose by deniable derives from :class:`DeniableError`. Errors caused
by the caller's input also derive from :class:`ValueError`, so generic handlers keep working.
Messages say what to change and never contain private values (row values, true answers,
noise draws).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar


@dataclass(frozen=True)
class Remedy:
    """One way to fix a refused call, as a parameter, so each surface words it its own way.

    The Python API says ``pass bounds={'cost': (lower, upper)}``; the CLI says ``--bounds
    cost=LO:HI``. An error that carries remedies (:func:`remedied`) lets the CLI rebuild its
    message from :attr:`DeniableError.problem` and these.

    Attributes:
        parameter: the Python keyword that fixes it: ``bounds``, ``delta``, ``epsilon``,
            ``rho`` or ``public_keys`` (pass it), ``no_delta`` (leave δ out) or
            ``allow_change`` (a cap changes only on purpose).
        column: the column it is about, if any.
    """

    parameter: str
    column: str | None = None


class DeniableError(Exception):
    """Base class of every error raised by deniable.

    Attributes:
        problem: what is wrong, without the fix (set with the remedies), or None.
        remedies: ways to fix it as parameters (:class:`Remedy`); empty when the message
            says it all.
        where: the place in the query text, as the message ends (`` (line 1, column 12)``),
            or empty.
    """

    problem: str | None = None
    remedies: tuple[Remedy, ...] = ()
    where: str = ""


E = TypeVar("E", bound=DeniableError)


def remedied(exc: E, problem: str, *remedies: Remedy, where: str = "") -> E:
    """``exc`` with its problem and remedies attached (its message is unchanged)."""
    exc.problem = problem
    exc.remedies = remedies
    exc.where = where
    return exc


class InvalidParameter(DeniableError, ValueError):
    """A public parameter (ε, δ, a scale, a sensitivity, a level…) is out of its domain."""


class BudgetExceeded(DeniableError):
    """A release would push the spent privacy loss over the cap.

    Attributes:
        requested: the loss the refused release asked for.
        remaining: what is still available under the cap.
    """

    def __init__(self, message: str, *, requested: Any = None, remaining: Any = None) -> None:
        super().__init__(message)
        self.requested = requested
        self.remaining = remaining


class UnsafeQuery(DeniableError, ValueError):
    """A query would release rows or unbounded values, or is outside the supported shape."""


class SQLError(UnsafeQuery):
    """The SQL text cannot be parsed or refers to something unknown.

    Attributes:
        line: 1-based line of the problem, when known.
        column: 1-based column of the problem, when known.
    """

    def __init__(self, message: str, *, line: int | None = None, column: int | None = None):
        where = f" (line {line}, column {column})" if line is not None else ""
        super().__init__(message + where)
        self.line = line
        self.column = column


class LedgerError(DeniableError):
    """The durable ledger could not record or read a charge; nothing was released."""


class LedgerTampered(LedgerError):
    """The ledger failed verification (deleted, rolled back, replaced or edited).

    It can be read, but nothing can be charged, registered or granted until a curator
    inspects it (``deniable ledger verify``) and acknowledges it; spent budget is never given
    back.

    Attributes:
        problems: what verification found, in plain words.
    """

    def __init__(self, message: str, *, problems: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.problems = problems


class DuplicateRequest(DeniableError):
    """A charge with this idempotency key was already recorded; nothing new was charged.

    Attributes:
        charge_id: the id of the charge first recorded with this key.
    """

    def __init__(self, charge_id: int, message: str | None = None) -> None:
        super().__init__(
            message
            or f"this request was already charged (charge {charge_id}); nothing was charged again"
        )
        self.charge_id = charge_id


class UnknownDataset(InvalidParameter):
    """The dataset was never registered in this ledger; the curator must register it first."""


class CapConflict(InvalidParameter):
    """A dataset is registered again with a different cap without ``allow_change=True``."""


class EngineError(DeniableError):
    """The engine failed while running generated SQL (out of memory, I/O); nothing was charged."""


class InternalError(DeniableError):
    """A bug in deniable: an invariant was violated. Nothing was released."""


class PrivacyWarning(UserWarning):
    """Something is legal but weakens the guarantee the user probably expects."""


class UtilityWarning(UserWarning):
    """A release is sound but too noisy to tell what it was asked (raise ε or widen the data)."""
