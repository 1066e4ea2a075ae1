"""Accuracy before spending: the intervals a query would get, and the budget a target needs.

Both functions read no data, draw no randomness and charge nothing: they work on the
compiled plan alone (:func:`deniable.query.program.compile` is pure).

:func:`accuracy` gives, for every output that is an aggregate, the half-width of the
interval the answer would report, in the user's units and under the output's own name. It
does not re-derive any interval formula: each aggregate's own ``release`` (the code that
builds the real answer's intervals, :mod:`deniable.query.aggregates`) is run on *assumed*
exact measures with each measure's exact noise law, so the width is the one an answer shows.

* Counts and sums (and COUNT(DISTINCT)): the width depends only on the plan (the noise's
  scale), not on the data.
* AVG, VARIANCE and STDDEV: the width depends on how many rows a group holds (and, more
  weakly, on the values). Pass ``rows=`` (an assumed size per group; values are assumed at
  the midpoint of their bounds); without it the width is reported as unknown, with what it
  depends on.
* Quantiles, MEDIAN, MIN, MAX: the exponential mechanism's error is a rank error (how many
  rows the released value may be off by), reported in rows; the interval's endpoints aim a
  public rank margin beyond the quantile's rank, so its width in value units depends on how
  the values spread near the quantile. Pass ``rows=`` to assume that many rows spread evenly
  over the bounds: the half-width is then the aggregate's own interval around the endpoints'
  expected choices (under the exponential mechanism's law on that histogram).

:func:`budget_for` inverts it: the least budget (ε, or ρ under zCDP) whose widths meet
per-output targets, found from the widths' scaling (``1/ε`` for Laplace-type noise,
``1/√ρ`` for Gaussian-type) and checked by compiling at the answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from deniable.errors import InvalidParameter
from deniable.explain.distributions import noise_law
from deniable.mechanisms import Release
from deniable.query.aggregates import NoisyMeasures, Quantile, rank_error, rank_margin_rows
from deniable.query.measures import HistogramMeasure, Measure, SquaresMeasure, SumMeasure
from deniable.query.plan import DPPlan
from deniable.query.release import quantile_scores

LARGE_GROUP = 10**9
"""Rows assumed for widths that do not depend on the size (keeps clamps at 0 out of play)."""


@dataclass(frozen=True)
class OutputAccuracy:
    """The expected accuracy of one output.

    Attributes:
        name: the output's name, as the query gives it.
        half_width: the interval's half-width in the output's units, at the plan's level;
            None when it depends on the data and no size was assumed.
        rank_error: for quantiles, MEDIAN, MIN and MAX: rows the released value may be off
            by in rank (at the plan's level); None otherwise.
        depends_on: what the width depends on, in words (None when it does not).
    """

    name: str
    half_width: float | None
    rank_error: float | None = None
    depends_on: str | None = None


@dataclass(frozen=True)
class AccuracyReport:
    """The expected accuracy of every aggregate output of one compiled query.

    Attributes:
        level: the confidence level of the intervals.
        outputs: each aggregate output, in query order.
        assumed_rows: the assumed rows per group, when given.
    """

    level: float
    outputs: tuple[OutputAccuracy, ...]
    assumed_rows: int | None = None

    def width(self, name: str) -> float | None:
        """The half-width of output ``name`` (case-blind)."""
        for out in self.outputs:
            if out.name.lower() == name.lower():
                return out.half_width
        raise InvalidParameter(
            f"no output named {name!r}; outputs: {[o.name for o in self.outputs]}"
        )


def accuracy(plan: DPPlan, *, rows: int | None = None) -> AccuracyReport:
    """Expected interval half-widths of ``plan``'s outputs; reads no data, spends nothing.

    Args:
        plan: the compiled plan (``Session.plan``).
        rows: an assumed number of rows per group, for the outputs whose width depends on it
            (AVG, VARIANCE, STDDEV). Values are assumed at the midpoint of their bounds.

    Raises:
        InvalidParameter: ``rows`` is not a positive integer.
    """
    if rows is not None and (isinstance(rows, bool) or not isinstance(rows, int) or rows < 1):
        raise InvalidParameter("rows must be a positive integer (assumed rows per group)")
    level = float(plan.level)
    outputs: list[OutputAccuracy] = []
    for out in plan.query.outputs:
        if out.aggregate is None:
            continue
        agg = plan.aggregates[out.aggregate]
        measures = tuple(plan.measure(i) for i in agg.measures)
        if isinstance(agg.aggregate, Quantile):
            outputs.append(_quantile_accuracy(out.name, agg.aggregate, measures, level, rows))
            continue
        sized = agg.aggregate.interval_depends_on_size
        if sized and rows is None:
            outputs.append(
                OutputAccuracy(
                    out.name,
                    None,
                    depends_on="the number of rows per group (pass rows=… to assume one)",
                )
            )
            continue
        n = rows if sized and rows is not None else LARGE_GROUP
        noisy = _assumed(measures, n, level)
        released = agg.aggregate.release(measures, noisy)
        assert released.interval is not None
        lo, hi = released.interval(level)
        width = float((hi[0] - lo[0]) / 2)
        depends = f"rows per group (assumed {n:,})" if sized else None
        outputs.append(OutputAccuracy(out.name, width, depends_on=depends))
    return AccuracyReport(level, tuple(outputs), rows)


def _assumed(measures: tuple[Measure, ...], n: int, level: float) -> NoisyMeasures:
    """Noise-free measures of one group of ``n`` rows at the bounds' midpoint.

    Each carries its measure's exact noise law, so intervals have an answer's widths.
    """
    noisy: dict[str, np.ndarray] = {}
    releases: dict[str, Release] = {}
    for m in measures:
        units = _exact_units(m, n)
        coarse = int(units) >> m.shift
        law = noise_law(
            "discrete_gaussian" if m.mechanism == "discrete_gaussian" else "geometric",
            sensitivity=m.sensitivity,
            budget=m.budget,
        )
        value = np.array([coarse], dtype=np.int64)
        noisy[m.id] = value
        releases[m.id] = Release(value, m.loss, m.mechanism, float("nan"), 1.0, law)
    return NoisyMeasures(noisy=noisy, releases=releases, chosen={}, size=1, level=level)


def _quantile_accuracy(
    name: str, agg: Quantile, measures: tuple[Measure, ...], level: float, rows: int | None
) -> OutputAccuracy:
    """A quantile's rank error, and its interval's half-width for ``rows`` spread evenly."""
    hists = [m for m in measures if isinstance(m, HistogramMeasure)]
    point = hists[0]
    margin = max(rank_margin_rows(m) for m in hists[1:])
    rank = rank_error(point, level)
    aim = f"the interval's endpoints aim {margin:.1f} rows beyond the quantile's rank"
    if rows is None:
        return OutputAccuracy(
            name,
            None,
            rank_error=rank,
            depends_on=(
                f"how the values spread near the quantile ({aim}; pass rows=… to assume "
                "that many rows spread evenly over the bounds)"
            ),
        )
    counts = _even_histogram(rows, point.grid)
    chosen = {m.id: np.array([_expected_choice(m, counts)], dtype=np.int64) for m in hists}
    noisy = NoisyMeasures(noisy={}, releases={}, chosen=chosen, size=1, level=level)
    released = agg.release(measures, noisy)
    assert released.interval is not None
    lo, hi = released.interval(level)
    return OutputAccuracy(
        name,
        float((hi[0] - lo[0]) / 2),
        rank_error=rank,
        depends_on=f"how the values spread (assumed {rows:,} rows spread evenly; {aim})",
    )


def _even_histogram(n: int, grid: int) -> np.ndarray:
    """Counts on ``0..grid`` of ``n`` values at ``lower + (i + ½)/n·(upper − lower)``."""
    j = np.arange(grid + 1, dtype=np.float64)
    # values of cells ≤ j: (i + ½)·grid/n < j + ½
    upto = np.clip(np.ceil((j + 0.5) * n / grid - 0.5), 0, n)
    upto[-1] = n
    return np.diff(upto, prepend=0.0).astype(np.int64)


def _expected_choice(m: HistogramMeasure, counts: np.ndarray) -> int:
    """The candidate nearest the mean choice of the exponential mechanism on ``counts``.

    The law ``∝ exp(ε·score/(2Δ))`` (permute-and-flip's is at least as concentrated on the
    best scores); a dry-run estimate, never a release.
    """
    scores = quantile_scores(counts, m.q, m.target).astype(np.float64)
    weights = np.exp(float(m.budget / (2 * m.sensitivity)) * (scores - scores.max()))
    mean = float(np.dot(weights, np.arange(scores.size)) / weights.sum())
    return round(mean)


def _exact_units(m: Measure, n: int) -> int:
    """The exact value of measure ``m`` for ``n`` rows all at the bounds' midpoint."""
    if isinstance(m, SumMeasure):
        per_row = round(m.midpoint_f / float(m.row_granularity)) - m.centre
        return n * per_row
    if isinstance(m, SquaresMeasure):
        return 0  # every value at the centre the squares are taken about
    return n  # counts of rows, values, units or distinct values


def budget_for(
    compile_at: Callable[[Fraction], DPPlan],
    targets: Mapping[str, float],
    *,
    start: Fraction = Fraction(1),
    rows: int | None = None,
) -> Fraction:
    """The least budget (ε, or ρ) at which every output in ``targets`` meets its half-width.

    ``compile_at(b)`` compiles the query at total budget ``b``. The widths fall as ``1/ε``
    (Laplace-type noise) or ``1/√ρ`` (Gaussian-type); the budget is scaled from ``start``
    by the worst ratio, then raised in small steps until every target holds (the fixed-point
    grids and integer sensitivities make the scaling approximate). Reads no data, spends
    nothing.

    Raises:
        InvalidParameter: no targets, a target that is not positive, an unknown output, an
            output with no interval (quantiles), or an AVG-like output without ``rows``.
    """
    if not targets:
        raise InvalidParameter("give at least one target, e.g. target={'n': 10}")
    for name, t in targets.items():
        if isinstance(t, bool) or not isinstance(t, int | float) or not t > 0:
            raise InvalidParameter(f"the target of {name!r} must be a positive half-width")
    budget = Fraction(start)
    for _ in range(60):
        plan = compile_at(budget)
        report = accuracy(plan, rows=rows)
        worst = 0.0
        for name, target in targets.items():
            width = report.width(name)
            if width is None:
                raise InvalidParameter(
                    f"output {name!r} has no interval known in advance "
                    f"({_why(report, name)}); choose a count or a sum, or pass rows=…"
                )
            worst = max(worst, width / float(target))
        gaussian = any(m.mechanism == "discrete_gaussian" for m in plan.measures)
        if worst <= 1.0:
            return _shrink(compile_at, budget, targets, rows, gaussian)
        factor = worst * worst if gaussian else worst
        budget = _fraction(float(budget) * max(factor, 1.001))
    raise InvalidParameter("no budget meets these targets (the widths do not fall with it)")


def _shrink(
    compile_at: Callable[[Fraction], DPPlan],
    budget: Fraction,
    targets: Mapping[str, float],
    rows: int | None,
    gaussian: bool,
) -> Fraction:
    """The least budget that still meets the targets, below one that does (to 0.5%).

    Widths are step functions of the budget (integer sensitivities, integer noise
    quantiles), so the scaling law only starts the search: a failing budget is found below,
    then the gap is bisected.
    """

    def meets(b: Fraction) -> bool:
        report = accuracy(compile_at(b), rows=rows)
        return all((report.width(n) or math.inf) <= t for n, t in targets.items())

    report = accuracy(compile_at(budget), rows=rows)
    worst = max((report.width(n) or 0.0) / t for n, t in targets.items())
    low = _fraction(float(budget) * (worst * worst if gaussian else worst) * 0.99)
    for _ in range(40):  # a budget that fails
        if low >= budget or not meets(low):
            break
        budget, low = low, _fraction(float(low) / 2)
    else:
        return budget
    for _ in range(40):  # bisect: low fails, budget meets
        if budget - low <= budget / 200:
            break
        mid = _fraction(float(low + budget) / 2)
        if mid >= budget:
            break
        if meets(mid):
            budget = mid
        else:
            low = mid
    return budget


def _fraction(value: float) -> Fraction:
    """A short rational just above ``value`` (six significant digits)."""
    digits = 6 - math.floor(math.log10(value)) - 1
    scale = 10 ** max(digits, 0)
    return Fraction(math.ceil(value * scale), scale)


def _why(report: AccuracyReport, name: str) -> str:
    for out in report.outputs:
        if out.name.lower() == name.lower():
            return out.depends_on or "no interval"
    return "unknown output"
