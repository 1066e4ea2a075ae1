"""A synthetic release's domain measured with DP: quantile bins and selected keys.

Columns asked for with ``bins={"c": Quantiles(...)}`` or ``bins={"c": SelectKeys(...)}``
(:mod:`deniable.synth.discretize`) have no public cells; this module measures them as parts of
the same release, under its one charge. The order (:func:`deniable.synth.release.synthesize`):

1. before the charge, from public parameters only: the placeholders' most cells (every size
   check uses them), the split of the budget (:func:`plan_domain`), the partition selection's
   parameters checked (:func:`deniable.query.partition.check_selection`), and the marginals'
   statement type-checked by the engine with dummy edges and keys of the final types;
2. before the charge, in the engine (:func:`exact_domain`): for each ``Quantiles`` column the
   exact histogram of its values on a public grid, and for each ``SelectKeys`` column the
   number of distinct persons of each key; both after bounding each person to ``max_rows``
   rows (the keyed random order of :mod:`deniable.synth.measure`). Kept internal: nothing
   observable depends on them until the charge (the grid's arrays have its public size; the
   keys stay Arrow values, read without conversion). The one size the data sets is the
   number of distinct keys returned, which one person changes by at most ``max_rows``: the
   residual memory channel of any private ``GROUP BY`` (docs/before-the-charge.md);
3. the one charge for the whole release;
4. after it (:func:`release_domain`, a total function): the noisy histograms and the
   selections, the bins and keys they give (post-processing), then the marginals measured in
   the engine over them. That statement was type-checked before the charge; an engine
   failure now (its memory or time limit) keeps the charge, and the ledger records it.

Measurements, with ``r = max_rows`` (1 on a table protecting rows):

* **quantile histogram**: the grid's ``G`` counts (NULL and NaN excluded) plus discrete
  Gaussian noise of ``σ² = r²/(2ρ_c)``: one person's ``r`` kept rows move them by at most
  ``r`` in L2, so ρ_c-zCDP. The edges are the grid points where the noisy cumulative counts
  first reach ``j/n`` of their total, ``j = 1 … n − 1``; equal edges merge
  (post-processing, :func:`quantile_edges`);
* **partition selection**: the optimal rule of Desfontaines et al. (PoPETs 2022,
  :func:`deniable.query.partition.select`, the query system's) on each key's number of
  distinct persons with ``max_groups = r`` (one person's ``r`` kept rows touch at most ``r``
  keys): ``(ε_c, δ_c)``-DP, hence δ_c-approximately ``ε_c²/2``-zCDP (the mixture
  decomposition of :mod:`deniable.accounting.renyi`). More keys than ``max_keys`` selected:
  a uniformly random ``max_keys`` of them are kept (post-processing). Values of keys not
  kept fall into the last cell ("NULL or other").

The public split (:data:`DOMAIN_SHARE`): the domain measurements get ``ρ/10`` of the
release's ρ, equally per measured column (ρ_c each; a selection's ε_c is the largest 53-bit
rational with ``ε_c²/2 ≤ ρ_c``); MST or AIM get the rest. The selections' δ is the
release's ``δ_sel`` (:func:`deniable.synth.release.plan_selection_loss`), equally per
selected column. Whole release: δ_sel-approximately ρ-zCDP (adaptive composition,
Whitehouse et al. 2023, Theorem 1), hence ``(ε(ρ, δ − δ_sel), δ)``-DP.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from deniable.accounting.bounds import round_down, sqrt_interval
from deniable.accounting.loss import Rho
from deniable.engines.base import SAMPLE_ALIAS, Capabilities, Engine, TableBinding
from deniable.errors import InternalError, InvalidParameter
from deniable.mechanisms import discrete_gaussian
from deniable.noise.source import RandomSource
from deniable.noise.uniform import uniform_below
from deniable.query import partition
from deniable.query.catalog import Column, ColumnKind
from deniable.query.rewrite.compile import canonical_unit_expression, keyed_hash, render
from deniable.sqlnames import identifier
from deniable.synth.discretize import (
    LOG_OCTAVES,
    Binning,
    Discretization,
    Quantiles,
    SelectKeys,
)
from deniable.synth.measure import Event, exact_marginals

I64 = npt.NDArray[np.int64]

DOMAIN_SHARE = Fraction(1, 10)
"""Share of the release's ρ spent on measuring the domain (when a column asks for it)."""

