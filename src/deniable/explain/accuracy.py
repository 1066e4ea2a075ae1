"""Accuracy against the privacy budget: interval half-widths as ε (or ρ) varies.

Two sources of a curve, neither of which reads data, draws randomness or spends budget:

* a ``(sensitivity, mechanism)`` pair (:func:`accuracy_curve`): the exact half-width of
  :meth:`deniable.mechanisms.Release.half_width` at each budget, from the mechanism's own
  noise law (:func:`~deniable.explain.distributions.noise_law`);
* a compiled query (:func:`program_accuracy_curve`): a function that compiles the query at a
  given budget (``deniable.query.program.compile`` is pure) and, for each noisy measure of
  its plan (each count or sum an output is built from), the half-width of the measure's
  exact interval in row units — the same interval the answer reports for a COUNT or SUM
  (before clamping at 0). An AVG's or a variance's interval depends on the released count,
  so it is not a number known in advance; the curves of its count and sum measures are.

``explain`` sits below ``query`` (DESIGN.md §2), so compiled programs are read through the
small structural protocols below rather than imported.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol

import numpy as np
import numpy.typing as npt

from deniable.accounting.loss import Number, exact
from deniable.errors import InvalidParameter
from deniable.explain.distributions import MechanismName, budget_name, noise_law

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True)
class AccuracyCurve:
    """Half-widths of confidence intervals against the budget.

    Attributes:
        parameter: ``"ε"`` or ``"ρ"``: what the budgets are.
        budgets: the budgets, as given (floats, increasing order not required).
        half_widths: for each labelled output, the half-width at each budget, in value units.
        level: the confidence level of the intervals.
        description: what the curve is about (mechanism and sensitivity, or the query).
    """

    parameter: str
    budgets: F64
    half_widths: dict[str, F64]
    level: float
    description: str


def _budgets(budgets: Sequence[Number]) -> list[Fraction]:
    if len(budgets) == 0:
        raise InvalidParameter("give at least one budget (ε or ρ) to plot")
    out = [exact(b, "budget") for b in budgets]
    if any(b == 0 for b in out):
        raise InvalidParameter("budgets must be > 0: with no budget there is no finite interval")
    return out


def _level(level: float) -> float:
    if isinstance(level, bool) or not isinstance(level, int | float) or not 0 < level < 1:
        raise InvalidParameter("level must be strictly between 0 and 1, e.g. 0.95")
    return float(level)


def accuracy_curve(
    budgets: Sequence[Number],
    *,
    sensitivity: Number,
    mechanism: MechanismName = "geometric",
    level: float = 0.95,
) -> AccuracyCurve:
    """Return the interval half-width of ``mechanism`` at each budget; no data, no budget spent.

    The half-width ``h`` is the one a release reports (:meth:`Release.half_width`): the
    interval ``[value − h, value + h]`` covers the value before noise — the value after
    bounding, not the unbounded statistic: noise only — with probability ≥ ``level``, exactly
    from the noise law (not a normal approximation).

    Args:
        budgets: ε for ``geometric``/``laplace``, ρ for ``discrete_gaussian``/``gaussian``.
        sensitivity: the query's sensitivity (an integer for ``geometric``).
        mechanism: which mechanism of :mod:`deniable.mechanisms`.
        level: the confidence level.

    Raises:
        InvalidParameter: no budget, a zero/negative budget, a bad level or parameters the
            mechanism refuses.

    Examples:
        >>> c = accuracy_curve([1, 2], sensitivity=1)
        >>> c.half_widths["geometric, sensitivity 1"].tolist()
        [3.0, 1.0]
    """
    lvl = _level(level)
    values = _budgets(budgets)
    widths = [
        noise_law(mechanism, sensitivity=sensitivity, budget=b).half_width(lvl) for b in values
    ]
    label = f"{mechanism}, sensitivity {float(exact(sensitivity, 'sensitivity')):g}"
    return AccuracyCurve(
        parameter=budget_name(mechanism),
        budgets=np.array([float(b) for b in values], dtype=np.float64),
        half_widths={label: np.array(widths, dtype=np.float64)},
        level=lvl,
        description=label,
    )


class ColumnLike(Protocol):
    """A column of a compiled plan (only its name is read)."""

    @property
    def name(self) -> str:
        """The column's name."""
        ...


