"""Stage 3 of the SQL compiler: the DP plan — bounds, sensitivities, budget split, mechanisms.

Given a validated query and the loss the analyst asked to spend, the plan fixes everything
that is public: the contribution bounds (``max_groups`` partitions and ``max_rows`` rows per
partition per privacy unit), the clamping range and fixed-point grid of every summed column,
each noisy *measure* (an exact integer computed per partition by the engine), its
sensitivity, mechanism and share of the budget, and how group keys are released (public
domain, or DP partition selection).

Neighbouring datasets differ by adding or removing one privacy unit (all rows of one
person; one row for tables without a unit). After bounding, one unit touches at most
``m = max_groups`` partitions (``min(m, |domain|)`` for public keys, 1 without GROUP BY) and
adds at most ``r = max_rows`` rows to each, so a measure whose per-row contribution lies in
``[a, b]`` changes by at most ``Δ_p = r·max(|a|, |b|)`` in one partition and by ``m·Δ_p``
in L1 norm (``√m·Δ_p`` in L2) over all partitions. A GROUP BY therefore costs once
(parallel composition), with sensitivity scaled by ``m``.

Sums are exact: each clamped value is rounded to a fixed-point grid ``2^e`` (half away from
zero) *per row* in the engine and summed as integers, so the engine's sum is an exact
function of the data whatever the order of addition (Casacuberta et al., CCS 2022), and the
sensitivity is computed from the rounded bounds. The grid is chosen from the public
sensitivity and noise scale so that both are at least 2^30 grid units: the rounding of ``n``
values moves a sum by at most ``n·2^e/2``, i.e. ``n·2^-31`` noise scales. The exact sum is then
rounded once more, to the grid of the noise (see ``_noise``), with that slack paid for in the
sensitivity.

Budget split: the query's ε (or ρ) is divided evenly over its aggregates — and, when group
keys are private, over partition selection as one more share — unless ``split`` gives
weights; AVG spends its share half on a noisy sum and half on a noisy count, VARIANCE and
STDDEV a third each on count, sum and sum of squares. All of δ goes to partition selection.

Post-condition (:func:`check_loss`): the composition of the measures' own privacy maps must
equal the plan's stated loss; a mismatch is an :class:`~deniable.errors.InternalError` and
nothing is charged or released.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import numpy as np
import numpy.typing as npt

from deniable.accounting.composition import compose
from deniable.accounting.conversions import convert
from deniable.accounting.loss import Epsilon, EpsilonDelta, PrivacyLoss, Rho
from deniable.errors import InternalError, InvalidParameter, UnsafeQuery
from deniable.mechanisms.gaussian import gaussian_loss
from deniable.mechanisms.laplace import laplace_loss
from deniable.noise.discrete_laplace import MAX_SCALE
from deniable.noise.grid import grid_exponent
from deniable.query.catalog import Bounds, Column, ColumnKind
from deniable.query.catalog.validate import ValidatedQuery
from deniable.query.parse import AggregateFunc

ROW_UNITS_LOG2 = 30
"""Per-row fixed point: the noise scale of a sum is 2^30 to 2^31 units of the row grid."""
NOISE_UNITS_LOG2 = 24
"""Noise scales above 2^25 units are brought to 2^24–2^25 units of a coarser grid (well
inside the exact samplers' fast range); exact measures are rounded to it once, the slack
paid for."""
MAX_GAUSSIAN_SIGMA2 = Fraction(2**60)
QUANTILE_GRID = 1000
"""Default number of steps of the quantile candidate grid ``lower + j·(upper − lower)/B``."""
MAX_PUBLIC_PARTITIONS = 1_000_000
SELECTION = "(partition selection)"
"""Key of the partition-selection share in ``split``."""

MeasureKind = Literal["rows", "values", "units", "sum", "squares", "histogram"]
Mechanism = Literal["geometric", "discrete_gaussian", "exponential"]


def round_half_away(x: Fraction) -> int:
    """Round to the nearest integer, ties away from zero — as DuckDB's ``round`` on doubles.

    Examples:
        >>> round_half_away(Fraction(5, 2)), round_half_away(Fraction(-5, 2))
        (3, -3)
    """
    n = math.floor(abs(x) + Fraction(1, 2))
    return n if x >= 0 else -n


@dataclass(frozen=True, slots=True)
class Measure:
    """One exact per-partition integer computed by the engine, and how it is noised.

    Row-level meaning by kind (NULL and NaN values are ignored, as SQL aggregates do):

    * ``rows``: number of rows; ``values``: number of non-NULL, non-NaN values of ``column``;
      ``units``: number of privacy units in the partition (after bounding).
    * ``sum``: Σ ``round(clamp(x, lower_f, upper_f)·2^-exponent) − centre`` (integer units).
    * ``squares``: Σ ``round((clamp(x) − midpoint_f)²·2^-exponent)``.
    * ``histogram``: counts of ``round((clamp(x) − lower_f)·grid/(upper_f − lower_f))``,
      noised by the exponential mechanism for quantile ``q``.

    Attributes:
        id: SQL-safe name (``m0``, ``m1``, …).
        kind: see above.
        column: the aggregated column (None for ``rows`` and ``units``).
        lower_f: clamping lower bound as the engine uses it (a double).
        upper_f: clamping upper bound as the engine uses it.
        midpoint_f: centre of ``squares`` (a double).
        exponent: fixed-point grid ``2^exponent`` of ``sum``/``squares``.
        centre: integer subtracted from each ``sum`` unit (0 for plain sums).
        row_low: least per-row contribution (integer units).
        row_high: greatest per-row contribution (integer units).
        partition_sensitivity: Δ_p, the most one unit changes the measure of one partition.
        mechanism: the noise mechanism.
        sensitivity: the sensitivity given to the mechanism (L1 over partitions for
            geometric and exponential, an upper bound of L2 for the discrete Gaussian).
        budget: ε (geometric, exponential) or ρ (discrete Gaussian) given to the mechanism.
        q: quantile of a ``histogram`` measure.
        grid: number of steps of a ``histogram`` grid.
        integer_column: whether ``column`` holds integers (sums stay integers on grid 1).
        shift: the exact measure is rounded to a multiple of ``2^shift`` before noise.
    """

    id: str
    kind: MeasureKind
    column: Column | None
    lower_f: float
    upper_f: float
    midpoint_f: float
    exponent: int
    centre: int
    row_low: int
    row_high: int
    partition_sensitivity: int
    mechanism: Mechanism
    sensitivity: Fraction
    budget: Fraction
    q: Fraction | None = None
    grid: int = 0
    integer_column: bool = False
    shift: int = 0

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
    def loss(self) -> PrivacyLoss:
        """The privacy map of this measure's mechanism at its sensitivity and budget."""
        if self.mechanism == "discrete_gaussian":
            sigma2 = self.sensitivity * self.sensitivity / (2 * self.budget)
            return gaussian_loss(self.sensitivity, sigma2)
        if self.mechanism == "geometric":
            return laplace_loss(self.sensitivity, self.sensitivity / self.budget)
        return Epsilon(epsilon=self.budget)  # exponential mechanism: ε by its contract

    def describe(self) -> dict[str, object]:
        """A JSON-compatible record of this release (for the ledger)."""
        out: dict[str, object] = {
            "measure": self.id,
            "kind": self.kind,
            "column": None if self.column is None else self.column.name,
            "mechanism": self.mechanism,
            "sensitivity": str(self.sensitivity),
            ("rho" if self.mechanism == "discrete_gaussian" else "epsilon"): str(self.budget),
        }
        if self.kind in ("sum", "squares"):
            out["row_grid"] = f"2^{self.exponent}"
        if self.shift:
            out["noise_grid"] = f"2^{self.exponent + self.shift}"
        if self.kind == "histogram":
            out["q"] = str(self.q)
            out["grid"] = self.grid
        return out


@dataclass(frozen=True, slots=True)
class OutputPlan:
    """How one output column is built from measures (post-processing only)."""

    name: str
    func: AggregateFunc | None
    key: Column | None
    measures: tuple[str, ...]
    bounds: Bounds | None
    population: bool = False


@dataclass(frozen=True, slots=True)
class SelectionPlan:
    """DP partition selection for private keys (Desfontaines et al., PoPETs 2022).

    Each partition is kept with probability ``π(n)`` of its number ``n`` of privacy units,
    the optimal rule for ``(ε/m, δ/m)``; over the ``m`` partitions one unit can touch this
    is ``(ε, δ)``-DP by basic composition.
    """

    epsilon: Fraction
    delta: Fraction
    max_groups: int

    @property
    def loss(self) -> EpsilonDelta:
        """``(ε, δ)`` of the whole selection."""
        return EpsilonDelta(epsilon=self.epsilon, delta=self.delta)


@dataclass(frozen=True)
class DPPlan:
    """Everything public about how a query is answered.

    Attributes:
        query: the validated query.
        keys: group-key columns.
        public_domain: every output key tuple when all keys are public, else None.
        selection: partition selection when some key is private, else None.
        measures: the noisy measures.
        outputs: the output columns.
        max_groups: the effective per-unit partition cap ``m``.
        max_rows: the per-unit, per-partition row cap ``r``.
        requested: the loss the analyst asked to spend.
        loss: the loss of this plan (composition of every measure and the selection).
        level: confidence level of the intervals.
    """

    query: ValidatedQuery
    keys: tuple[Column, ...]
    public_domain: tuple[tuple[object, ...], ...] | None
    selection: SelectionPlan | None
    measures: tuple[Measure, ...]
    outputs: tuple[OutputPlan, ...]
    max_groups: int
    max_rows: int
    requested: PrivacyLoss
    loss: PrivacyLoss
    level: float

    def measure(self, measure_id: str) -> Measure:
        """Look a measure up by id."""
        for m in self.measures:
            if m.id == measure_id:
                return m
        raise InternalError(f"unknown measure {measure_id}")

    @property
    def has_unit(self) -> bool:
        """Whether the table has a privacy unit (user-level privacy)."""
        return self.query.table.policy.privacy_unit is not None

    def describe(self) -> dict[str, object]:
        """A JSON-compatible record of the plan (stored with the ledger charge)."""
        return {
            "table": self.query.table.name,
            "privacy_unit": self.query.table.policy.privacy_unit,
            "max_groups": self.max_groups,
            "max_rows": self.max_rows,
            "keys": [k.name for k in self.keys],
            "public_keys": self.public_domain is not None,
            "selection": None
            if self.selection is None
            else {
                "rule": "Desfontaines et al. 2022 optimal partition selection",
                "epsilon": str(self.selection.epsilon),
                "delta": str(self.selection.delta),
                "per_partition": f"(ε/{self.selection.max_groups}, δ/{self.selection.max_groups})",
            },
            "measures": [m.describe() for m in self.measures],
            "bounds": {
                o.name: [str(o.bounds.lower), str(o.bounds.upper)]
                for o in self.outputs
                if o.bounds is not None
            },
        }


def requested_loss(
    budget_kind: type[PrivacyLoss],
    *,
    epsilon: object,
    delta: object,
    rho: object,
) -> PrivacyLoss:
    """Build the loss a query asks to spend, in the kind of the session's budget.

    ε budgets take ``epsilon``; (ε, δ) budgets take ``epsilon`` and optionally ``delta``;
    ρ-zCDP budgets take ``rho``. There is no default: the analyst always says what to spend.

    Raises:
        InvalidParameter: a missing parameter or one the budget's kind cannot use.
    """
    if budget_kind is Rho:
        if epsilon is not None or delta is not None:
            raise InvalidParameter("this session's budget is ρ-zCDP: pass rho=..., not epsilon")
        if rho is None:
            raise InvalidParameter("pass rho=... (the zCDP budget this query may spend)")
        return Rho(rho=_number(rho, "rho"))
    if rho is not None:
        raise InvalidParameter("this session's budget is not ρ-zCDP: pass epsilon=..., not rho")
    if epsilon is None:
        raise InvalidParameter("pass epsilon=... (the privacy loss this query may spend)")
    eps = _number(epsilon, "epsilon")
    if budget_kind is Epsilon:
        if delta not in (None, 0):
            raise InvalidParameter(
                "this session's budget is pure ε: delta cannot be spent (private group keys "
                "need an EpsilonDelta budget; declare public_keys instead)"
            )
        return Epsilon(epsilon=eps)
    return EpsilonDelta(epsilon=eps, delta=0 if delta is None else _number(delta, "delta"))


def _number(value: object, name: str) -> Fraction | int | float:
    if isinstance(value, bool) or not isinstance(value, int | float | Fraction):
        raise InvalidParameter(f"{name} must be a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidParameter(f"{name} must be finite")
    if value <= 0 and name != "delta":
        raise InvalidParameter(f"{name} must be > 0")
    return value


def make_plan(
    query: ValidatedQuery,
    requested: PrivacyLoss,
    *,
    split: Mapping[str, float | int | Fraction] | None = None,
    level: float = 0.95,
    quantile_grid: int = QUANTILE_GRID,
) -> DPPlan:
    """Plan the DP answer of ``query`` spending ``requested``; pure, reads no data.

    The returned plan's ``loss`` is what the ledger will be charged: the composition of the
    measures' privacy maps and of the partition selection, never more than ``requested``.

    Raises:
        UnsafeQuery: private keys without a δ to select them, or too many public partitions.
        InvalidParameter: malformed ``split``/``level``, or a budget so small that the noise
            would exceed what the exact samplers support.
        InternalError: the post-condition on the loss failed (a bug; nothing is released).
    """
    if not isinstance(level, float | int) or isinstance(level, bool) or not 0 < level < 1:
        raise InvalidParameter("level must be strictly between 0 and 1, e.g. 0.95")
    if isinstance(quantile_grid, bool) or not isinstance(quantile_grid, int):
        raise InvalidParameter("quantile_grid must be an integer")
    if not 2 <= quantile_grid <= 100_000:
        raise InvalidParameter("quantile_grid must be between 2 and 100000")
    policy = query.table.policy
    keys = query.keys
    public = all(k.name in policy.public_keys for k in keys)
    domain: tuple[tuple[object, ...], ...] | None = None
    if keys and public:
        sizes = [len(policy.public_keys[k.name]) for k in keys]
        if math.prod(sizes) > MAX_PUBLIC_PARTITIONS:
            raise UnsafeQuery(
                f"the public key domain has {math.prod(sizes)} combinations (more than "
                f"{MAX_PUBLIC_PARTITIONS}); group by fewer columns"
            )
        domain = tuple(itertools.product(*(policy.public_keys[k.name] for k in keys)))
    if not keys:
        domain = ((),)
    m = 1 if not keys else query.max_groups
    if domain is not None and keys:
        m = min(m, len(domain))
    r = query.max_rows
    private = domain is None

    kind = type(requested)
    delta = requested.delta if isinstance(requested, EpsilonDelta) else Fraction(0)
    if private:
        if kind is not EpsilonDelta or delta == 0:
            raise UnsafeQuery(
                "grouping by columns without declared public keys needs DP partition "
                "selection, which costs a δ > 0: pass delta=... with an EpsilonDelta budget, "
                "or ask the curator to declare public_keys for "
                + ", ".join(repr(k.name) for k in keys if k.name not in policy.public_keys)
            )
    elif delta > 0:
        raise InvalidParameter(
            "delta is spent only on selecting private group keys and this query has none: "
            "leave delta out"
        )

    total = requested.rho if isinstance(requested, Rho) else requested.epsilon
    shares = _shares(query, split, private)
    measures: list[Measure] = []
    outputs: list[OutputPlan] = []
    counter = itertools.count()

    def add(m_: Measure) -> str:
        measures.append(m_)
        return m_.id

    # All sums of one column share one row grid (the finest any of them wants), so that the
    # engine computes one exact sum per column; centred sums are derived from it exactly.
    grids: dict[str, int] = {}
    for out in query.outputs:
        agg = out.aggregate
        if agg is None or agg.func not in ("sum", "avg", "variance", "stddev"):
            continue
        assert agg.column is not None and agg.bounds is not None
        part = {"sum": 1, "avg": 2}.get(agg.func, 3)
        e = _sum_exponent(
            agg.column,
            agg.bounds,
            total * shares[out.name] / part,
            kind,
            m,
            r,
            centred=agg.func != "sum",
        )
        grids[agg.column.name] = min(e, grids.get(agg.column.name, e))

    def grid(column: Column | None) -> int | None:
        return None if column is None else grids.get(column.name)

    for out in query.outputs:
        if out.key is not None:
            outputs.append(OutputPlan(out.name, None, out.key, (), None))
            continue
        agg = out.aggregate
        assert agg is not None
        budget = total * shares[out.name]
        ids: list[str] = []
        if agg.func == "count":
            ids.append(
                add(
                    _count(
                        f"m{next(counter)}",
                        "rows" if agg.column is None else "values",
                        agg.column,
                        budget,
                        kind,
                        m,
                        r,
                    )
                )
            )
        elif agg.func == "count_distinct":
            ids.append(add(_count(f"m{next(counter)}", "units", None, budget, kind, m, 1)))
        elif agg.func == "sum":
            assert agg.column is not None and agg.bounds is not None
            ids.append(
                add(
                    _sum(
                        f"m{next(counter)}",
                        agg.column,
                        agg.bounds,
                        budget,
                        kind,
                        m,
                        r,
                        centred=False,
                        exponent=grid(agg.column),
                    )
                )
            )
        elif agg.func == "avg":
            assert agg.column is not None and agg.bounds is not None
            ids.append(
                add(_count(f"m{next(counter)}", "values", agg.column, budget / 2, kind, m, r))
            )
            ids.append(
                add(
                    _sum(
                        f"m{next(counter)}",
                        agg.column,
                        agg.bounds,
                        budget / 2,
                        kind,
                        m,
                        r,
                        centred=True,
                        exponent=grid(agg.column),
                    )
                )
            )
        elif agg.func in ("variance", "stddev"):
            assert agg.column is not None and agg.bounds is not None
            third = budget / 3
            ids.append(add(_count(f"m{next(counter)}", "values", agg.column, third, kind, m, r)))
            centred = _sum(
                f"m{next(counter)}",
                agg.column,
                agg.bounds,
                third,
                kind,
                m,
                r,
                centred=True,
                exponent=grid(agg.column),
            )
            ids.append(add(centred))
            # Squares are taken about the sum's centre, so that both use one origin.
            centre = float(centred.centre * centred.row_granularity)
            ids.append(
                add(
                    _squares(f"m{next(counter)}", agg.column, agg.bounds, centre, third, kind, m, r)
                )
            )
        else:  # median, quantile
            assert agg.column is not None and agg.bounds is not None and agg.q is not None
            ids.append(
                add(
                    _quantile(
                        f"m{next(counter)}",
                        agg.column,
                        agg.bounds,
                        agg.q,
                        budget,
                        kind,
                        m,
                        r,
                        quantile_grid,
                    )
                )
            )
        outputs.append(OutputPlan(out.name, agg.func, None, tuple(ids), agg.bounds, agg.population))

    selection = None
    if private:
        assert isinstance(requested, EpsilonDelta)
        selection = SelectionPlan(
            epsilon=requested.epsilon * shares[SELECTION], delta=delta, max_groups=m
        )
    plan_loss = _compose(measures, selection, kind)
    plan = DPPlan(
        query=query,
        keys=keys,
        public_domain=domain,
        selection=selection,
        measures=tuple(measures),
        outputs=tuple(outputs),
        max_groups=m,
        max_rows=r,
        requested=requested,
        loss=plan_loss,
        level=float(level),
    )
    check_loss(plan)
    return plan


def _compose(
    measures: list[Measure], selection: SelectionPlan | None, kind: type[PrivacyLoss]
) -> PrivacyLoss:
    losses: list[PrivacyLoss] = [m.loss for m in measures]
    if selection is not None:
        losses.append(selection.loss)
    return convert(compose(losses), kind)


def check_loss(plan: DPPlan) -> None:
    """Post-condition: the plan's loss is what its parts cost, and within the request.

    Raises:
        InternalError: a mismatch (a bug in deniable; nothing may be charged or released).
    """
    recomputed = _compose(list(plan.measures), plan.selection, type(plan.requested))
    if recomputed != plan.loss or type(plan.loss) is not type(plan.requested):
        raise InternalError("the noise plan's loss differs from the loss to be charged")
    if not _within(plan.loss, plan.requested):
        raise InternalError("the noise plan would spend more than the query asked for")
    if isinstance(plan.requested, Epsilon | EpsilonDelta) and plan.loss != plan.requested:
        # Pure and approximate budgets are split exactly: nothing may be lost or added.
        raise InternalError("the noise plan's loss differs from the requested loss")


def _within(a: PrivacyLoss, b: PrivacyLoss) -> bool:
    if isinstance(a, Epsilon) and isinstance(b, Epsilon):
        return a <= b
    if isinstance(a, EpsilonDelta) and isinstance(b, EpsilonDelta):
        return a <= b
    if isinstance(a, Rho) and isinstance(b, Rho):
        return a <= b
    return False


def _shares(
    query: ValidatedQuery, split: Mapping[str, float | int | Fraction] | None, private: bool
) -> dict[str, Fraction]:
    names = [name for name, _ in query.aggregates]
    parts = names + ([SELECTION] if private else [])
    weights: dict[str, Fraction] = {p: Fraction(1) for p in parts}
    if split is not None:
        if not isinstance(split, Mapping):
            raise InvalidParameter("split must map output names to positive weights")
        lower = {p.lower(): p for p in parts}
        for key, w in split.items():
            target = lower.get(str(key).lower())
            if target is None:
                raise InvalidParameter(
                    f"split names {key!r}, which is not an aggregate of this query"
                    + (f" nor {SELECTION!r}" if private else "")
                )
            if isinstance(w, bool) or not isinstance(w, int | float | Fraction):
                raise InvalidParameter("split weights must be numbers")
            if isinstance(w, float) and not math.isfinite(w):
                raise InvalidParameter("split weights must be finite")
            if w <= 0:
                raise InvalidParameter("split weights must be > 0")
            weights[target] = Fraction(w)
    total = sum(weights.values())
    return {p: w / total for p, w in weights.items()}


def _count(
    measure_id: str,
    kind_: MeasureKind,
    column: Column | None,
    budget: Fraction,
    loss_kind: type[PrivacyLoss],
    m: int,
    r: int,
) -> Measure:
    dp = r  # each row adds 1
    mech, shift, sens = _noise(loss_kind, dp, m, budget, "a count")
    return Measure(
        id=measure_id,
        kind=kind_,
        column=column,
        lower_f=0.0,
        upper_f=0.0,
        midpoint_f=0.0,
        exponent=0,
        centre=0,
        row_low=0,
        row_high=1,
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


def _noise(
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


def _sum_exponent(
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


def _sum(
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
) -> Measure:
    lo_f, hi_f = bounds.as_floats()
    e = _sum_exponent(column, bounds, budget, loss_kind, m, r, centred=centred)
    if exponent is not None:
        e = min(e, exponent)  # a finer grid shared with other sums of the column
    integer = column.kind is ColumnKind.INTEGER
    a, b = _units(lo_f, e), _units(hi_f, e)
    centre = (a + b) // 2 if centred else 0
    row_low, row_high = a - centre, b - centre
    dp = r * max(abs(row_low), abs(row_high))
    mech, shift, sens = _noise(loss_kind, dp, m, budget, f"the sum of {column.name!r}")
    return Measure(
        id=measure_id,
        kind="sum",
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


def _squares(
    measure_id: str,
    column: Column,
    bounds: Bounds,
    mid_f: float,
    budget: Fraction,
    loss_kind: type[PrivacyLoss],
    m: int,
    r: int,
) -> Measure:
    lo_f, hi_f = bounds.as_floats()
    # The engine computes d = clamp(x) − mid and d·d in IEEE doubles; both are monotone, so
    # the largest per-row value is reached at a bound. Python floats are the same doubles.
    dl, dh = lo_f - mid_f, hi_f - mid_f
    top = max(dl * dl, dh * dh)
    real_l = (m * r if loss_kind is not Rho else Fraction(math.sqrt(m)) * r) * Fraction(top)
    e = max(_row_grid(loss_kind, real_l, budget), _coarsest(Fraction(top)))
    b = _units(top, e)
    dp = r * max(b, 1)
    mech, shift, sens = _noise(loss_kind, dp, m, budget, f"the squares of {column.name!r}")
    return Measure(
        id=measure_id,
        kind="squares",
        column=column,
        lower_f=lo_f,
        upper_f=hi_f,
        midpoint_f=mid_f,
        exponent=e,
        centre=0,
        row_low=0,
        row_high=b,
        partition_sensitivity=dp,
        mechanism=mech,
        sensitivity=sens,
        budget=budget,
        shift=shift,
    )


def _quantile(
    measure_id: str,
    column: Column,
    bounds: Bounds,
    q: Fraction,
    budget: Fraction,
    loss_kind: type[PrivacyLoss],
    m: int,
    r: int,
    grid: int,
) -> Measure:
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
    return Measure(
        id=measure_id,
        kind="histogram",
        column=column,
        lower_f=lo_f,
        upper_f=hi_f,
        midpoint_f=float(bounds.midpoint),
        exponent=0,
        centre=0,
        row_low=0,
        row_high=1,
        partition_sensitivity=dp,
        mechanism="exponential",
        sensitivity=Fraction(m * dp),
        budget=eps,
        q=q,
        grid=grid,
    )