SELECTION_DELTA_SHARE = Fraction(1, 2)
"""Share of the release's δ spent by partition selection (the rest converts ρ to (ε, δ))."""


def grid_binning(b: Binning) -> Binning:
    """The public grid of a ``Quantiles`` placeholder: ``grid`` cells over its range.

    ``scale="linear"``: equal cells; ``"log"``: inner edges
    ``lo + (hi − lo)·(2^(L·i/G) − 1)/(2^L − 1)`` with ``L = LOG_OCTAVES`` (rounded to
    doubles). Integer columns: edges rounded up to integers, repeated ones dropped. Public.
    """
    spec = b.learn
    if not isinstance(spec, Quantiles) or b.lower is None or b.upper is None:
        raise InternalError("a grid is made for a Quantiles placeholder only")
    lo, hi, g = b.lower, b.upper, spec.grid
    if spec.scale == "linear":
        raw = [lo + (hi - lo) * i / g for i in range(1, g)]
    else:
        top = 2.0**LOG_OCTAVES - 1
        span = float(hi - lo)
        raw = [lo + Fraction(span * (2.0 ** (LOG_OCTAVES * i / g) - 1) / top) for i in range(1, g)]
    if b.column.kind is ColumnKind.INTEGER:
        edges = sorted({Fraction(math.ceil(e)) for e in raw if lo < math.ceil(e) <= hi})
    else:
        edges = sorted({e for e in raw if lo < e < hi})
    return Binning(b.column, len(edges) + 2, lo, hi, edges=tuple(edges))


