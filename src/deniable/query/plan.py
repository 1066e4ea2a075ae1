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

Budget split: the query's ε (or ρ) is divided evenly over its distinct aggregates — and, when group
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

from deniable.accounting.loss import Epsilon, EpsilonDelta, PrivacyLoss, Rho, parameter
from deniable.errors import InternalError, InvalidParameter, Remedy, UnsafeQuery, remedied
from deniable.mechanisms.events import PartitionSelectionEvent, PrivacyEvent, compose_events
from deniable.query import partition
from deniable.query.aggregates import Aggregate, Count, PlanContext
from deniable.query.catalog import Bounds, Column
from deniable.query.catalog.validate import ValidatedQuery
from deniable.query.measures import (
    MAX_GAUSSIAN_SIGMA2,
    NOISE_UNITS_LOG2,
    ROW_UNITS_LOG2,
    Measure,
    l2_bound,
    round_half_away,
    sum_exponent,
)

__all__ = [
    "MAX_GAUSSIAN_SIGMA2",
    "MAX_PUBLIC_PARTITIONS",
    "NOISE_UNITS_LOG2",
    "QUANTILE_GRID",
    "ROW_UNITS_LOG2",
    "SELECTION",
    "AggregatePlan",
    "DPPlan",
    "Measure",
    "SelectionPlan",
    "check_loss",
    "l2_bound",
    "make_plan",
    "requested_loss",
    "round_half_away",
]

QUANTILE_GRID = 1000
"""Default number of steps of the quantile candidate grid ``lower + j·(upper − lower)/B``."""
MAX_PUBLIC_PARTITIONS = 1_000_000
SELECTION = "(partition selection)"
"""Key of the partition-selection share in ``split``."""