class MeasureLike(Protocol):
    """A noisy measure of a compiled plan (``deniable.query.measures.Measure``)."""

    @property
    def id(self) -> str:
        """The measure's id (``m0``, …)."""
        ...

    @property
    def kind(self) -> str:
        """What is measured (``rows``, ``sum``, …)."""
        ...

    @property
    def column(self) -> ColumnLike | None:
        """The measured column, if any."""
        ...

    @property
    def mechanism(self) -> str:
        """The noise mechanism's name."""
        ...

    @property
    def sensitivity(self) -> Fraction:
        """The sensitivity given to the mechanism."""
        ...

    @property
    def budget(self) -> Fraction:
        """ε or ρ given to the mechanism."""
        ...

    @property
    def shift(self) -> int:
        """The coarse grid exponent of the released value."""
        ...

    @property
    def exponent(self) -> int:
        """The per-row fixed-point grid exponent."""
        ...


class PlanLike(Protocol):
    """A compiled plan (``deniable.query.plan.DPPlan``): its measures and interval level."""

    @property
    def measures(self) -> Sequence[MeasureLike]:
        """The noisy measures."""
        ...

    @property
    def level(self) -> float:
        """The confidence level of the intervals."""
        ...


class ProgramLike(Protocol):
    """A compiled query (``deniable.query.program.QueryProgram``)."""

    @property
    def plan(self) -> PlanLike:
        """The compiled plan."""
        ...


_ADDITIVE: dict[str, MechanismName] = {
    "geometric": "geometric",
    "discrete_gaussian": "discrete_gaussian",
}


def measure_half_width(measure: MeasureLike, level: float) -> float | None:
    """Half-width of a measure's exact interval in row units, or None for a histogram measure.

    The mechanism's half-width ``c`` (in units of ``2^shift``) becomes
    ``(c·2^shift + 2^(shift−1))·2^exponent``: the rounding of the exact measure to the coarse
    grid adds half a step (none when ``shift = 0``), and a sum's fixed-point grid is
    ``2^exponent`` (``deniable.query.aggregates.NoisyMeasures.interval``).
    """
    mech = _ADDITIVE.get(measure.mechanism)
    if mech is None:
        return None  # the exponential mechanism: accuracy is a rank error, not an interval
    law = noise_law(mech, sensitivity=measure.sensitivity, budget=measure.budget)
    c = law.half_width(level)
    step = Fraction(2) ** measure.shift
    slack = step / 2 if measure.shift else Fraction(0)
    return float((Fraction(c) * step + slack) * Fraction(2) ** measure.exponent)


def _measure_label(measure: MeasureLike) -> str:
    what = measure.kind if measure.column is None else f"{measure.kind} of {measure.column.name}"
    return f"{measure.id}: {what}"


def program_accuracy_curve(
    compile_at: Callable[[Fraction], ProgramLike],
    budgets: Sequence[Number],
    *,
    level: float | None = None,
    description: str = "query",
) -> AccuracyCurve:
    """Return each noisy measure's interval half-width as the query's budget varies.

    ``compile_at(b)`` compiles the query with total budget ``b`` (ε, or ρ for a zCDP
    budget), for instance
    ``lambda e: compile(sql, catalog, QueryOptions(budget_kind=Epsilon, epsilon=e))``.
    Compiling reads no data and spends nothing, and neither does this function.

    Args:
        compile_at: the query compiled at a budget.
        budgets: the budgets to evaluate.
        level: the confidence level (default: the plan's own).
        description: a short name of the query for titles.

    Raises:
        InvalidParameter: no budget, a zero/negative budget, a query with no noisy measure
            that has an interval (e.g. only quantiles), or measures that change between
            budgets.
    """
    values = _budgets(budgets)
    rows: dict[str, list[float]] = {}
    parameter = "ε"
    lvl: float | None = None if level is None else _level(level)
    for i, b in enumerate(values):
        plan = compile_at(b).plan
        if lvl is None:
            lvl = float(plan.level)
        seen: list[str] = []
        for meas in plan.measures:
            width = measure_half_width(meas, lvl)
            if width is None:
                continue
            if meas.mechanism == "discrete_gaussian":
                parameter = "ρ"
            label = _measure_label(meas)
            seen.append(label)
            rows.setdefault(label, []).append(width)
        if i and sorted(seen) != sorted(rows):
            raise InvalidParameter("the query's measures differ between budgets")
    if not rows:
        raise InvalidParameter(
            "the query has no count or sum with an interval (quantiles report a rank error)"
        )
    assert lvl is not None
    return AccuracyCurve(
        parameter=parameter,
        budgets=np.array([float(b) for b in values], dtype=np.float64),
        half_widths={k: np.array(v, dtype=np.float64) for k, v in rows.items()},
        level=lvl,
        description=description,
    )
