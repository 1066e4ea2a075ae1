"""The privacy filter (budget odometer): spend up to a cap, then refuse.

A :class:`BudgetFilter` holds a cap and the total spent so far, both exact. A charge is
accepted only if the new total stays within the cap (component-wise for ``(ε, δ)``); a
refused charge raises :class:`~deniable.errors.BudgetExceeded`, which names what is left, and
changes nothing. By sequential composition, everything the filter accepted is together
within the cap, however adaptively the charges were chosen (the cap is fixed in advance).

The filter is pure in-memory arithmetic and cheap to construct. The durable ledger wraps it:
inside one transaction it rebuilds ``BudgetFilter(cap, spent=<stored total>)``, calls
:meth:`BudgetFilter.charge`, and writes the new total only if that returned. The filter is not
thread-safe on its own; the ledger's transaction is what serialises concurrent charges.

A dataset may instead spend an ``(ε, δ)`` cap through the zCDP filter of
:mod:`deniable.accounting.renyi` (``accountant="zcdp"``), which adds ρ-zCDP losses and
converts once: far more Gaussian answers fit. :func:`parse_accountant` reads the choice and
:func:`make_filter` builds the filter it names.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Literal

from deniable.accounting.composition import components, from_components
from deniable.accounting.conversions import KIND_NAMES, convert
from deniable.accounting.loss import Epsilon, EpsilonDelta, PrivacyLoss, Rho, show
from deniable.accounting.renyi import ZCDPAccountant, ZCDPFilter, ZCDPSpent
from deniable.errors import BudgetExceeded, InvalidParameter

_NAMES: dict[type, tuple[str, ...]] = {
    Epsilon: ("ε",),
    EpsilonDelta: ("ε", "δ"),
    Rho: ("ρ",),
}


def _describe(kind: type, values: tuple[Fraction, ...], digits: int = 6) -> str:
    return ", ".join(
        f"{name} = {show(v, digits)}" for name, v in zip(_NAMES[kind], values, strict=True)
    )


class BudgetFilter:
    """A privacy budget: a cap, the exact total spent, and the accepted charges.

    Charges are converted into the cap's kind when that needs no free parameter: pure ε into
    an ``(ε, δ)`` cap as ``(ε, 0)`` and into a ρ-zCDP cap as ``ε²/2``; an ``(ε, 0)`` loss into
    a pure or ρ cap as pure ε. Other mixes (ρ into ``(ε, δ)``, ``(ε, δ > 0)`` into ε or ρ) are
    refused with :class:`~deniable.errors.InvalidParameter`.

    Args:
        cap: the most that may ever be spent, fixed for the filter's life.
        spent: what was already spent (e.g. the total stored by the ledger); may exceed the
            cap, in which case every charge is refused.

    Examples:
        >>> budget = BudgetFilter(Epsilon(epsilon=1))
        >>> budget.charge(Epsilon(epsilon=0.75))
        Epsilon(epsilon=0.75)
        >>> budget.can_charge(Epsilon(epsilon=0.5))
        False
        >>> budget.remaining
        Epsilon(epsilon=0.25)
    """

    __slots__ = ("_cap", "_cap_values", "_history", "_kind", "_spent_values")

    def __init__(self, cap: PrivacyLoss, *, spent: PrivacyLoss | None = None) -> None:
        if not isinstance(cap, Epsilon | EpsilonDelta | Rho):
            raise InvalidParameter(
                f"the cap must be an Epsilon, EpsilonDelta or Rho, got {type(cap).__name__}"
            )
        self._cap = cap
        self._kind: type[PrivacyLoss] = type(cap)
        self._cap_values = components(cap)
        if spent is None:
            self._spent_values = tuple(Fraction(0) for _ in self._cap_values)
        else:
            self._spent_values = components(self._convert(spent))
        self._history: list[PrivacyLoss] = []

    def _convert(self, loss: PrivacyLoss) -> PrivacyLoss:
        if not isinstance(loss, Epsilon | EpsilonDelta | Rho):
            raise InvalidParameter(
                f"a charge must be an Epsilon, EpsilonDelta or Rho, got {type(loss).__name__}"
            )
        return convert(loss, self._kind)

    def _total_after(self, loss: PrivacyLoss) -> tuple[PrivacyLoss, tuple[Fraction, ...]]:
        charge = self._convert(loss)
        total = tuple(s + c for s, c in zip(self._spent_values, components(charge), strict=True))
        return charge, total

    def _fits(self, total: tuple[Fraction, ...]) -> bool:
        return all(t <= c for t, c in zip(total, self._cap_values, strict=True))

    @property
    def cap(self) -> PrivacyLoss:
        """The cap, as given."""
        return self._cap

    @property
    def spent(self) -> PrivacyLoss:
        """The exact total spent, in the cap's kind (may exceed the cap only if built so)."""
        return from_components(self._kind, self._spent_values)

    @property
    def remaining(self) -> PrivacyLoss:
        """What is left, ``max(cap − spent, 0)`` per component, in the cap's kind."""
        left = tuple(
            max(c - s, Fraction(0))
            for c, s in zip(self._cap_values, self._spent_values, strict=True)
        )
        return from_components(self._kind, left)

    def remaining_for(self, loss: PrivacyLoss) -> PrivacyLoss:
        """What is left to report to a refused ``loss``: :attr:`remaining` (the cap's kind).

        The same question the zCDP filter answers in the kind of ``loss``, so that callers
        need not ask which filter they hold.
        """
        del loss
        return self.remaining

    @property
    def history(self) -> tuple[PrivacyLoss, ...]:
        """The charges accepted by this filter object, as they were given, in order."""
        return tuple(self._history)

    def can_charge(self, loss: PrivacyLoss) -> bool:
        """Return whether :meth:`charge` would accept ``loss`` now (a dry run; changes nothing).

        Raises:
            InvalidParameter: if ``loss`` cannot be expressed in the cap's kind.
        """
        _, total = self._total_after(loss)
        return self._fits(total)

    def charge(self, loss: PrivacyLoss) -> PrivacyLoss:
        """Spend ``loss`` if the total stays within the cap, else raise and change nothing.

        Returns:
            The amount added to :attr:`spent`: ``loss`` converted into the cap's kind.

        Raises:
            BudgetExceeded: if the total would exceed the cap in any component; its message
                names what is left, ``requested`` is the converted charge and ``remaining``
                what is left.
            InvalidParameter: if ``loss`` cannot be expressed in the cap's kind.
        """
        charge, total = self._total_after(loss)
        if not self._fits(total):
            remaining = self.remaining
            need, left = components(charge), components(remaining)
            # Show more digits when 6 would print an over-the-cap charge as equal to the rest.
            digits = 6
            if _describe(self._kind, need) == _describe(self._kind, left):
                digits = 17
            raise BudgetExceeded(
                "privacy budget exceeded: this release needs "
                f"{_describe(self._kind, need, digits)} but only "
                f"{_describe(self._kind, left, digits)} is left "
                f"(cap {_describe(self._kind, self._cap_values, digits)}, "
                f"{KIND_NAMES[self._kind]}); nothing was charged",
                requested=charge,
                remaining=remaining,
            )
        self._spent_values = total
        self._history.append(loss)
        return charge

    def __repr__(self) -> str:
        return f"BudgetFilter(cap={self._cap!r}, spent={self.spent!r})"