@dataclass(frozen=True, slots=True)
class AggregatePlan:
    """One aggregate of the plan and the measures it spends its share on.

    Attributes:
        name: the aggregate's name (its output's, or a default such as ``sum_age``).
        aggregate: the aggregate object (it post-processes its measures).
        measures: ids of its measures.
        budget: its share of ε (or ρ).
    """

    name: str
    aggregate: Aggregate
    measures: tuple[str, ...]
    budget: Fraction

    @property
    def bounds(self) -> Bounds | None:
        """The clamping range the aggregate uses."""
        return self.aggregate.bounds


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
    def event(self) -> PartitionSelectionEvent:
        """The privacy event of the selection."""
        return PartitionSelectionEvent(self.epsilon, self.delta, self.max_groups)

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
        key_domains: each key's public domain (None: private keys).
        public_domain: every output key tuple when all keys are public, else None.
        selection: partition selection when some key is private, else None.
        measures: the noisy measures.
        aggregates: the aggregates, each with its measures (``__agg<i>`` is
            ``aggregates[i]``).
        max_groups: the effective per-unit partition cap ``m``.
        max_rows: the per-unit, per-partition row cap ``r``.
        requested: the loss the analyst asked to spend.
        loss: the loss of this plan (composition of every measure and the selection).
        level: confidence level of the intervals.
    """

    query: ValidatedQuery
    keys: tuple[Column, ...]
    key_domains: tuple[tuple[object, ...] | None, ...]
    public_domain: tuple[tuple[object, ...], ...] | None
    selection: SelectionPlan | None
    measures: tuple[Measure, ...]
    aggregates: tuple[AggregatePlan, ...]
    max_groups: int
    max_rows: int
    requested: PrivacyLoss
    loss: PrivacyLoss
    level: float

    def count_outputs(self) -> list[str]:
        """The outputs that are counts (``COUNT``, ``COUNT(DISTINCT …)``): never negative."""
        return [a.name for a in self.aggregates if isinstance(a.aggregate, Count)]

    @property
    def events(self) -> tuple[PrivacyEvent, ...]:
        """The typed privacy events of the release; they compose to :attr:`loss`."""
        return tuple(_events(list(self.measures), self.selection))

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
            "aggregates": {a.name: type(a.aggregate).__name__ for a in self.aggregates},
            "measures": [m.describe() for m in self.measures],
            "bounds": {
                a.name: [str(a.bounds.lower), str(a.bounds.upper)]
                for a in self.aggregates
                if a.bounds is not None
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
            problem = "this dataset's budget is ρ-zCDP: a query spends ρ, not ε or δ"
            raise remedied(
                InvalidParameter(f"{problem}: pass rho=..., not epsilon"), problem, Remedy("rho")
            )
        if rho is None:
            problem = "no ρ given (the zCDP budget this query may spend)"
            raise remedied(
                InvalidParameter("pass rho=... (the zCDP budget this query may spend)"),
                problem,
                Remedy("rho"),
            )
        return Rho(rho=_number(rho, "rho"))
    if rho is not None:
        problem = "this dataset's budget is not ρ-zCDP: a query spends ε (and δ), not ρ"
        raise remedied(
            InvalidParameter(f"{problem}: pass epsilon=..., not rho"), problem, Remedy("epsilon")
        )
    if epsilon is None:
        problem = "no ε given (the privacy loss this query may spend)"
        raise remedied(
            InvalidParameter("pass epsilon=... (the privacy loss this query may spend)"),
            problem,
            Remedy("epsilon"),
        )
    eps = _number(epsilon, "epsilon")
    if budget_kind is Epsilon:
        if delta is not None and _number(delta, "delta") != 0:
            problem = (
                "this dataset's budget is pure ε: δ cannot be spent (private group keys need "
                "an (ε, δ) budget; the curator can declare public keys instead)"
            )
            raise remedied(
                InvalidParameter(
                    "this session's budget is pure ε: delta cannot be spent (private group "
                    "keys need an EpsilonDelta budget; declare public_keys instead)"
                ),
                problem,
                Remedy("no_delta"),
            )
        return Epsilon(epsilon=eps)
    return EpsilonDelta(epsilon=eps, delta=0 if delta is None else _number(delta, "delta"))


def _number(value: object, name: str) -> Fraction:
    return parameter(value, name)


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
    measures' privacy maps and of the partition selection, never more than ``requested``
    (and zero for a query of public keys alone, which releases nothing private).

    Raises:
        UnsafeQuery: private keys without a δ to select them, or too many public partitions.
        InvalidParameter: malformed ``split``/``level``, or a budget so small that the noise
            (or the partition selection) would exceed what the exact samplers support.
        InternalError: the post-condition on the loss failed (a bug; nothing is released).
    """
    if not isinstance(level, float | int) or isinstance(level, bool) or not 0 < level < 1:
        raise InvalidParameter("level must be strictly between 0 and 1, e.g. 0.95")
    if isinstance(quantile_grid, bool) or not isinstance(quantile_grid, int):
        raise InvalidParameter("quantile_grid must be an integer")
    if not 2 <= quantile_grid <= 100_000:
        raise InvalidParameter("quantile_grid must be between 2 and 100000")
    keys = query.keys
    key_domains = query.key_domains or tuple(None for _ in keys)
    public = all(d is not None for d in key_domains)
    domain: tuple[tuple[object, ...], ...] | None = None
    if keys and public:
        sizes = [len(d or ()) for d in key_domains]
        if math.prod(sizes) > MAX_PUBLIC_PARTITIONS:
            raise UnsafeQuery(
                f"the public key domain has {math.prod(sizes)} combinations (more than "
                f"{MAX_PUBLIC_PARTITIONS}); group by fewer columns"
            )
        domain = tuple(itertools.product(*(d or () for d in key_domains)))
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
            unkeyed = [_key_label(k) for k, d in zip(keys, key_domains, strict=True) if d is None]
            problem = (
                "grouping by columns without declared public keys needs DP partition "
                "selection, which costs a δ > 0"
            )
            raise remedied(
                UnsafeQuery(
                    f"{problem}: pass delta=... with an EpsilonDelta budget, or ask the "
                    "curator to declare public_keys for " + ", ".join(map(repr, unkeyed))
                ),
                problem,
                Remedy("delta"),
                *(Remedy("public_keys", k) for k in unkeyed),
            )
    elif delta > 0:
        problem = "δ is spent only on selecting private group keys and this query has none"
        raise remedied(InvalidParameter(f"{problem}: leave delta out"), problem, Remedy("no_delta"))

    total = requested.rho if isinstance(requested, Rho) else requested.epsilon
    shares = _shares(query, split, private)

    # All sums of one column share one row grid (the finest any of them wants), so that the
    # engine computes one exact sum per column; centred sums are derived from it exactly.
    grids: dict[str, int] = {}
    for name, agg in query.aggregates:
        for centred, part in agg.sum_shares():
            assert agg.column is not None and agg.bounds is not None
            e = sum_exponent(
                agg.column, agg.bounds, total * shares[name] * part, kind, m, r, centred=centred
            )
            grids[agg.column.name] = min(e, grids.get(agg.column.name, e))
    counter = itertools.count()
    ctx = PlanContext(
        loss_kind=kind,
        max_groups=m,
        max_rows=r,
        quantile_grid=quantile_grid,
        grids=grids,
        new_id=lambda: f"m{next(counter)}",
        level=float(level),
    )
    measures: list[Measure] = []
    planned: list[AggregatePlan] = []
    for name, agg in query.aggregates:
        budget = total * shares[name]
        ms = agg.plan(budget, ctx)
        measures.extend(ms)
        planned.append(AggregatePlan(name, agg, tuple(x.id for x in ms), budget))

    selection = None
    if private:
        assert isinstance(requested, EpsilonDelta)
        selection = SelectionPlan(
            epsilon=requested.epsilon * shares[SELECTION], delta=delta, max_groups=m
        )
        # Refused here, before anything is charged, if the rule cannot be computed exactly.
        partition.check_selection(selection.epsilon, selection.delta, m)
    plan_loss = _compose(measures, selection, kind)
    plan = DPPlan(
        query=query,
        keys=keys,
        key_domains=key_domains,
        public_domain=domain,
        selection=selection,
        measures=tuple(measures),
        aggregates=tuple(planned),
        max_groups=m,
        max_rows=r,
        requested=requested,
        loss=plan_loss,
        level=float(level),
    )
    check_loss(plan)
    return plan


def _key_label(key: Column) -> str:
    if key.expr is None:
        return key.name
    return key.name.removeprefix("key:")


def _compose(
    measures: list[Measure], selection: SelectionPlan | None, kind: type[PrivacyLoss]
) -> PrivacyLoss:
    return compose_events(_events(measures, selection), kind)


def _events(measures: list[Measure], selection: SelectionPlan | None) -> list[PrivacyEvent]:
    events: list[PrivacyEvent] = [m.event for m in measures]
    if selection is not None:
        events.append(selection.event)
    return events


def releases_nothing_private(plan: DPPlan) -> bool:
    """Whether the plan releases only public values (public keys, no aggregate): free."""
    return not plan.measures and plan.selection is None


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
    if releases_nothing_private(plan):
        return
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
            weights[target] = parameter(w, "split weight")
    total = sum(weights.values())
    if not total:
        return {}
    return {p: w / total for p, w in weights.items()}
