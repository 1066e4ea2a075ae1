"""A dataset's budget spent over time, from its ledger's charges.

Reads only the ledger's public record (the charges' times and losses, and the cap): nothing is
spent. Each charge counts as the budget filter counted it, converted into the cap's kind by
:func:`deniable.accounting.conversions.convert` (pure ε in an (ε, δ) cap as ``(ε, 0)``, in a
ρ cap as ``ε²/2``), and the running totals are exact fractions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from deniable.accounting.composition import components
from deniable.accounting.conversions import convert
from deniable.accounting.loss import PrivacyLoss
from deniable.accounting.renyi import ZCDPFilter, ZCDPSpent, zcdp_charge
from deniable.ledger import Charge, Ledger

F64 = npt.NDArray[np.float64]

_NAMES: dict[str, tuple[str, ...]] = {
    "Epsilon": ("ε",),
    "EpsilonDelta": ("ε", "δ"),
    "Rho": ("ρ",),
}


@dataclass(frozen=True)
class BudgetTimeline:
    """Cumulative spending of one dataset, charge by charge.

    Attributes:
        dataset: the dataset's name.
        names: the budget's components (``("ε",)``, ``("ε", "δ")`` or ``("ρ",)``).
        times: each charge's commit time, in commit order.
        spent: for each component, the exact running total after each charge.
        cap: for each component, the cap.
    """

    dataset: str
    names: tuple[str, ...]
    times: tuple[datetime, ...]
    spent: dict[str, tuple[Fraction, ...]]
    cap: dict[str, Fraction]

    def spent_floats(self, name: str) -> F64:
        """The running totals of one component, as floats (for plotting)."""
        return np.array([float(v) for v in self.spent[name]], dtype=np.float64)


def budget_timeline(dataset: str, charges: Sequence[Charge], cap: PrivacyLoss) -> BudgetTimeline:
    """Return the running total of ``charges`` (in commit order) in the kind of ``cap``.

    Raises:
        InvalidParameter: a charge the cap's kind cannot express (as the ledger would).

    Examples:
        >>> from deniable.accounting.loss import Epsilon
        >>> budget_timeline("t", [], Epsilon(epsilon=1)).cap
        {'ε': Fraction(1, 1)}
    """
    kind = type(cap)
    names = _NAMES[kind.__name__]
    ordered = sorted(charges, key=lambda c: c.id)
    totals = [Fraction(0)] * len(names)
    spent: dict[str, list[Fraction]] = {n: [] for n in names}
    for charge in ordered:
        parts = components(convert(charge.loss, kind))
        totals = [a + b for a, b in zip(totals, parts, strict=True)]
        for n, v in zip(names, totals, strict=True):
            spent[n].append(v)
    return BudgetTimeline(
        dataset=dataset,
        names=names,
        times=tuple(c.time for c in ordered),
        spent={n: tuple(v) for n, v in spent.items()},
        cap=dict(zip(names, components(cap), strict=True)),
    )


def ledger_timeline(ledger: Ledger, dataset: str) -> BudgetTimeline:
    """Return :func:`budget_timeline` of ``dataset``'s history and cap in ``ledger``.

    Reads the ledger's history and cap; spends nothing. A dataset spent through the zCDP
    accountant is shown in ρ (and the δ of charges with δ > 0) against the filter's ρ cap
    and δ pool.

    Raises:
        UnknownDataset: the dataset is not registered.
    """
    if ledger.accountant(dataset) == "basic":
        return budget_timeline(dataset, ledger.history(dataset), ledger.cap(dataset))
    # zCDP accountant: the filter's own currency, ρ (and the δ of charges with δ > 0),
    # against the ρ cap and the δ pool it derived from the (ε, δ) cap.
    budget = ledger.budget_filter(dataset)
    assert isinstance(budget, ZCDPFilter)
    ordered = sorted(ledger.history(dataset), key=lambda c: c.id)
    total = ZCDPSpent()
    rho: list[Fraction] = []
    delta: list[Fraction] = []
    for charge in ordered:
        total = total + zcdp_charge(charge.loss)
        rho.append(total.rho)
        delta.append(total.delta)
    return BudgetTimeline(
        dataset=dataset,
        names=("ρ", "δ"),
        times=tuple(c.time for c in ordered),
        spent={"ρ": tuple(rho), "δ": tuple(delta)},
        cap={"ρ": budget.rho_max, "δ": budget.delta_pool},
    )