Accountant = Literal["basic"] | ZCDPAccountant
"""How a dataset's budget is spent: ``"basic"`` (:class:`BudgetFilter`, losses add) or a
:class:`~deniable.accounting.renyi.ZCDPAccountant` (an ``(ε, δ)`` cap spent as ρ-zCDP)."""

ACCOUNTANTS = ("basic", "zcdp")
"""The accountant names :func:`parse_accountant` knows."""


def parse_accountant(value: object) -> Accountant:
    """Read an accountant choice (a name, or a ``ZCDPAccountant``).

    Names: ``"basic"``, ``"zcdp"`` and ``"zcdp:delta_share=p/q"``.

    Raises:
        InvalidParameter: anything else.

    Examples:
        >>> parse_accountant("zcdp")
        ZCDPAccountant(delta_share=Fraction(1, 2))
    """
    if isinstance(value, ZCDPAccountant):
        return value
    if value == "basic":
        return "basic"
    if isinstance(value, str):
        return ZCDPAccountant.parse(value)
    raise InvalidParameter(
        f"accountant must be 'basic' or 'zcdp' (or a ZCDPAccountant), got {type(value).__name__}"
    )


def accountant_spec(accountant: Accountant) -> str:
    """The canonical text of an accountant choice (what the ledger stores)."""
    choice = parse_accountant(accountant)
    return choice.spec if isinstance(choice, ZCDPAccountant) else "basic"


def check_accountant(cap: PrivacyLoss, accountant: Accountant) -> None:
    """Refuse an accountant that cannot spend ``cap``.

    Raises:
        InvalidParameter: ``"zcdp"`` with a cap other than ``EpsilonDelta`` with ``δ > 0``.
    """
    if accountant != "basic" and not (isinstance(cap, EpsilonDelta) and cap.delta > 0):
        raise InvalidParameter(
            "accountant='zcdp' needs an EpsilonDelta cap with δ > 0 (e.g. "
            "EpsilonDelta(epsilon=1, delta=1e-6)); a Rho cap already adds ρ and a pure ε cap "
            "cannot pay the ρ → (ε, δ) conversion: use accountant='basic'"
        )


def make_filter(
    cap: PrivacyLoss,
    accountant: Accountant,
    *,
    spent: PrivacyLoss | ZCDPSpent | None = None,
) -> BudgetFilter | ZCDPFilter:
    """Build the filter ``accountant`` names for ``cap``, with what was already ``spent``.

    ``spent`` is a loss in the cap's kind for ``"basic"`` and a
    :class:`~deniable.accounting.renyi.ZCDPSpent` for the zCDP accountant.

    Raises:
        InvalidParameter: an accountant that cannot spend ``cap``, or a ``spent`` of the
            wrong form.
    """
    choice = parse_accountant(accountant)
    check_accountant(cap, choice)
    if not isinstance(choice, ZCDPAccountant):
        if isinstance(spent, ZCDPSpent):
            raise InvalidParameter("the basic accountant's spent total is a privacy loss")
        return BudgetFilter(cap, spent=spent)
    if spent is not None and not isinstance(spent, ZCDPSpent):
        raise InvalidParameter("the zCDP accountant's spent total is a ZCDPSpent")
    if not isinstance(cap, EpsilonDelta):  # pragma: no cover - check_accountant refused it
        raise InvalidParameter("the zCDP accountant needs an EpsilonDelta cap")
    return ZCDPFilter(cap, delta_share=choice.delta_share, spent=spent)
