"""Aggregates: one class per aggregate kind, owning everything about it.

Each class says which SQL spellings it answers (:attr:`Aggregate.sql`, dispatched on sqlglot's
expression classes, never on names), what it needs from the catalog (a numeric column,
clamping bounds), which noisy :class:`~deniable.query.measures.Measure` s it spends its budget
share on, and how it turns their noisy values into an output with a confidence interval
(post-processing, free). Adding an aggregate is one new class here and its tests.

Privacy: an aggregate never adds noise itself. Its measures are noised by the mechanisms
their plan names, with the sensitivities derived in :mod:`deniable.query.measures` from the
contribution and clamping bounds; the aggregate's loss is the composition of its measures'
losses, which is exactly its share of the query's budget.

Interval rules (coverage ≥ ``level`` per output, exact for the noise distribution, union
bound across measures): counts and sums take their measure's interval; AVG takes each of
its sum ``S`` and count ``N`` at level ``1 − (1−level)/2`` and the extreme ratios over that
box; VARIANCE takes count, centred sum and sum of squares at ``1 − (1−level)/3`` each and the
extremes of ``(Q − S²/N)/(N − 1)`` over the box; STDDEV is its square root. Quantiles (and
MIN/MAX, the 0- and 1-quantiles) take two more exponential-mechanism choices from the same
histogram, a lower and an upper endpoint aimed a public rank margin beyond the quantile
(:class:`Quantile`: half the budget for the value, a quarter for each endpoint), so their
interval covers the quantile of the bounded values at ``level`` whatever the data.
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar

import numpy as np
import numpy.typing as npt
from sqlglot import exp

from deniable.accounting.loss import PrivacyLoss
from deniable.mechanisms import Release
from deniable.query.catalog import Bounds, Column, ColumnKind
from deniable.query.measures import (
    HistogramMeasure,
    Measure,
    MeasureKind,
    SumMeasure,
    count_measure,
    histogram_measure,
    squares_measure,
    sum_measure,
)

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
Interval = tuple[F64, F64]


@dataclass(frozen=True)
class PlanContext:
    """Public parameters every aggregate's measures are planned with.

    Attributes:
        loss_kind: the kind of the budget (``Epsilon``, ``EpsilonDelta`` or ``Rho``).
        max_groups: partitions one privacy unit touches, ``m``.
        max_rows: rows one privacy unit adds to one partition, ``r``.
        quantile_grid: steps of the quantile candidate grid.
        grids: the shared fixed-point exponent of each summed column (by column name).
        new_id: a fresh measure id.
        level: the confidence level of the answer's intervals (quantile intervals are drawn
            for it: their endpoints' targets depend on it).
    """

    loss_kind: type[PrivacyLoss]
    max_groups: int
    max_rows: int
    quantile_grid: int
    grids: dict[str, int]
    new_id: Callable[[], str]
    level: float = 0.95


@dataclass
class NoisyMeasures:
    """The released measures of one query (post-processing inputs).

    Attributes:
        noisy: each additive measure's noisy value, in units of ``2^shift``.
        releases: each measure's release (mechanism, loss, intervals).
        chosen: each histogram measure's chosen candidate index per partition.
        size: number of released partitions.
        level: the confidence level the answer's notes speak of.
    """

    noisy: dict[str, I64]
    releases: dict[str, Release]
    chosen: dict[str, I64]
    size: int
    level: float = 0.95

    def units(self, meas: Measure) -> F64:
        """A noisy measure in its row units, as doubles."""
        return self.noisy[meas.id].astype(np.float64) * float(2**meas.shift)

    def interval(self, meas: Measure, level: float) -> Interval:
        """Interval of the exact measure in row units (the rounding to ``2^shift`` added)."""
        lo, hi = self.releases[meas.id].interval(level)
        step = float(2**meas.shift)
        slack = step / 2 if meas.shift else 0.0
        return (
            np.asarray(lo, dtype=np.float64) * step - slack,
            np.asarray(hi, dtype=np.float64) * step + slack,
        )

    def describe(self, meas: Measure) -> str:
        """How one measure was noised, in words."""
        rel = self.releases[meas.id]
        scale = rel.scale * float(meas.granularity)
        unit = (
            f", grid {float(meas.granularity):.3g}"
            if meas.kind in ("sum", "squares") or meas.shift
            else ""
        )
        param = "ρ" if meas.mechanism == "discrete_gaussian" else "ε"
        # the sensitivity in the value's own units (a sum's grid units times the grid)
        sensitivity = float(meas.sensitivity * meas.granularity)
        return (
            f"{meas.mechanism} ({param} = {float(meas.budget):.4g}, sensitivity "
            f"{sensitivity:.6g}, scale {scale:.4g}{unit})"
        )


@dataclass
class Released:
    """One aggregate's released values (post-processing of its noisy measures).

    Attributes:
        values: the released value per partition.
        mechanism: how it was computed, in words.
        note: an accuracy note (e.g. a quantile's rank error), or None.
        interval: the confidence interval at a given level, or None when the aggregate has
            none.
    """

    values: npt.NDArray[np.generic]
    mechanism: str
    note: str | None
    interval: Callable[[float], Interval] | None


def _split_level(level: float, parts: int) -> float:
    return 1.0 - (1.0 - level) / parts


@dataclass(frozen=True)
class Aggregate(ABC):
    """One aggregate of a query, resolved against the catalog.

    Attributes:
        column: the aggregated column (None for ``COUNT(*)``).
        bounds: the clamping range it uses (None when it needs none).
    """

    column: Column | None
    bounds: Bounds | None

    sql: ClassVar[tuple[type[exp.Expression], ...]] = ()
    """The sqlglot expression classes this aggregate answers."""
    label: ClassVar[str]
    """Base of default output names (``sum`` → ``sum_age``) and of messages."""
    needs_bounds: ClassVar[bool] = True
    """Whether the aggregate clamps its column (and so needs bounds and a numeric column)."""
    interval_depends_on_size: ClassVar[bool] = False
    """Whether its interval's width depends on the data (a ratio over a noisy count), so
    that its accuracy before spending needs an assumed size (:mod:`deniable.query.accuracy`)."""

    @property
    def default_name(self) -> str:
        """The output name when the query gives none."""
        return self.label if self.column is None else f"{self.label}_{self.column.name}"

    @property
    def signature(self) -> tuple[object, ...]:
        """Equal for two calls that compute the same thing (they are planned once)."""
        return (type(self), self.column, self.bounds)

    def sum_shares(self) -> tuple[tuple[bool, Fraction], ...]:
        """The sums this aggregate will plan: ``(centred, fraction of its budget)`` each.

        Used before planning to give every sum of a column one shared fixed-point grid.
        """
        return ()

    @abstractmethod
    def plan(self, budget: Fraction, ctx: PlanContext) -> tuple[Measure, ...]:
        """The measures this aggregate spends ``budget`` on.

        ``budget`` is ε or ρ; the measures' losses compose to exactly ``budget``.
        """

    @abstractmethod
    def release(self, measures: tuple[Measure, ...], noisy: NoisyMeasures) -> Released:
        """Post-process the noisy measures into the output (no privacy loss)."""


@dataclass(frozen=True)
class Count(Aggregate):
    """``COUNT(*)`` (rows) or ``COUNT(col)`` (non-NULL, non-NaN values).

    The released count is unbiased and can be negative (a small count plus noise);
    ``Session.sql(..., nonnegative=True)`` clips counts at 0 for reports that must not show
    one (:meth:`~deniable.query.answer.Answer.clipped_at_zero`: biased upward near 0).
    """

    sql: ClassVar[tuple[type[exp.Expression], ...]] = (exp.Count,)
    label: ClassVar[str] = "count"
    needs_bounds: ClassVar[bool] = False

    def plan(self, budget: Fraction, ctx: PlanContext) -> tuple[Measure, ...]:
        """One count measure: each kept row adds 1 (sensitivity ``r`` per partition)."""
        kind: MeasureKind = "rows" if self.column is None else "values"
        return (
            count_measure(
                ctx.new_id(),
                kind,
                self.column,
                budget,
                ctx.loss_kind,
                ctx.max_groups,
                ctx.max_rows,
            ),
        )

    def release(self, measures: tuple[Measure, ...], noisy: NoisyMeasures) -> Released:
        """The noisy count (unbiased, possibly negative) with the exact interval of its noise."""
        (m,) = measures
        values = noisy.noisy[m.id] * (1 << m.shift)

        def interval(level: float) -> Interval:
            return noisy.interval(m, level)

        return Released(values, noisy.describe(m), None, interval)


@dataclass(frozen=True)
class CountDistinct(Count):
    """``COUNT(DISTINCT unit)``: the number of privacy units (each adds 1 per partition)."""

    label: ClassVar[str] = "count_distinct"

    def plan(self, budget: Fraction, ctx: PlanContext) -> tuple[Measure, ...]:
        """One units measure: a unit adds 1 to each of its ≤ ``m`` partitions."""
        return (
            count_measure(ctx.new_id(), "units", None, budget, ctx.loss_kind, ctx.max_groups, 1),
        )

    @property
    def default_name(self) -> str:
        """``count_distinct_<column>``."""
        assert self.column is not None
        return f"count_distinct_{self.column.name}"


@dataclass(frozen=True)
class DistinctCount(Count):
    """``COUNT(DISTINCT col)`` of a column other than the privacy unit.

    Counted over the bounded rows: one unit keeps at most ``r`` rows in each of at most
    ``m`` partitions, so adding or removing it changes a partition's number of distinct
    values by at most ``r`` — the sensitivity the bounds imply. (A declared domain of the
    column does not lower it: values outside the domain are counted too.)
    """

    label: ClassVar[str] = "count_distinct"

    def plan(self, budget: Fraction, ctx: PlanContext) -> tuple[Measure, ...]:
        """One distinct-count measure with partition sensitivity ``r``."""
        per = ctx.max_rows
        return (
            count_measure(
                ctx.new_id(), "distinct", self.column, budget, ctx.loss_kind, ctx.max_groups, per
            ),
        )

    @property
    def default_name(self) -> str:
        """``count_distinct_<column>``."""
        assert self.column is not None
        return f"count_distinct_{self.column.name}"


@dataclass(frozen=True)
class Sum(Aggregate):
    """``SUM(col)`` of values clamped to the bounds, on an exact fixed-point grid."""

    sql: ClassVar[tuple[type[exp.Expression], ...]] = (exp.Sum,)
    label: ClassVar[str] = "sum"

    def sum_shares(self) -> tuple[tuple[bool, Fraction], ...]:
        """One uncentred sum with the whole share."""
        return ((False, Fraction(1)),)

    def plan(self, budget: Fraction, ctx: PlanContext) -> tuple[Measure, ...]:
        """One sum measure (sensitivity ``r·max(|lower|, |upper|)`` per partition)."""
        assert self.column is not None and self.bounds is not None
        return (
            sum_measure(
                ctx.new_id(),
                self.column,
                self.bounds,
                budget,
                ctx.loss_kind,
                ctx.max_groups,
                ctx.max_rows,
                centred=False,
                exponent=ctx.grids.get(self.column.name),
            ),
        )

    def release(self, measures: tuple[Measure, ...], noisy: NoisyMeasures) -> Released:
        """The noisy sum (clamped to ≥ 0 or ≤ 0 when the bounds have one sign)."""
        (m,) = measures
        assert self.bounds is not None and isinstance(m, SumMeasure)
        b_lo, b_hi = self.bounds.as_floats()
        g = float(m.row_granularity)
        values: npt.NDArray[np.generic]
        if m.integer_column and m.exponent == 0 and m.shift == 0:
            values = noisy.noisy[m.id].copy()
        else:
            values = noisy.units(m) * g
        if b_lo >= 0:
            values = np.maximum(values, 0)
        if b_hi <= 0:
            values = np.minimum(values, 0)

        def interval(level: float) -> Interval:
            lo, hi = noisy.interval(m, level)
            lo, hi = lo * g, hi * g
            if b_lo >= 0:
                lo, hi = np.maximum(lo, 0.0), np.maximum(hi, 0.0)
            if b_hi <= 0:
                lo, hi = np.minimum(lo, 0.0), np.minimum(hi, 0.0)
            return lo, hi

        return Released(values, noisy.describe(m), None, interval)


@dataclass(frozen=True)
class Mean(Aggregate):
    """``AVG(col)``: ``centre + S/N`` from a noisy centred sum and a noisy count (half each)."""

    sql: ClassVar[tuple[type[exp.Expression], ...]] = (exp.Avg,)
    label: ClassVar[str] = "avg"
    interval_depends_on_size: ClassVar[bool] = True

    def sum_shares(self) -> tuple[tuple[bool, Fraction], ...]:
        """One centred sum with half the share."""
        return ((True, Fraction(1, 2)),)

    def plan(self, budget: Fraction, ctx: PlanContext) -> tuple[Measure, ...]:
        """A count of values and a centred sum, each with half of ``budget``."""
        assert self.column is not None and self.bounds is not None
        m, r, kind = ctx.max_groups, ctx.max_rows, ctx.loss_kind
        count = count_measure(ctx.new_id(), "values", self.column, budget / 2, kind, m, r)
        total = sum_measure(
            ctx.new_id(),
            self.column,
            self.bounds,
            budget / 2,
            kind,
            m,
            r,
            centred=True,
            exponent=ctx.grids.get(self.column.name),
        )
        return count, total

    def release(self, measures: tuple[Measure, ...], noisy: NoisyMeasures) -> Released:
        """The clamped ratio; its interval is the extreme ratios over the two intervals."""
        mc, ms = measures
        assert self.bounds is not None and isinstance(ms, SumMeasure)
        b_lo, b_hi = self.bounds.as_floats()
        g, centre = float(ms.row_granularity), ms.centre
        n, s = noisy.units(mc), noisy.units(ms)
        mean = np.clip(g * (centre + s / np.maximum(n, 1.0)), b_lo, b_hi)

        def interval(level: float) -> Interval:
            lvl = _split_level(level, 2)
            n_lo, n_hi = noisy.interval(mc, lvl)
            s_lo, s_hi = noisy.interval(ms, lvl)
            low, high = np.full(noisy.size, b_lo), np.full(noisy.size, b_hi)
            ok = n_lo > 0
            if ok.any():
                with np.errstate(invalid="ignore", divide="ignore"):
                    cands = np.stack(
                        [
                            g * (centre + s_lo / n_lo),
                            g * (centre + s_lo / n_hi),
                            g * (centre + s_hi / n_lo),
                            g * (centre + s_hi / n_hi),
                        ]
                    )
                    low = np.where(ok, np.clip(cands.min(axis=0), b_lo, b_hi), low)
                    high = np.where(ok, np.clip(cands.max(axis=0), b_lo, b_hi), high)
            return low, high

        desc = f"mean = sum/count: {noisy.describe(mc)} / {noisy.describe(ms)}"
        return Released(mean, desc, None, interval)


@dataclass(frozen=True)
class Variance(Aggregate):
    """``VARIANCE``/``VAR_SAMP``/``VAR_POP``: from count, centred sum and sum of squares.

    Attributes:
        population: divide by ``N`` (``VAR_POP``) rather than ``N − 1``.
    """

    population: bool = False

    sql: ClassVar[tuple[type[exp.Expression], ...]] = (exp.Variance, exp.VariancePop)
    label: ClassVar[str] = "variance"
    interval_depends_on_size: ClassVar[bool] = True
    root: ClassVar[bool] = False

    @property
    def signature(self) -> tuple[object, ...]:
        """Sample and population versions differ."""
        return (*super().signature, self.population)

    def sum_shares(self) -> tuple[tuple[bool, Fraction], ...]:
        """One centred sum with a third of the share."""
        return ((True, Fraction(1, 3)),)

    def plan(self, budget: Fraction, ctx: PlanContext) -> tuple[Measure, ...]:
        """Count, centred sum and squares about the same centre, a third of ``budget`` each."""
        assert self.column is not None and self.bounds is not None
        m, r, kind = ctx.max_groups, ctx.max_rows, ctx.loss_kind
        third = budget / 3
        count = count_measure(ctx.new_id(), "values", self.column, third, kind, m, r)
        centred = sum_measure(
            ctx.new_id(),
            self.column,
            self.bounds,
            third,
            kind,
            m,
            r,
            centred=True,
            exponent=ctx.grids.get(self.column.name),
        )
        # Squares are taken about the sum's centre, so that both use one origin.
        centre = float(centred.centre * centred.row_granularity)
        squares = squares_measure(ctx.new_id(), self.column, self.bounds, centre, third, kind, m, r)
        return count, centred, squares

    def release(self, measures: tuple[Measure, ...], noisy: NoisyMeasures) -> Released:
        """``(Q − S²/N)/(N − 1)`` clamped to ``[0, (upper − lower)²/2]`` (``/4`` for POP)."""
        mc, ms, mq = measures
        assert self.bounds is not None
        b_lo, b_hi = self.bounds.as_floats()
        n = noisy.units(mc)
        g, g2 = float(ms.row_granularity), float(mq.row_granularity)
        s = noisy.units(ms) * g
        q = noisy.units(mq) * g2
        top = (b_hi - b_lo) ** 2 / (4 if self.population else 2)
        shift = 0.0 if self.population else 1.0
        n_eff = np.maximum(n, 2.0)
        var = np.clip((q - s * s / n_eff) / (n_eff - shift), 0.0, top)

        def interval(level: float) -> Interval:
            lvl = _split_level(level, 3)
            n_lo, n_hi = noisy.interval(mc, lvl)
            s_lo, s_hi = (x * g for x in noisy.interval(ms, lvl))
            q_lo, q_hi = (x * g2 for x in noisy.interval(mq, lvl))
            s2_max = np.maximum(s_lo * s_lo, s_hi * s_hi)
            s2_min = np.where((s_lo <= 0) & (s_hi >= 0), 0.0, np.minimum(s_lo * s_lo, s_hi * s_hi))
            low, high = np.zeros(noisy.size), np.full(noisy.size, top)
            ok = n_lo > 1.0
            with np.errstate(invalid="ignore", divide="ignore"):
                a_lo = q_lo - s2_max / n_lo
                a_hi = q_hi - s2_min / n_hi
                low = np.where(ok, np.clip(np.maximum(a_lo, 0.0) / (n_hi - shift), 0.0, top), low)
                high = np.where(ok, np.clip(np.maximum(a_hi, 0.0) / (n_lo - shift), 0.0, top), high)
            if self.root:
                return np.sqrt(low), np.sqrt(high)
            return low, high

        desc = ", ".join(noisy.describe(x) for x in measures)
        if self.root:
            return Released(np.sqrt(var), f"√variance from {desc}", None, interval)
        return Released(var, f"variance from {desc}", None, interval)


@dataclass(frozen=True)
class StdDev(Variance):
    """``STDDEV``/``STDDEV_SAMP``/``STDDEV_POP``: the square root of :class:`Variance`."""

    sql: ClassVar[tuple[type[exp.Expression], ...]] = (
        exp.Stddev,
        exp.StddevSamp,
        exp.StddevPop,
    )
    label: ClassVar[str] = "stddev"
    root: ClassVar[bool] = True


@dataclass(frozen=True)
class Quantile(Aggregate):
    """``QUANTILE(col, q)`` by the exponential mechanism over a candidate grid, with an interval.

    Candidates are ``v_j = lower + j·step``, ``j = 0..grid``, ``step = (upper − lower)/grid``;
    each clamped value falls in the cell of its nearest candidate (the engine's histogram,
    ``c_j`` values in cell ``j``). With ``q = num/den``, three exponential-mechanism choices
    are drawn from that one histogram (:func:`deniable.query.release.quantile_scores`):

    * the value: scores ``−|S(j)|``, ``S(j) = (den−num)·#below(j) − num·#above(j)`` (``den``
      times ``(1−q)·#below − q·#above``), with half of the aggregate's budget;
    * a lower endpoint ``L`` aimed at position ``−T`` and an upper endpoint ``U`` aimed at
      ``+T``, a quarter each. Cell ``j``'s rows span the positions ``[lo_j, hi_j]``,
      ``lo_j = den·#below(j) − num·n``, ``hi_j = lo_j + den·c_j`` (the cells tile the range;
      candidate 0's span is open downwards for ``L``, the last one's upwards for ``U``), and a
      candidate scores ``−dist(±T, [lo_j, hi_j])``: some candidate always scores 0.

    MIN (``q = 0``) and MAX (``q = 1``) need one endpoint only — the other is the bound
    itself, released for free — and spend half on the value and half on that endpoint. The
    aggregate's loss is the sum of its choices' losses, exactly its share of the budget (under
    zCDP each share's ρ is turned into an ε with ``ε²/2 ≤ ρ``); every score has the sensitivity
    of the value's (a row moves each ``lo_j``, ``hi_j`` by at most ``max(num, den − num)``).

    Coverage (``1 − β`` per endpoint, ``β = (1 − level)/2``, ``1 − level`` for MIN/MAX; union
    bound): ``T = ⌈2Δ/ε_e·ln((grid+1)/β)⌉ + max(num, den−num)`` in score units (``T/den``
    rows: the *rank margin*, more than the endpoint's own rank error at ``1 − β``). Let
    ``y₍₁₎ ≤ … ≤ y₍ₙ₎`` be the binned values and ``k = ⌊(n−1)q⌋ + 1``. A candidate above
    ``y₍ₖ₎``'s cell has ``#below ≥ k``, so ``lo_j ≥ den·k − num·n ≥ 1 − num`` and its score is
    at most ``−(T + 1 − num)``, while the best scores 0: permute-and-flip picks it with
    probability ≤ ``exp(−ε_e(T + 1 − num)/(2Δ))``, all ``≤ grid`` of them with probability
    ≤ β. Likewise a candidate below the cell of ``y₍ₖ'₎``, ``k' = ⌈(n−1)q⌉ + 1``, has
    ``hi_j ≤ den − num − 1`` and is ``U`` with probability ≤ β in all. No assumption on the
    data is needed (ties, gaps, few or no rows: where the histogram says little, the
    endpoint goes to the bound). DuckDB's ``QUANTILE_CONT``/``MEDIAN`` lie in
    ``[x₍ₖ₎, x₍ₖ'₎]`` and ``QUANTILE_DISC`` is ``x₍max(1, ⌈nq⌉)₎``, within the same ranks; a
    value and its candidate differ by at most ``step/2``, so ``[v_L − step/2, v_U + step/2]``
    (within the bounds; no half step for an integer column whose grid is every integer)
    covers the quantile of the bounded, clamped values with probability ≥ ``level``. The
    released value is clipped into its interval (post-processing). An interval asked at a
    level above the one planned is the clamping range (it always covers).

    Attributes:
        q: the quantile, exact, in ``[0, 1]``.
    """

    q: Fraction = Fraction(1, 2)

    sql: ClassVar[tuple[type[exp.Expression], ...]] = (
        exp.Quantile,
        exp.PercentileCont,
        exp.PercentileDisc,
    )
    label: ClassVar[str] = "quantile"

    @property
    def signature(self) -> tuple[object, ...]:
        """Different quantiles differ."""
        return (*super().signature, self.q)

    @property
    def default_name(self) -> str:
        """``quantile_<column>_<q>``."""
        assert self.column is not None
        return f"quantile_{self.column.name}_{float(self.q):g}".replace(".", "_")

    @property
    def shares(self) -> tuple[Fraction, Fraction, Fraction]:
        """Fractions of the budget for the value, the lower and the upper endpoint.

        Examples:
            >>> [str(f) for f in Quantile(None, None).shares]
            ['1/2', '1/4', '1/4']
            >>> [str(f) for f in Quantile(None, None, Fraction(0)).shares]
            ['1/2', '0', '1/2']
        """
        half, quarter, none = Fraction(1, 2), Fraction(1, 4), Fraction(0)
        if self.q == 0:
            return half, none, half
        if self.q == 1:
            return half, half, none
        return half, quarter, quarter

    def plan(self, budget: Fraction, ctx: PlanContext) -> tuple[Measure, ...]:
        """The value's histogram measure, then the endpoints' (targets ``−T``, ``+T``).

        All read one engine histogram; their budgets are :attr:`shares` of ``budget``.
        """
        assert self.column is not None and self.bounds is not None
        column, bounds = self.column, self.bounds

        def measure(share: Fraction) -> HistogramMeasure:
            return histogram_measure(
                ctx.new_id(),
                column,
                bounds,
                self.q,
                budget * share,
                ctx.loss_kind,
                ctx.max_groups,
                ctx.max_rows,
                ctx.quantile_grid,
            )

        point_share, lower_share, upper_share = self.shares
        out: list[Measure] = [measure(point_share)]
        endpoints = [(s, sign) for s, sign in ((lower_share, -1), (upper_share, 1)) if s]
        beta = (1.0 - ctx.level) / len(endpoints)
        for share, sign in endpoints:
            base = measure(share)
            out.append(dataclasses.replace(base, target=sign * rank_margin(base, beta)))
        return tuple(out)

    def release(self, measures: tuple[Measure, ...], noisy: NoisyMeasures) -> Released:
        """The chosen candidate and its interval from the endpoints' choices."""
        point, *ends = measures
        assert self.bounds is not None and isinstance(point, HistogramMeasure)
        b_lo, b_hi = self.bounds.as_floats()
        grid = point.grid
        step = (b_hi - b_lo) / grid

        def candidate(m: Measure) -> F64:
            idx = noisy.chosen[m.id].astype(np.float64)
            return np.where(idx >= grid, b_hi, b_lo + idx * step)

        lower = upper = None
        for m in ends:
            assert isinstance(m, HistogramMeasure) and m.target != 0
            if m.target < 0:
                lower = m
            else:
                upper = m
        exact_cells = (
            self.column is not None
            and self.column.kind is ColumnKind.INTEGER
            and self.bounds.lower.denominator == 1
            and self.bounds.upper - self.bounds.lower == grid
        )
        slack = 0.0 if exact_cells else step / 2 + 2.0**-40 * (abs(b_lo) + abs(b_hi) + step)
        low = np.full(noisy.size, b_lo)
        high = np.full(noisy.size, b_hi)
        if lower is not None:
            low = np.clip(candidate(lower) - slack, b_lo, b_hi)
        if upper is not None:
            high = np.clip(candidate(upper) + slack, b_lo, b_hi)
        low, high = np.minimum(low, high), np.maximum(low, high)
        values = np.clip(candidate(point), low, high)
        covered = interval_level(tuple(m for m in ends if isinstance(m, HistogramMeasure)))

        def interval(level: float) -> Interval:
            if level <= covered:
                return low.copy(), high.copy()
            return np.full(noisy.size, b_lo), np.full(noisy.size, b_hi)

        rank = rank_error(point, noisy.level)
        margin = max(rank_margin_rows(m) for m in ends if isinstance(m, HistogramMeasure))
        note = (
            f"exponential mechanism over {grid + 1} candidates in [{b_lo:g}, {b_hi:g}]; with "
            f"probability ≥ {noisy.level:g} the released value's |(1−q)·#below − q·#above| "
            f"is within {rank:.1f} of the best candidate's; the interval's endpoints aim "
            f"{margin:.1f} rows beyond the quantile's rank and cover the quantile of the "
            f"bounded values with probability ≥ {covered:.6g}"
        )
        budgets = " + ".join(f"{float(m.budget):.4g}" for m in ends)
        mech = (
            f"exponential (ε = {float(point.budget):.4g} for the value, {budgets} for the "
            f"interval, score sensitivity {point.sensitivity})"
        )
        return Released(values, mech, note + self.extra_note, interval)

    extra_note: ClassVar[str] = ""


@dataclass(frozen=True)
class Median(Quantile):
    """``MEDIAN(col)``: the ½-quantile."""

    sql: ClassVar[tuple[type[exp.Expression], ...]] = (exp.Median,)
    label: ClassVar[str] = "median"

    @property
    def default_name(self) -> str:
        """``median_<column>``."""
        assert self.column is not None
        return f"median_{self.column.name}"


@dataclass(frozen=True)
class Min(Quantile):
    """``MIN(col)``: the 0-quantile through the exponential mechanism.

    Every candidate between the lower bound and the true minimum scores as well as the
    minimum itself, so the released value is, with high probability, at most the minimum
    (and at least the lower bound) — never an exact minimum, which no DP mechanism can give.
    Its interval runs from the lower bound (free) to a released upper endpoint.
    """

    q: Fraction = Fraction(0)

    sql: ClassVar[tuple[type[exp.Expression], ...]] = (exp.Min,)
    label: ClassVar[str] = "min"
    extra_note: ClassVar[str] = (
        "; MIN is the 0-quantile: candidates between the lower bound and the minimum score "
        "alike, so the value is at most the minimum with high probability"
    )

    @property
    def default_name(self) -> str:
        """``min_<column>``."""
        assert self.column is not None
        return f"min_{self.column.name}"


@dataclass(frozen=True)
class Max(Quantile):
    """``MAX(col)``: the 1-quantile (at least the maximum with high probability).

    Its interval runs from a released lower endpoint to the upper bound (free).
    """

    q: Fraction = Fraction(1)

    sql: ClassVar[tuple[type[exp.Expression], ...]] = (exp.Max,)
    label: ClassVar[str] = "max"
    extra_note: ClassVar[str] = (
        "; MAX is the 1-quantile: candidates between the maximum and the upper bound score "
        "alike, so the value is at least the maximum with high probability"
    )

    @property
    def default_name(self) -> str:
        """``max_<column>``."""
        assert self.column is not None
        return f"max_{self.column.name}"


def rank_error(m: HistogramMeasure, level: float) -> float:
    """Utility bound of the exponential mechanism, in rows: ``2Δ/ε·ln(|R|/(1−level))/den``."""
    q = m.q
    return (
        float(2 * m.sensitivity / m.budget) * math.log((m.grid + 1) / (1 - level)) / q.denominator
    )


def rank_margin(m: HistogramMeasure, beta: float) -> int:
    """The target ``T`` (score units) of an interval endpoint that errs with probability ≤ β.

    ``T = ⌈2Δ/ε·ln((grid+1)/β)⌉ + max(num, den − num)``: a wrong candidate scores at most
    ``−(T + 1 − max(num, den − num))`` (see :class:`Quantile`), and ``T/den`` rows exceed
    :func:`rank_error` at level ``1 − β``. Public: a function of the plan alone. (The
    relative ``1e-12`` absorbs the rounding of ``log``.)

    Examples:
        >>> from deniable.query.catalog import Bounds, Column, ColumnKind
        >>> from deniable.accounting.loss import Epsilon
        >>> col = Column("x", "DOUBLE", ColumnKind.REAL)
        >>> h = histogram_measure(
        ...     "m0", col, Bounds(Fraction(0), Fraction(1)), Fraction(1, 2), Fraction(1),
        ...     Epsilon, 1, 1, 99,
        ... )
        >>> rank_margin(h, 0.025), round(rank_error(h, 0.975), 2)  # T = 9 rows (den = 2)
        (18, 8.29)
    """
    num, den = m.q.numerator, m.q.denominator
    err = float(2 * m.sensitivity / m.budget) * math.log((m.grid + 1) / beta)
    return math.ceil(err * (1 + 1e-12)) + max(num, den - num)


def rank_margin_rows(m: HistogramMeasure) -> float:
    """An endpoint's rank margin ``|T|/den`` in rows (0 for the value's own measure)."""
    return abs(m.target) / m.q.denominator


def interval_level(endpoints: tuple[HistogramMeasure, ...]) -> float:
    """The coverage the endpoints guarantee (union bound over them).

    ``1 − Σ grid·exp(−ε(|T| + 1 − max(num, den−num))/(2Δ))`` from the measures' public
    parameters (see :class:`Quantile`): at least the level they were planned at; 1 when
    there is no endpoint.
    """
    miss = 0.0
    for m in endpoints:
        num, den = m.q.numerator, m.q.denominator
        gap = abs(m.target) + 1 - max(num, den - num)
        miss += m.grid * math.exp(-float(m.budget / (2 * m.sensitivity)) * gap)
    return 1.0 - miss


AGGREGATES: tuple[type[Aggregate], ...] = (
    Count,
    Sum,
    Mean,
    Variance,
    StdDev,
    Quantile,
    Median,
    Min,
    Max,
)
"""Every aggregate class; :data:`BY_SQL` maps sqlglot classes to them."""

BY_SQL: dict[type[exp.Expression], type[Aggregate]] = {
    cls_: agg for agg in AGGREGATES for cls_ in agg.sql
}
