"""Noisy measures: the exact per-partition integers the engine computes, and their noise.

A :class:`Measure` is one exact integer per partition (a number of rows, values or units,
a fixed-point sum, a sum of squares, or a histogram over a quantile grid) together with the
public facts of how it is noised: mechanism, sensitivity and budget. The constructors here
(:func:`count_measure`, :func:`sum_measure`, :func:`squares_measure`,
:func:`histogram_measure`) derive every one of those facts from public parameters only —
clamping bounds, contribution bounds and the budget share — never from data.

After contribution bounding one privacy unit touches at most ``m`` partitions and adds at
most ``r`` rows to each, so a measure whose per-row contribution lies in ``[a, b]`` changes
by at most ``Δ_p = r·max(|a|, |b|)`` in one partition and by ``m·Δ_p`` in L1 norm (``√m·Δ_p``
in L2) over all partitions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar, Literal

import numpy as np
import numpy.typing as npt

from deniable.accounting.loss import PrivacyLoss, Rho
from deniable.errors import InternalError, InvalidParameter
from deniable.mechanisms.events import (
    DiscreteGaussianEvent,
    ExponentialEvent,
    GeometricEvent,
    PrivacyEvent,
)
from deniable.noise.discrete_laplace import MAX_SCALE
from deniable.noise.grid import grid_exponent
from deniable.query.catalog import Bounds, Column, ColumnKind

ROW_UNITS_LOG2 = 30
"""Per-row fixed point: the noise scale of a sum is 2^30 to 2^31 units of the row grid."""
NOISE_UNITS_LOG2 = 24
"""Noise scales above 2^25 units are brought to 2^24–2^25 units of a coarser grid (well
inside the exact samplers' fast range); exact measures are rounded to it once, the slack
paid for."""
MAX_GAUSSIAN_SIGMA2 = Fraction(2**60)

MeasureKind = Literal["rows", "values", "units", "sum", "squares", "histogram", "distinct"]
Mechanism = Literal["geometric", "discrete_gaussian", "exponential"]


def round_half_away(x: Fraction) -> int:
    """Round to the nearest integer, ties away from zero — as DuckDB's ``round`` on doubles.

    Examples:
        >>> round_half_away(Fraction(5, 2)), round_half_away(Fraction(-5, 2))
        (3, -3)
    """
    n = math.floor(abs(x) + Fraction(1, 2))
    return n if x >= 0 else -n


@dataclass(frozen=True, kw_only=True)
class Measure:
    """One exact per-partition integer computed by the engine, and how it is noised.

    The base of one class per kind (:class:`RowCount`, :class:`ValueCount`,
    :class:`UnitCount`, :class:`DistinctValues`, :class:`SumMeasure`,
    :class:`SquaresMeasure`, :class:`HistogramMeasure`); each holds only its own fields.
    NULL and NaN values are ignored, as SQL aggregates do.

    Attributes:
        id: SQL-safe name (``m0``, ``m1``, …).
        column: the aggregated column (None for row and unit counts).
        partition_sensitivity: Δ_p, the most one unit changes the measure of one partition.
        mechanism: the noise mechanism.
        sensitivity: the sensitivity given to the mechanism (L1 over partitions for
            geometric and exponential, an upper bound of L2 for the discrete Gaussian).
        budget: ε (geometric, exponential) or ρ (discrete Gaussian) given to the mechanism.
        shift: the exact measure is rounded to a multiple of ``2^shift`` before noise.
        exponent: the per-row fixed-point grid ``2^exponent`` (0 for counts).
    """

    id: str
    column: Column | None
    partition_sensitivity: int
    mechanism: Mechanism
    sensitivity: Fraction
    budget: Fraction
    shift: int = 0
    exponent: int = 0

    kind: ClassVar[MeasureKind]
    """What the engine computes (``rows``, ``values``, ``units``, ``distinct``, ``sum``,
    ``squares``, ``histogram``): the SQL layer reads it to spell the measure."""

    @property
    def granularity(self) -> Fraction:
        """The grid of the released value: ``2^(exponent + shift)`` (exact)."""
        return Fraction(2) ** (self.exponent + self.shift)

    @property
    def row_granularity(self) -> Fraction:
        """The per-row fixed-point grid ``2^exponent`` (exact)."""
        return Fraction(2) ** self.exponent

    def coarsen(self, exact: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Round exact measures to multiples of ``2^shift`` (half up), in coarse units."""
        if self.shift == 0:
            return exact
        return (exact + (1 << (self.shift - 1))) >> self.shift

    @property
    def event(self) -> PrivacyEvent:
        """The privacy event of noising this measure (mechanism, sensitivity, budget)."""
        if self.mechanism == "discrete_gaussian":
            return DiscreteGaussianEvent(self.sensitivity, self.budget)
        if self.mechanism == "geometric":
            return GeometricEvent(self.sensitivity, self.budget)
        return ExponentialEvent(self.sensitivity, self.budget)

    @property
    def loss(self) -> PrivacyLoss:
        """The privacy map of this measure's mechanism at its sensitivity and budget."""
        return self.event.loss()

    def describe(self) -> dict[str, object]:
        """A JSON-compatible record of this release (for the ledger)."""
        out: dict[str, object] = {
            "measure": self.id,
            "kind": self.kind,
            "column": None if self.column is None else self.column.name,
            "mechanism": self.mechanism,
            "sensitivity": str(self.sensitivity),
            "sensitivity_in_value_units": str(self.sensitivity * self.granularity),
            ("rho" if self.mechanism == "discrete_gaussian" else "epsilon"): str(self.budget),
        }
        if self.shift:
            out["noise_grid"] = f"2^{self.exponent + self.shift}"
        return out


@dataclass(frozen=True, kw_only=True)
class RowCount(Measure):
    """Number of kept rows of a partition."""

    kind: ClassVar[MeasureKind] = "rows"


@dataclass(frozen=True, kw_only=True)
class ValueCount(Measure):
    """Number of non-NULL, non-NaN values of ``column`` among the kept rows."""

    kind: ClassVar[MeasureKind] = "values"


@dataclass(frozen=True, kw_only=True)
class UnitCount(Measure):
    """Number of privacy units of a partition (after bounding)."""

    kind: ClassVar[MeasureKind] = "units"


@dataclass(frozen=True, kw_only=True)
class DistinctValues(Measure):
    """Number of distinct non-NULL values of ``column`` among the kept rows.

    One unit's ``r`` rows add at most ``r`` new values to a partition.
    """

    kind: ClassVar[MeasureKind] = "distinct"


@dataclass(frozen=True, kw_only=True)
class ClampedMeasure(Measure):
    """A measure of values clamped to ``[lower_f, upper_f]`` (doubles, as the engine uses)."""

    lower_f: float
    upper_f: float


@dataclass(frozen=True, kw_only=True)
class SumMeasure(ClampedMeasure):
    """Σ ``round(clamp(x)·2^-exponent) − centre`` over the kept values (integer units).

    Attributes:
        midpoint_f: the bounds' midpoint (a double).
        centre: integer subtracted from each unit (0 for plain sums).
        row_low: least per-row contribution (integer units).
        row_high: greatest per-row contribution (integer units).
        integer_column: whether ``column`` holds integers (sums stay integers on grid 1).
    """

    midpoint_f: float
    centre: int
    row_low: int
    row_high: int
    integer_column: bool = False

    kind: ClassVar[MeasureKind] = "sum"

    def describe(self) -> dict[str, object]:
        """The record, with the row grid."""
        return {**super().describe(), "row_grid": f"2^{self.exponent}"}


@dataclass(frozen=True, kw_only=True)
class SquaresMeasure(ClampedMeasure):
    """Σ ``round((clamp(x) − midpoint_f)²·2^-exponent)`` over the kept values.

    Attributes:
        midpoint_f: the centre the squares are taken about (a double).
        row_high: greatest per-row contribution (integer units); the least is 0.
    """

    midpoint_f: float
    row_high: int

    kind: ClassVar[MeasureKind] = "squares"

    def describe(self) -> dict[str, object]:
        """The record, with the row grid."""
        return {**super().describe(), "row_grid": f"2^{self.exponent}"}


@dataclass(frozen=True, kw_only=True)
class HistogramMeasure(ClampedMeasure):
    """Counts per cell ``round((clamp(x) − lower_f)·grid/(upper_f − lower_f))``.

    Noised by the exponential mechanism for quantile ``q``, with the scores of
    :func:`deniable.query.release.quantile_scores`: ``target = 0`` aims at the quantile,
    ``−T`` and ``+T`` at the lower and upper endpoints of its interval (the sensitivity is
    the same for every target).

    Attributes:
        q: the quantile.
        grid: number of steps of the candidate grid (``grid + 1`` candidates).
        target: the integer score the choice aims at (0 for the quantile itself).
    """

    q: Fraction
    grid: int
    target: int = 0

    kind: ClassVar[MeasureKind] = "histogram"

    def describe(self) -> dict[str, object]:
        """The record, with the quantile, the grid and (for interval endpoints) the target."""
        out = {**super().describe(), "q": str(self.q), "grid": self.grid}
        if self.target:
            out["target"] = self.target
        return out


COUNTS: dict[str, type[Measure]] = {
    "rows": RowCount,
    "values": ValueCount,
    "units": UnitCount,
    "distinct": DistinctValues,
}


def count_measure(
    measure_id: str,
    kind_: MeasureKind,
    column: Column | None,
    budget: Fraction,
    loss_kind: type[PrivacyLoss],
    m: int,
    r: int,
) -> Measure:
    """A count of rows, values or units: each of a unit's ``r`` rows in a partition adds 1."""
    dp = r  # each row adds 1
    mech, shift, sens = noise_parameters(loss_kind, dp, m, budget, "a count")
    cls = COUNTS.get(kind_)
    if cls is None:
        raise InternalError(f"{kind_} is not a count")
    return cls(
        id=measure_id,
        column=column,
        partition_sensitivity=dp,
        mechanism=mech,
        sensitivity=sens,
        budget=budget,
        shift=shift,
    )


def l2_bound(partition_sensitivity: int, m: int) -> Fraction:
    """A rational upper bound of ``√m·Δ_p`` (the L2 sensitivity over ``m`` partitions).

    Examples:
        >>> l2_bound(3, 4)
        Fraction(6, 1)
    """
    if m == 1:
        return Fraction(partition_sensitivity)
    scaled = math.isqrt(m * partition_sensitivity**2 * 4**20)
    if scaled * scaled < m * partition_sensitivity**2 * 4**20:
        scaled += 1
    return Fraction(scaled, 2**20)


def noise_parameters(
    loss_kind: type[PrivacyLoss], partition_sensitivity: int, m: int, budget: Fraction, what: str
) -> tuple[Mechanism, int, Fraction]:
    """Mechanism, rounding shift and mechanism sensitivity of an exact integer measure.

    The exact per-partition integer is rounded to a multiple of ``2^shift`` (half up) before
    noise when its noise scale exceeds 2^25 units, so that it is 2^24–2^25 coarse units. The
    rounding may move each of the ``m`` partitions a unit touches one more coarse unit apart,
    so the sensitivity given to the mechanism is ``floor(L₁/2^shift) + m`` in L1 norm and
    ``L₂/2^shift + √m`` in L2 norm (``L`` itself when ``shift = 0``).
    """
    if loss_kind is Rho:
        mech: Mechanism = "discrete_gaussian"
        full = l2_bound(partition_sensitivity, m)
        scale = Fraction(math.isqrt(int(full * full / (2 * budget))) + 1)
    else:
        mech = "geometric"
        full = Fraction(m * partition_sensitivity)
        scale = full / budget
    bits = scale.numerator.bit_length() - scale.denominator.bit_length()
    shift = max(0, bits - NOISE_UNITS_LOG2)
    if shift and full / 2**shift < 2**8 * m:
        # The rounding slack would cost more than 0.4% of the noise: refuse instead.
        raise InvalidParameter(
            f"{'ρ' if loss_kind is Rho else 'ε'} is too small for {what}: spend more"
        )
    if shift == 0:
        sens = full
    elif mech == "geometric":
        sens = Fraction(math.floor(full / 2**shift) + m)
    else:
        sens = full / 2**shift + l2_bound(1, m)
    if mech == "geometric":
        if sens.denominator != 1:
            raise InternalError("an integer mechanism needs an integer sensitivity")
        if sens / budget > MAX_SCALE:
            raise InvalidParameter(f"ε is too small for {what}: spend more")
    elif sens**2 / (2 * budget) > MAX_GAUSSIAN_SIGMA2:
        raise InvalidParameter(f"ρ is too small for {what}: spend more")
    return mech, shift, sens


def _row_grid(loss_kind: type[PrivacyLoss], real_l: Fraction, budget: Fraction) -> int:
    """Exponent of the per-row fixed-point grid.

    Both the sensitivity and the noise scale are at least 2^30 row units, so rounding each
    row moves a sum of ``n`` rows by at most ``n·2^-31`` of either.
    """
    if loss_kind is Rho:
        scale = Fraction(math.sqrt(float(real_l**2 / (2 * budget))))
    else:
        scale = real_l / budget
    return grid_exponent(min(real_l, scale), ROW_UNITS_LOG2)


def _coarsest(magnitude: Fraction) -> int:
    """Least grid exponent keeping one row's units below 2^40 (no int64 overflow in sums)."""
    e = magnitude.numerator.bit_length() - magnitude.denominator.bit_length() + 1
    return e - 40


def _units(x: float, exponent: int) -> int:
    return round_half_away(Fraction(x) / Fraction(2) ** exponent)


def sum_exponent(
    column: Column,
    bounds: Bounds,
    budget: Fraction,
    loss_kind: type[PrivacyLoss],
    m: int,
    r: int,
    *,
    centred: bool,
) -> int:
    """The row grid a sum of ``column`` wants on its own (see :func:`_row_grid`)."""
    lo_f, hi_f = bounds.as_floats()
    lo, hi = Fraction(lo_f), Fraction(hi_f)
    reach = (hi - lo) / 2 if centred else max(abs(lo), abs(hi))
    real_l = m * r * reach if loss_kind is not Rho else Fraction(math.sqrt(m)) * r * reach
    e = max(_row_grid(loss_kind, real_l, budget), _coarsest(max(abs(lo), abs(hi))))
    return max(e, 0) if column.kind is ColumnKind.INTEGER else e


def sum_measure(
    measure_id: str,
    column: Column,
    bounds: Bounds,
    budget: Fraction,
    loss_kind: type[PrivacyLoss],
    m: int,
    r: int,
    *,
    centred: bool,
    exponent: int | None = None,
) -> SumMeasure:
    """An exact fixed-point sum of ``column`` clamped to ``bounds`` (centred: minus a centre).

    The grid is the finer of the column's own and ``exponent`` (shared with other sums).
    """
    lo_f, hi_f = bounds.as_floats()
    e = sum_exponent(column, bounds, budget, loss_kind, m, r, centred=centred)
    if exponent is not None:
        e = min(e, exponent)  # a finer grid shared with other sums of the column
    integer = column.kind is ColumnKind.INTEGER
    a, b = _units(lo_f, e), _units(hi_f, e)
    centre = (a + b) // 2 if centred else 0
    row_low, row_high = a - centre, b - centre
    dp = r * max(abs(row_low), abs(row_high))
    mech, shift, sens = noise_parameters(loss_kind, dp, m, budget, f"the sum of {column.name!r}")
    return SumMeasure(
        id=measure_id,
        column=column,
        lower_f=lo_f,
        upper_f=hi_f,
        midpoint_f=float(bounds.midpoint),
        exponent=e,
        centre=centre,
        row_low=row_low,
        row_high=row_high,
        partition_sensitivity=dp,
        mechanism=mech,
        sensitivity=sens,
        budget=budget,
        integer_column=integer,
        shift=shift,
    )


def squares_measure(
    measure_id: str,
    column: Column,
    bounds: Bounds,
    mid_f: float,
    budget: Fraction,
    loss_kind: type[PrivacyLoss],
    m: int,
    r: int,
) -> SquaresMeasure:
    """An exact fixed-point sum of squares of ``clamp(x) − mid_f`` (for variances)."""
    lo_f, hi_f = bounds.as_floats()
    # The engine computes d = clamp(x) − mid and d·d in IEEE doubles; both are monotone, so
    # the largest per-row value is reached at a bound. Python floats are the same doubles.
    dl, dh = lo_f - mid_f, hi_f - mid_f
    top = max(dl * dl, dh * dh)
    real_l = (m * r if loss_kind is not Rho else Fraction(math.sqrt(m)) * r) * Fraction(top)
    e = max(_row_grid(loss_kind, real_l, budget), _coarsest(Fraction(top)))
    b = _units(top, e)
    dp = r * max(b, 1)
    mech, shift, sens = noise_parameters(
        loss_kind, dp, m, budget, f"the squares of {column.name!r}"
    )
    return SquaresMeasure(
        id=measure_id,
        column=column,
        lower_f=lo_f,
        upper_f=hi_f,
        midpoint_f=mid_f,
        exponent=e,
        row_high=b,
        partition_sensitivity=dp,
        mechanism=mech,
        sensitivity=sens,
        budget=budget,
        shift=shift,
    )


def histogram_measure(
    measure_id: str,
    column: Column,
    bounds: Bounds,
    q: Fraction,
    budget: Fraction,
    loss_kind: type[PrivacyLoss],
    m: int,
    r: int,
    grid: int,
    target: int = 0,
) -> HistogramMeasure:
    """A histogram over ``grid + 1`` candidates, for the exponential mechanism at ``q``.

    ``target`` is the score the choice aims at (see :class:`HistogramMeasure`); the score
    sensitivity does not depend on it.
    """
    lo_f, hi_f = bounds.as_floats()
    if column.kind is ColumnKind.INTEGER:
        grid = min(grid, int(bounds.upper - bounds.lower))
    if loss_kind is Rho:
        # Pure ε implies ε²/2-zCDP: use the largest dyadic ε with ε²/2 ≤ ρ.
        eps = Fraction(math.isqrt(int(2 * budget * 4**40)), 2**40)
        if eps <= 0:
            raise InvalidParameter("rho is too small for a quantile")
    else:
        eps = budget
    # Scores are −|(den−num)·#below − num·#above| (integers); one row moves one of the two
    # counts of every other candidate by one.
    dp = r * max(q.numerator, q.denominator - q.numerator)
    return HistogramMeasure(
        id=measure_id,
        column=column,
        lower_f=lo_f,
        upper_f=hi_f,
        partition_sensitivity=dp,
        mechanism="exponential",
        sensitivity=Fraction(m * dp),
        budget=eps,
        q=q,
        grid=grid,
        target=target,
    )