def quantile_edges(noisy: npt.ArrayLike, grid: Binning, n: int) -> tuple[Fraction, ...]:
    """Bin edges at the noisy ``j/n`` quantiles, ``j = 1 … n − 1`` (post-processing; total).

    ``noisy`` holds the grid's bins' noisy counts (not the NULL cell). The noisy cumulative
    counts are used as they are (unbiased: clipping each count at 0 would add about 0.4σ per
    empty bin and pull the low quantiles down), made non-decreasing by a running maximum; an
    edge is the upper end of the first grid bin where they reach ``j/n`` of the noisy total
    (the range's upper end is no inner edge); equal edges merge. With a total ≤ 0 (nothing
    to read), the edges are the grid's at equal steps.
    """
    counts = np.asarray(noisy, dtype=np.float64)
    bins = len(grid.edges) + 1
    total = float(counts.sum()) if counts.size == bins else 0.0
    if total > 0:
        cum = np.maximum.accumulate(np.cumsum(counts))
        picks = [int(np.searchsorted(cum, total * j / n, side="left")) for j in range(1, n)]
    else:
        picks = [(bins * j) // n - 1 for j in range(1, n)]
    # Grid bin i ends where grid edge i starts the next one; the last bin ends the range.
    return tuple(sorted({grid.edges[i] for i in picks if 0 <= i < len(grid.edges)}))


@dataclass(frozen=True)
class DomainPlan:
    """The public plan of a release's domain measurements (fixed before the charge).

    Attributes:
        quantiles: the ``Quantiles`` columns, in column order.
        selections: the ``SelectKeys`` columns, in column order.
        rho_each: ρ of each quantile histogram.
        epsilon_select: ε of each partition selection (``ε²/2 ≤ rho_each``).
        delta_select: δ of each partition selection.
        max_rows: ``r``, the most rows of one person measured.
    """

    quantiles: tuple[str, ...]
    selections: tuple[str, ...]
    rho_each: Fraction
    epsilon_select: Fraction
    delta_select: Fraction
    max_rows: int

    @property
    def rho(self) -> Fraction:
        """The zCDP ρ of every domain measurement together (selections: ``ε²/2`` each)."""
        return self.rho_each * len(self.quantiles) + (
            self.epsilon_select**2 / 2 * len(self.selections)
        )

    @property
    def delta(self) -> Fraction:
        """The δ of the selections together (basic composition of δ)."""
        return self.delta_select * len(self.selections)

    @property
    def sigma(self) -> float:
        """The noise σ (in counts) of each quantile histogram."""
        return self.max_rows / math.sqrt(2 * float(self.rho_each)) if self.rho_each else 0.0

    def describe(self) -> dict[str, object]:
        """The plan as JSON-ready public metadata (for the ledger)."""
        return {
            "share_of_rho": str(DOMAIN_SHARE),
            "quantile_columns": list(self.quantiles),
            "quantile_rho_each": str(self.rho_each),
            "quantile_sigma": self.sigma,
            "selection_columns": list(self.selections),
            "selection_epsilon_each": str(self.epsilon_select),
            "selection_delta_each": str(self.delta_select),
            "selection_max_groups": self.max_rows,
            "rho": str(self.rho),
            "delta": str(self.delta),
        }


def _epsilon_of(rho: Fraction) -> Fraction:
    """The largest 53-bit ε with ``ε²/2 ≤ ρ`` (rounded down)."""
    low, _ = sqrt_interval(2 * rho)
    eps = round_down(low)
    if eps <= 0 or eps * eps / 2 > rho:
        raise InvalidParameter("the budget is too small for partition selection")
    return eps


def plan_domain(
    discretization: Discretization, rho: Fraction, delta_select: Fraction, max_rows: int
) -> DomainPlan:
    """Split the release's ``rho`` (and the selections' δ) for its domain measurements.

    Public arithmetic; the selection's parameters are checked as the selection will check
    them (:func:`deniable.query.partition.check_selection`).

    Raises:
        InvalidParameter: a selection without δ, or parameters partition selection refuses.
    """
    pending = discretization.pending
    quantiles = tuple(b.column.name for b in pending if isinstance(b.learn, Quantiles))
    selections = tuple(b.column.name for b in pending if isinstance(b.learn, SelectKeys))
    if not pending:
        return DomainPlan((), (), Fraction(0), Fraction(0), Fraction(0), max_rows)
    each = DOMAIN_SHARE * rho / len(pending)
    eps = Fraction(0)
    dlt = Fraction(0)
    if selections:
        if delta_select <= 0:
            raise InvalidParameter("partition selection needs δ > 0")
        eps = _epsilon_of(each)
        dlt = delta_select / len(selections)
        partition.check_selection(eps, dlt, max_rows)
    return DomainPlan(quantiles, selections, each, eps, dlt, max_rows)


@dataclass(frozen=True)
class ExactDomain:
    """Internal, never released as it is: what the domain measurements are computed from.

    Attributes:
        histograms: each ``Quantiles`` column's exact counts on its grid's bins (the NULL
            cell left out).
        grids: each ``Quantiles`` column's grid binning.
        keys: each ``SelectKeys`` column's distinct non-NULL values, as the engine returned
            them (Arrow; converted only once released).
        units: each ``SelectKeys`` column's number of distinct persons of each key.
    """

    histograms: dict[str, I64]
    grids: dict[str, Binning]
    keys: dict[str, pa.Array]
    units: dict[str, I64]


def _ident(name: str) -> exp.Identifier:
    return exp.to_identifier(name)


def _ref(name: str) -> exp.Column:
    return exp.Column(this=_ident(name))


def _alias(e: exp.Expression, name: str) -> exp.Alias:
    return exp.Alias(this=e, alias=_ident(name))


def units_statement(
    caps: Capabilities, table: str, column: Column, *, unit: Column | None, max_rows: int, key: int
) -> exp.Select:
    """Distinct persons of each non-NULL value of ``column`` after bounding (one statement).

    Columns ``__k`` (the value) and ``__n`` (its persons). Each person keeps the
    ``max_rows`` rows ranked first by the keyed hash of (person, value) under ``key``, so
    touches at most ``max_rows`` values; rows without a person are dropped. A table
    protecting rows counts rows.
    """
    src = exp.Table(this=identifier(table), alias=exp.TableAlias(this=_ident(SAMPLE_ALIAS)))
    col = exp.Column(this=identifier(column.name), table=_ident(SAMPLE_ALIAS))
    count = exp.Count(this=exp.Star())
    if unit is None:
        return (
            exp.select(_alias(col, "__k"), _alias(count, "__n"))
            .from_(src, copy=False)
            .where(exp.Not(this=exp.Is(this=col.copy(), expression=exp.Null())), copy=False)
            .group_by(col.copy(), copy=False)
        )
    canonical = canonical_unit_expression(unit, caps)
    rows = (
        exp.select(_alias(canonical, "__u"), _alias(col, "__k"))
        .from_(src, copy=False)
        .where(exp.Not(this=exp.Is(this=canonical.copy(), expression=exp.Null())), copy=False)
    )
    window = exp.Window(
        this=exp.RowNumber(),
        partition_by=[_ref("__u")],
        order=exp.Order(expressions=[exp.Ordered(this=keyed_hash(caps, key, ["__u", "__k"]))]),
    )
    ranked = exp.select(_ref("__u"), _ref("__k"), _alias(window, "__rn")).from_("__rows")
    keep = exp.and_(
        exp.LTE(this=_ref("__rn"), expression=exp.Literal.number(max_rows)),
        exp.GT(this=_ref("__rn"), expression=exp.Literal.number(0)),
        exp.Not(this=exp.Is(this=_ref("__k"), expression=exp.Null())),
    )
    kept = exp.select(_ref("__u"), _ref("__k")).distinct().from_("__ranked").where(keep)
    statement = (
        exp.select(_ref("__k"), _alias(exp.Count(this=exp.Star()), "__n"))
        .from_("__kept")
        .group_by(_ref("__k"), copy=False)
    )
    ctes = [
        exp.CTE(this=q, alias=exp.TableAlias(this=_ident(n)))
        for n, q in (("__rows", rows), ("__ranked", ranked), ("__kept", kept))
    ]
    statement.set("with_", exp.With(expressions=ctes))
    return statement


def exact_domain(
    engine: Engine,
    binding: TableBinding,
    discretization: Discretization,
    *,
    unit: Column | None,
    max_rows: int,
    key: int,
) -> ExactDomain:
    """The exact statistics the domain measurements need (internal; see the module docstring).

    One statement for all the grids' histograms (the marginals' statement over the grids'
    1-ways) and one per selected column; every statement is type-checked before it runs.
    Reading the results cannot raise on the data (counts are integers; keys stay Arrow).

    Raises:
        SQLError, EngineError: the engine refused the statement or failed.
    """
    pending = discretization.pending
    grids = {b.column.name: grid_binning(b) for b in pending if isinstance(b.learn, Quantiles)}
    histograms: dict[str, I64] = {}
    if grids:
        fine = Discretization(tuple(grids.values()))
        counts = exact_marginals(
            engine, binding, fine, [(n,) for n in grids], unit=unit, max_rows=max_rows, key=key
        )
        histograms = {n: counts[(n,)][:-1] for n in grids}  # the NULL cell is not measured
    keys: dict[str, pa.Array] = {}
    units: dict[str, I64] = {}
    for b in pending:
        if not isinstance(b.learn, SelectKeys):
            continue
        statement = units_statement(
            engine.capabilities, binding.name, b.column, unit=unit, max_rows=max_rows, key=key
        )
        sql = render(statement, engine.capabilities.dialect)
        engine.check(binding, sql)
        result = engine.run(binding, sql)
        keys[b.column.name] = result.column("__k").combine_chunks()
        n = pc.fill_null(result.column("__n"), 0).to_numpy(zero_copy_only=False)
        units[b.column.name] = np.asarray(n, dtype=np.int64)
    return ExactDomain(histograms, grids, keys, units)


def _sample_without_replacement(count: int, k: int, source: RandomSource | None) -> I64:
    """``k`` distinct indices below ``count``, uniformly (a partial Fisher–Yates shuffle)."""
    order = np.arange(count, dtype=np.int64)
    for i in range(k):
        j = i + int(uniform_below(np.array([count - i], dtype=np.int64), source=source)[0])
        order[i], order[j] = order[j], order[i]
    return np.sort(order[:k])


def _keys_of(values: list[object], integer: bool) -> tuple[object, ...]:
    """Released keys as Python ``int`` (integer columns) or ``str``, sorted (total).

    A value that does not convert is dropped (post-processing of a DP release).
    """
    out: set[object] = set()
    for v in values:
        try:
            if integer and not isinstance(v, bool):
                out.add(int(v))  # type: ignore[call-overload]
            elif isinstance(v, str):
                out.add(v)
        except (TypeError, ValueError, OverflowError):
            continue
    return tuple(sorted(out))  # type: ignore[type-var]


def noisy_histogram(
    exact: npt.ArrayLike, *, max_rows: int, rho: Fraction, source: RandomSource | None = None
) -> I64:
    """A quantile grid's counts plus discrete Gaussian noise, ``σ² = r²/(2ρ)``: ρ-zCDP.

    ``r = max_rows`` bounds the L2 change of the grid's counts when one person (at most
    ``r`` kept rows) is added or removed. Each element gets independent noise.

    Raises:
        InternalError: the mechanism's loss is not ``Rho(ρ)`` (a bug).
    """
    release = discrete_gaussian(exact, sensitivity=max_rows, rho=rho, source=source)
    if not isinstance(release.loss, Rho) or release.loss.rho != rho:
        raise InternalError("the quantile histogram's loss is not the one planned")
    return np.asarray(release.value, dtype=np.int64)


def select_keys(
    units: npt.ArrayLike, plan: DomainPlan, *, source: RandomSource | None = None
) -> npt.NDArray[np.bool_]:
    """Which keys partition selection keeps: ``(plan.epsilon_select, plan.delta_select)``-DP.

    ``units`` are the keys' numbers of distinct persons after bounding to ``r`` rows each,
    so one person is in at most ``r`` keys: the rule runs with ``max_groups = r``
    (:func:`deniable.query.partition.select`). Each element is an independent decision.
    """
    return partition.select(
        units,
        epsilon=plan.epsilon_select,
        delta=plan.delta_select,
        max_groups=plan.max_rows,
        source=source,
    )


def release_domain(
    discretization: Discretization,
    exact: ExactDomain,
    plan: DomainPlan,
    *,
    source: RandomSource | None = None,
) -> tuple[Discretization, list[Event]]:
    """Measure the domain (after the release's charge): the final bins and keys, and events.

    Total: always returns a discretization whose sizes are at most the placeholders'.
    Privacy: each quantile histogram is ``plan.rho_each``-zCDP, each selection
    ``(plan.epsilon_select, plan.delta_select)``-DP (module docstring).
    """
    learned: dict[str, Binning] = {}
    events: list[Event] = []
    r = plan.max_rows
    for b in discretization.pending:
        name = b.column.name
        if isinstance(b.learn, Quantiles):
            grid = exact.grids[name]
            noisy = noisy_histogram(
                exact.histograms[name], max_rows=r, rho=plan.rho_each, source=source
            )
            edges = quantile_edges(noisy, grid, b.learn.n)
            assert b.lower is not None and b.upper is not None
            learned[name] = Binning(b.column, len(edges) + 2, b.lower, b.upper, edges=edges)
            events.append(Event("bins", (name,), plan.rho_each, sigma=plan.sigma))
        elif isinstance(b.learn, SelectKeys):
            mask = select_keys(exact.units[name], plan, source=source)
            chosen = np.flatnonzero(mask)
            if chosen.size > b.learn.max_keys:
                chosen = chosen[_sample_without_replacement(chosen.size, b.learn.max_keys, source)]
            values = exact.keys[name].take(pa.array(chosen, type=pa.int64())).to_pylist()
            kept = _keys_of(values, b.column.kind is ColumnKind.INTEGER)
            learned[name] = Binning(b.column, len(kept) + 1, keys=kept)
            events.append(
                Event(
                    "keys",
                    (name,),
                    plan.epsilon_select**2 / 2,
                    epsilon=plan.epsilon_select,
                    delta=plan.delta_select,
                )
            )
    return discretization.replace(learned), events


def check_marginal_statement(
    engine: Engine,
    binding: TableBinding,
    discretization: Discretization,
    cliques: Sequence[tuple[str, ...]],
    *,
    unit: Column | None,
    max_rows: int,
) -> None:
    """Type-check the marginals' statement of a discretization with placeholders (no row read).

    The final statement differs only in the literals of edges and keys (same types).
    """
    from deniable.synth.measure import marginal_statement

    domain = discretization.domain
    statement = marginal_statement(
        engine.capabilities,
        binding.name,
        discretization,
        [domain.canonical(c) for c in cliques],
        unit=unit,
        max_rows=max_rows,
        key=0,
    )
    engine.check(binding, render(statement, engine.capabilities.dialect))
