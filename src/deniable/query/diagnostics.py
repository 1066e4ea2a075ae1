"""Bounding diagnostics: how many people each bounding rule cut, released with DP.

A bounded statistic can be far from the one the analyst meant when the bounds cut many
people's rows. With an answer, for a small declared ε, deniable can say so: "≈ 3.1% ± 0.4%
of people had rows dropped by max_rows = 1". Released, over the rows the query reads:

* ``people``: how many people those rows belong to;
* for ``max_groups``: the people with more partitions than ``max_groups``;
* for ``max_rows``: the people with a partition of more than ``max_rows`` rows;
* for each clamped column: the people with a value outside its bounds.

Each person counts at most once in each count, so each count has sensitivity 1; the
``k`` counts are released together by the discrete Laplace mechanism at L1 sensitivity
``k`` and ``ε``: ε-DP. The statement
(:func:`deniable.query.rewrite.compile.diagnostics_statement`) returns one row of ``k``
integers: what reaches Python before the charge has a public size. The shares and their
intervals are post-processing.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from deniable.accounting.loss import Epsilon, Number, exact
from deniable.engines.base import Engine, TableBinding
from deniable.errors import InvalidParameter
from deniable.ledger import Ledger
from deniable.mechanisms import Release, geometric
from deniable.noise.source import RandomSource
from deniable.query.catalog import Bounds, Column
from deniable.query.execute import precheck_budget
from deniable.query.plan import DPPlan
from deniable.query.rewrite.compile import DIAGNOSTIC_RULES, diagnostics_statement


@dataclass(frozen=True)
class RuleCut:
    """One rule's noisy count of the people it cut, and their share.

    Attributes:
        rule: the rule in words (``max_rows = 1``, ``cost clamped to [0, 5000]``).
        people: the noisy number of people it cut.
        share: that count over the noisy number of people (clipped to [0, 1]).
        low: lower end of the share's interval (at the diagnostics' level).
        high: upper end of the share's interval.
    """

    rule: str
    people: int
    share: float
    low: float
    high: float

    def line(self) -> str:
        """``≈ 3.1% (0.4%–5.9%) of people had rows cut by max_rows = 1``."""
        verb = "had values clamped" if "clamped" in self.rule else "had rows dropped"
        return (
            f"≈ {self.share:.1%} ({self.low:.1%}–{self.high:.1%}) of people {verb} by {self.rule}"
        )


@dataclass(frozen=True)
class BoundingDiagnostics:
    """The released diagnostics of one query (charged ``epsilon``).

    Attributes:
        epsilon: the ε charged.
        people: the noisy number of people the query's rows belong to.
        cuts: one :class:`RuleCut` per rule.
        level: the intervals' confidence level (each share's, union bound over its two
            counts).
        charge_id: the ledger's charge.
    """

    epsilon: Fraction
    people: int
    cuts: tuple[RuleCut, ...]
    level: float
    charge_id: int

    def lines(self) -> list[str]:
        """One readable line per rule."""
        return [c.line() for c in self.cuts]


def _clamps(plan: DPPlan) -> list[tuple[Column, Bounds]]:
    seen: dict[str, tuple[Column, Bounds]] = {}
    for agg in plan.aggregates:
        column = agg.aggregate.column
        if agg.bounds is not None and column is not None and column.expr is None:
            seen.setdefault(column.name, (column, agg.bounds))
    return list(seen.values())


def release_counts(
    exact_counts: npt.NDArray[np.int64], epsilon: Fraction, source: RandomSource | None = None
) -> Release:
    """Noise the diagnostics' ``k`` counts together: L1 sensitivity ``k``, ``ε``-DP.

    Each count (people, and each rule's cut people) moves by at most one between
    neighbours. Call only after the charge. A 2-D input noises each row alike (tests).
    """
    k = exact_counts.shape[-1]
    return geometric(exact_counts, sensitivity=k, epsilon=epsilon, source=source)


def bounding_diagnostics(
    plan: DPPlan,
    engine: Engine,
    binding: TableBinding,
    *,
    ledger: Ledger,
    dataset: str,
    analyst: str,
    query_text: str,
    epsilon: Number,
    level: float = 0.95,
    source: RandomSource | None = None,
) -> BoundingDiagnostics:
    """Release how many people each bounding rule of ``plan`` cut; spends ``epsilon`` (ε-DP).

    Charged before any noise is drawn; a refusal (budget, an unsupported query) happens
    before the engine runs.

    Raises:
        InvalidParameter: ε not positive, a row-level table (nothing is bounded per
            person), a query that joins tables (diagnostics read one table).
        BudgetExceeded: ε does not fit what is left (nothing spent).
    """
    eps = exact(epsilon, "epsilon")
    if eps <= 0:
        raise InvalidParameter("diagnostics need an epsilon > 0")
    if plan.query.table.policy.privacy_unit is None:
        raise InvalidParameter("diagnostics count people: this table protects single rows")
    if plan.query.joins:
        raise InvalidParameter("diagnostics are computed on single-table queries only")
    clamps = _clamps(plan)
    loss = Epsilon(epsilon=eps)
    precheck_budget(ledger, dataset, loss, what="the bounding diagnostics")
    sql = diagnostics_statement(plan, engine.capabilities, binding.name, clamps)
    engine.check(binding, sql)
    row = engine.run(binding, sql)
    k = 1 + len(DIAGNOSTIC_RULES) + len(clamps)
    names = ["people", *DIAGNOSTIC_RULES, *(f"clamp{i}" for i in range(len(clamps)))]
    exact_counts = np.zeros(k, dtype=np.int64)  # public size
    if row.num_rows:
        for i, name in enumerate(names):
            exact_counts[i] = int(row.column(name)[0].as_py() or 0)
    charge = ledger.charge(
        dataset,
        loss,
        analyst=analyst,
        query_key=f"diagnostics/{secrets.token_hex(16)}",
        query_text=f"bounding diagnostics of: {query_text}",
        details={"diagnostics": {"rules": names, "epsilon": str(eps)}},
    )
    # Only now, after the commit, is anything computed from the data released.
    release = release_counts(exact_counts, eps, source)
    noisy = np.asarray(release.value, dtype=np.int64)
    lo, hi = release.interval(1 - (1 - level) / 2)  # two counts per share: union bound
    people = max(int(noisy[0]), 0)
    rules = [f"max_groups = {plan.max_groups}", f"max_rows = {plan.max_rows}"]
    rules += [f"{c.name} clamped to [{float(b.lower):g}, {float(b.upper):g}]" for c, b in clamps]
    cuts = []
    for i, rule in enumerate(rules, start=1):
        count = max(int(noisy[i]), 0)
        share = min(count / people, 1.0) if people else 0.0
        low = max(float(lo[i]), 0.0) / max(float(hi[0]), 1.0)
        high = min(max(float(hi[i]), 0.0) / max(float(lo[0]), 1.0), 1.0)
        cuts.append(RuleCut(rule, count, share, min(low, 1.0), high))
    return BoundingDiagnostics(eps, people, tuple(cuts), level, charge.id)
