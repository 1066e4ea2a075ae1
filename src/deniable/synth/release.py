"""A synthetic table released with differential privacy, charged once to the dataset's ledger.

The release path (DESIGN §6.5), in order:

1. public checks (method, rows, budget kind), the public domain
   (:mod:`deniable.synth.discretize`) and the marginals the method may need (sizes checked);
2. a cheap refusal when the release does not fit what is left (ledger only);
3. the exact counts of every candidate marginal, computed by one statement in the engine
   (:mod:`deniable.synth.measure`); kept internal;
4. the one charge for the whole release: ``Rho(ρ)`` on a ρ budget or under the zCDP
   accountant, ``EpsilonDelta(ε, δ)`` (which ``ρ`` converts to) under the basic accountant;
   its details hold the plan (method, columns, cells, bounds, ρ and its split);
5. only then: the method's noisy measurements and data-dependent selections
   (:mod:`deniable.synth.mst`, :mod:`deniable.synth.aim`), whose ρ add up to at most the
   charge (checked by :class:`~deniable.synth.measure.ReleaseLog`); the model estimated from
   them and rows sampled from it (post-processing); the events (cliques, σ, ε) stored with
   the charge.

With a measured domain (``bins={"c": Quantiles(...)}`` or ``SelectKeys(...)``,
:mod:`deniable.synth.learn`), step 3 computes instead the domain's exact statistics (a
histogram on a public grid, the persons of each key) and type-checks the marginals'
statement; after the charge the domain is measured (``ρ/10`` of the release), and the
marginals are computed in the engine over the released bins and keys. The charge is then
``EpsilonDelta(ε, δ)`` whenever keys are selected (:func:`plan_selection_loss`).

Nothing before the charge depends on the data in a way that can be observed: every refusal
is decided from the catalog, the request and the ledger; what the engine returns is a public
number of counts at most and is read into arrays of public size.

Privacy: with neighbouring datasets differing in all rows of one person (one row for tables
protecting rows), the release is ρ-zCDP for the ρ charged (each measured marginal moves by at
most ``max_rows`` in L2; each selection is ε-bounded-range, ε²/8-zCDP; adaptive zCDP
composition), so also (ε, δ)-DP for the (ε, δ) charged.
"""

from __future__ import annotations

import itertools
import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa

from deniable.accounting.loss import Epsilon, EpsilonDelta, Number, PrivacyLoss, Rho, exact
from deniable.accounting.renyi import zcdp_epsilon, zcdp_rho_cap
from deniable.engines.base import Engine, TableBinding
from deniable.errors import InternalError, InvalidParameter
from deniable.ledger import Ledger
from deniable.noise.source import RandomSource, resolve
from deniable.query.answer import loss_to_json, show_loss
from deniable.query.catalog import TableInfo
from deniable.query.execute import precheck_budget
from deniable.synth import aim, mst
from deniable.synth.discretize import (
    DEFAULT_BINS,
    BinSpec,
    Discretization,
    SelectKeys,
    discretize,
)
from deniable.synth.domain import Domain
from deniable.synth.learn import (
    SELECTION_DELTA_SHARE,
    check_marginal_statement,
    exact_domain,
    plan_domain,
    release_domain,
)
from deniable.synth.measure import (
    Clique,
    Event,
    ReleaseLog,
    check_cells,
    exact_marginals,
)
from deniable.synth.model import Measurement, estimate

if TYPE_CHECKING:
    import polars as pl

I64 = npt.NDArray[np.int64]

METHODS = ("aim", "mst")
"""The synthetic-data methods."""

MAX_SYNTHETIC_ROWS = 10**8
"""Most rows one synthetic table may have (its default, the noisy total, is capped here)."""


def plan_loss(
    cap: PrivacyLoss,
    *,
    zcdp: bool,
    epsilon: Number | None,
    delta: Number | None,
    rho: Number | None,
) -> tuple[Fraction, PrivacyLoss]:
    """The ρ a release spends and the one loss charged for it (public arithmetic).

    * a ρ budget: ``rho=`` → ``Rho(ρ)``;
    * an (ε, δ) budget under the zCDP accountant: ``rho=`` → ``Rho(ρ)``, or ``epsilon=`` and
      ``delta=`` → ``Rho(ρ)`` with the largest ρ that implies ``(ε, δ)``;
    * an (ε, δ) budget under the basic accountant: ``epsilon=`` and ``delta=`` →
      ``EpsilonDelta(ε, δ)`` and that ρ, or ``rho=`` and ``delta=`` → the ``(ε, δ)`` ρ
      converts to.

    Raises:
        InvalidParameter: a pure ε budget (Gaussian noise needs δ > 0 or ρ), a missing or
            extra parameter, values out of range.

    Examples:
        >>> rho, loss = plan_loss(EpsilonDelta(epsilon=3, delta=1e-5), zcdp=False,
        ...                       epsilon=1, delta=1e-6, rho=None)
        >>> loss, 0.018 < float(rho) < 0.03
        (EpsilonDelta(epsilon=1, delta=1e-06), True)
        >>> plan_loss(Rho(rho=1), zcdp=False, epsilon=None, delta=None, rho=0.25)[1]
        Rho(rho=0.25)
    """
    if (epsilon is None) == (rho is None):
        raise InvalidParameter("give either epsilon= (with delta=) or rho=, not both or neither")
    if isinstance(cap, Epsilon):
        raise InvalidParameter(
            "synthetic data measures marginals with Gaussian noise (zCDP): it needs a dataset "
            "budget of (ε, δ) with δ > 0 or of ρ, not a pure ε budget"
        )
    if isinstance(cap, Rho):
        if rho is None or delta is not None:
            raise InvalidParameter("this dataset's budget is ρ-zCDP: give rho= only")
        r = _positive(rho, "rho")
        return r, Rho(rho=r)
    if rho is not None:
        r = _positive(rho, "rho")
        if zcdp:
            if delta is not None:
                raise InvalidParameter("rho= under the zCDP accountant takes no delta=")
            return r, Rho(rho=r)
        if delta is None:
            raise InvalidParameter(
                "this dataset adds (ε, δ) losses: give delta= to convert rho= to (ε, δ)"
            )
        d = _delta(delta)
        return r, EpsilonDelta(epsilon=zcdp_epsilon(r, d), delta=d)
    assert epsilon is not None
    if delta is None:
        raise InvalidParameter("give delta= (in (0, 1)) with epsilon=: Gaussian noise needs it")
    e, d = _positive(epsilon, "epsilon"), _delta(delta)
    r = zcdp_rho_cap(e, d)
    if r <= 0:
        raise InvalidParameter("this (epsilon, delta) allows no ρ > 0; raise epsilon or delta")
    return r, (Rho(rho=r) if zcdp else EpsilonDelta(epsilon=e, delta=d))


def plan_selection_loss(
    cap: PrivacyLoss,
    *,
    epsilon: Number | None,
    delta: Number | None,
    rho: Number | None,
) -> tuple[Fraction, PrivacyLoss, Fraction]:
    """The ρ, the one loss charged and the selections' δ of a release that selects keys.

    Partition selection is ``(ε, δ)``-DP with δ > 0, so the release is δ_sel-approximately
    ρ-zCDP (:mod:`deniable.synth.learn`): ``δ_sel = δ/2`` (:data:`SELECTION_DELTA_SHARE`)
    goes to the selections and ``δ − δ_sel`` to converting ρ, and the charge is
    ``EpsilonDelta(ε, δ)``, which the release satisfies. From ``epsilon=`` and ``delta=``:
    ``ρ`` is the largest that converts to ``(ε, δ − δ_sel)``; from ``rho=`` and ``delta=``:
    ``ε = ε(ρ, δ − δ_sel)``. The same charge under both accountants: the zCDP accountant
    counts an ``(ε, δ)`` charge as ``(ε²/2, δ)`` (sound; it has no loss type for
    "δ-approximately ρ-zCDP", which would count only ``(ρ, δ_sel)``).

    Raises:
        InvalidParameter: a pure ε or a ρ budget (no δ to spend), no ``delta=``, both or
            neither of ``epsilon=`` and ``rho=``, values out of range.

    Examples:
        >>> rho, loss, d = plan_selection_loss(EpsilonDelta(epsilon=3, delta=1e-5),
        ...                                    epsilon=1, delta=Fraction(1, 10**6), rho=None)
        >>> loss, d
        (EpsilonDelta(epsilon=1, delta=1e-06), Fraction(1, 2000000))
    """
    if (epsilon is None) == (rho is None):
        raise InvalidParameter("give either epsilon= (with delta=) or rho=, not both or neither")
    if not isinstance(cap, EpsilonDelta):
        raise InvalidParameter(
            "SelectKeys selects keys by DP partition selection, which costs a δ > 0: it needs "
            "a dataset budget of (ε, δ) with δ > 0; declare the column's public keys instead"
        )
    if delta is None:
        raise InvalidParameter("SelectKeys needs delta= (in (0, 1)): partition selection costs δ")
    d = _delta(delta)
    d_select = SELECTION_DELTA_SHARE * d
    d_convert = d - d_select
    if rho is not None:
        r = _positive(rho, "rho")
        return r, EpsilonDelta(epsilon=zcdp_epsilon(r, d_convert), delta=d), d_select
    assert epsilon is not None
    e = _positive(epsilon, "epsilon")
    r = zcdp_rho_cap(e, d_convert)
    if r <= 0:
        raise InvalidParameter("this (epsilon, delta) allows no ρ > 0; raise epsilon or delta")
    return r, EpsilonDelta(epsilon=e, delta=d), d_select


def _positive(value: Number, name: str) -> Fraction:
    v = exact(value, name)
    if v <= 0:
        raise InvalidParameter(f"{name} must be > 0")
    return v


def _delta(value: Number) -> Fraction:
    d = exact(value, "delta")
    if not 0 < d < 1:
        raise InvalidParameter("delta must be in (0, 1)")
    return d


@dataclass(frozen=True)
class Synthetic:
    """A DP synthetic table and what was released to make it.

    Attributes:
        table: the synthetic rows (Arrow), columns of their original types.
        method: ``"mst"`` or ``"aim"``.
        loss: the loss charged for the whole release (one charge).
        rho: the zCDP ρ the release spent (at most; the events add up to it or less).
        charge_id: the ledger's charge.
        events: every noisy release in order: measured marginals (clique, σ, ρ) and
            selections (chosen clique, ε, ρ) — public, what analysts may see.
        measurements: the noisy marginals (DP releases themselves).
        discretization: the public bins and keys.
        cells: the synthetic rows as cell indices (post-processing; for utility reports).
    """

    table: pa.Table
    method: str
    loss: PrivacyLoss
    rho: Fraction
    charge_id: int
    events: tuple[Event, ...]
    measurements: tuple[Measurement, ...]
    discretization: Discretization
    cells: I64

    @property
    def domain(self) -> Domain:
        """The public discrete domain."""
        return self.discretization.domain

    @property
    def cliques(self) -> tuple[Clique, ...]:
        """The measured marginals' columns, in order."""
        return tuple(m.clique for m in self.measurements)

    def to_arrow(self) -> pa.Table:
        """The synthetic rows as an Arrow table."""
        return self.table

    def to_pandas(self) -> pd.DataFrame:
        """The synthetic rows as a pandas DataFrame (integers as nullable ``Int64``)."""
        types = {pa.int64(): pd.Int64Dtype(), pa.bool_(): pd.BooleanDtype()}
        frame: pd.DataFrame = self.table.to_pandas(types_mapper=types.get)
        return frame

    def to_polars(self) -> pl.DataFrame:
        """The synthetic rows as a polars DataFrame."""
        import polars as pl

        frame = pl.from_arrow(self.table)
        assert isinstance(frame, pl.DataFrame)
        return frame

    def noise_scales(self) -> pd.DataFrame:
        """Every measurement and selection with its noise scale (public)."""
        return pd.DataFrame(
            [
                {
                    "kind": e.kind,
                    "clique": ", ".join(e.clique),
                    "sigma": e.sigma,
                    "epsilon": None if e.epsilon is None else float(e.epsilon),
                    "delta": None if e.delta is None else float(e.delta),
                    "rho": float(e.rho),
                }
                for e in self.events
            ]
        )

    def __len__(self) -> int:
        return int(self.table.num_rows)

    def __repr__(self) -> str:
        return (
            f"Synthetic({self.method}: {self.table.num_rows:,} rows × {self.table.num_columns} "
            f"columns; {sum(e.kind == 'marginal' for e in self.events)} marginals measured; "
            f"charged {show_loss(self.loss)}; charge {self.charge_id})"
        )


def needed_cliques(method: str, names: tuple[str, ...]) -> list[Clique]:
    """The marginals whose exact counts a method may need (all computed before the charge)."""
    if method == "mst":
        return mst.candidate_cliques(names)
    return aim.candidate_cliques(names)


def synthesize(
    info: TableInfo,
    engine: Engine,
    binding: TableBinding,
    *,
    ledger: Ledger,
    dataset: str,
    analyst: str,
    columns: Sequence[str] | None = None,
    epsilon: Number | None = None,
    delta: Number | None = None,
    rho: Number | None = None,
    method: str = "aim",
    rows: int | None = None,
    bins: int | Mapping[str, BinSpec] = DEFAULT_BINS,
    rounds: int | None = None,
    max_cells: int = aim.MAX_MODEL_CELLS,
    source: RandomSource | None = None,
) -> Synthetic:
    """Release a DP synthetic table of ``info``'s ``columns``; one charge (module docstring).

    Args:
        info: the table's catalog entry (policy: privacy unit, ``max_rows``, bounds, keys).
        engine: the engine holding the table.
        binding: the engine's binding of the table.
        ledger: the dataset's ledger.
        dataset: the ledger's name of the dataset.
        analyst: who asks (recorded with the charge).
        columns: the synthetic table's columns (default: all but the privacy unit).
        epsilon: ε of the release (with ``delta``).
        delta: δ of the release.
        rho: ρ of the release (instead of ε).
        method: ``"aim"`` or ``"mst"``.
        rows: rows to generate (default: the noisy number of rows measured).
        bins: bins of numeric columns (one number or one per column); per column also
            ``Quantiles(n, within=(lo, hi))`` (DP quantile bins) or ``SelectKeys(max_keys)``
            (keys by DP partition selection; needs ``delta=``): measured within this release
            (:mod:`deniable.synth.learn`, ``ρ/10`` of it).
        rounds: AIM's most rounds (default ``16·d``).
        max_cells: AIM's limit on the model's largest junction-tree clique (public).
        source: randomness (default: the OS CSPRNG).

    Raises:
        InvalidParameter: bad arguments, too many cells, a budget that cannot pay Gaussian
            noise (nothing spent).
        UnsafeQuery: a column whose domain is not declared (nothing spent).
        BudgetExceeded: the release does not fit what is left (nothing spent).
        SQLError, EngineError: the engine refused or failed (nothing spent; with a measured
            domain, a failure of the marginals' statement after the charge keeps the charge
            and records it).
    """
    if method not in METHODS:
        raise InvalidParameter(f"method must be one of {list(METHODS)}")
    if rows is not None and (
        isinstance(rows, bool) or not isinstance(rows, int) or not 1 <= rows <= MAX_SYNTHETIC_ROWS
    ):
        raise InvalidParameter(f"rows must be an integer in [1, {MAX_SYNTHETIC_ROWS:,}]")
    if isinstance(max_cells, bool) or not isinstance(max_cells, int) or max_cells < 1:
        raise InvalidParameter("max_cells must be a positive integer")
    if rounds is not None and (
        isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1
    ):
        raise InvalidParameter("rounds must be a positive integer")
    if info.sample_rate is not None:
        raise InvalidParameter(
            "synthetic data is released from the whole table: this table answers through a "
            "Bernoulli sample (sample_rate); register it without one"
        )
    disc = discretize(info, columns, bins)
    domain = disc.domain  # a placeholder's size is its most cells: every check is public
    cliques = needed_cliques(method, domain.names)
    check_cells(domain, cliques)
    if any(isinstance(b.learn, SelectKeys) for b in disc.pending):
        rho_total, loss, delta_select = plan_selection_loss(
            ledger.cap(dataset), epsilon=epsilon, delta=delta, rho=rho
        )
    else:
        rho_total, loss = plan_loss(
            ledger.cap(dataset),
            zcdp=ledger.accountant(dataset) != "basic",
            epsilon=epsilon,
            delta=delta,
            rho=rho,
        )
        delta_select = Fraction(0)
    unit_name = info.policy.privacy_unit
    unit = None if unit_name is None else info.column(unit_name)
    max_rows = 1 if unit is None else info.policy.max_rows
    domain_plan = plan_domain(disc, rho_total, delta_select, max_rows)
    rho_marginals = rho_total - domain_plan.rho
    precheck_budget(ledger, dataset, loss, what="this synthetic release")
    key = int(resolve(source).words(1)[0]) >> 1
    exact_counts: dict[Clique, I64] = {}
    if disc.pending:
        # The domain's statistics now; the marginals only once the bins and keys are
        # released (after the charge), their statement type-checked now.
        exact_dom = exact_domain(engine, binding, disc, unit=unit, max_rows=max_rows, key=key)
        check_marginal_statement(engine, binding, disc, cliques, unit=unit, max_rows=max_rows)
    else:
        exact_counts = exact_marginals(
            engine, binding, disc, cliques, unit=unit, max_rows=max_rows, key=key
        )
    details: dict[str, Any] = {
        "synth": {
            "method": method,
            "table": info.name,
            "columns": list(domain.names),
            "cells": list(domain.sizes),
            "bins": disc.describe(),
            "privacy_unit": unit_name,
            "max_rows": max_rows,
            "rho": str(rho_total),
            "sensitivity": max_rows,
            "plan": (
                mst.describe_plan(len(domain), rho_marginals, max_rows)
                if method == "mst"
                else aim.describe_plan(len(domain), rounds, rho_marginals, max_rows, max_cells)
            ),
        }
    }
    if disc.pending:
        details["synth"]["domain"] = domain_plan.describe()
    charge = ledger.charge(
        dataset,
        loss,
        analyst=analyst,
        query_key=f"synth/{secrets.token_hex(16)}",  # a release is never replayed
        query_text=f"synthetic data ({method}) of {info.name!r}: {list(domain.names)}",
        details=details,
    )
    # Only now, after the commit, is anything computed from the data used.
    domain_events: list[Event] = []
    if disc.pending:
        disc, domain_events = release_domain(disc, exact_dom, domain_plan, source=source)
        domain = disc.domain
        try:
            exact_counts = exact_marginals(
                engine, binding, disc, cliques, unit=unit, max_rows=max_rows, key=key
            )
        except Exception:
            failed = {"synth": details["synth"], "failed_after_charge": "marginals"}
            ledger.store_answer(charge.id, json.dumps(failed, sort_keys=True).encode())
            raise
    log = ReleaseLog(exact_counts, domain, max_rows, rho_marginals, source=source)
    if method == "mst":
        mst.run(log)
        model = estimate(domain, log.measurements)
    else:
        model = aim.run(log, rounds=rounds, max_cells=max_cells)
    if domain_plan.rho + log.spent > rho_total:
        raise InternalError("the synthetic release's events exceed its charge")
    count = rows if rows is not None else min(max(1, round(model.total)), MAX_SYNTHETIC_ROWS)
    # Rounded sampling (each clique's cells get counts rounded from their expectations, as
    # private-pgm's synthetic_data): the rows' marginals follow the model's to about a count.
    cells = model.sample(count, source=source, rounded=True)
    table = disc.decode(cells, source)
    events = (*domain_events, *log.events)
    record: dict[str, Any] = {
        "synth": details["synth"],
        "charged": loss_to_json(loss),
        "events": [e.describe() for e in events],
        "rows": count,
    }
    if domain_events:
        record["released_bins"] = [
            d for d in disc.describe() if d["column"] in set(domain_plan.quantiles)
        ]
    ledger.store_answer(charge.id, json.dumps(record, sort_keys=True).encode())
    return Synthetic(
        table=table,
        method=method,
        loss=loss,
        rho=rho_total,
        charge_id=charge.id,
        events=events,
        measurements=tuple(log.measurements),
        discretization=disc,
        cells=np.asarray(cells, dtype=np.int64),
    )


def marginal_of(cells: I64, domain: Domain, clique: Clique) -> I64:
    """Counts of ``cells`` rows (cell indices, domain order) over ``clique`` (row-major)."""
    flat = np.zeros(cells.shape[0], dtype=np.int64)
    for name in clique:
        j = domain.index(name)
        flat = flat * domain.sizes[j] + cells[:, j]
    return np.bincount(flat, minlength=domain.size(clique)).astype(np.int64)


def total_variation(a: npt.ArrayLike, b: npt.ArrayLike) -> float:
    """``½‖a/Σa − b/Σb‖₁`` (0 when both are empty; 1 when one is)."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    sx, sy = float(x.sum()), float(y.sum())
    if sx <= 0 or sy <= 0:
        return 0.0 if sx <= 0 and sy <= 0 else 1.0
    return 0.5 * float(np.abs(x / sx - y / sy).sum())


@dataclass(frozen=True)
class UtilityReport:
    """NON-PRIVATE: the error of a synthetic table's marginals against the real table.

    For the curator alone: computed from the data exactly, never charged, never stored; do
    not show it to analysts (they get the noise scales, :meth:`Synthetic.noise_scales`).

    Attributes:
        errors: one row per marginal: ``clique``, ``ways`` (1, 2 or 3) and ``tv``, the total
            variation distance between the synthetic and the real (bounded) marginal.
    """

    errors: pd.DataFrame
    non_private: bool = True

    def summary(self) -> pd.DataFrame:
        """Mean and max total variation by number of ways."""
        return self.errors.groupby("ways")["tv"].agg(["mean", "max", "count"]).reset_index()

    def __repr__(self) -> str:
        summary = self.summary()
        means = ", ".join(
            f"{w}-way {m:.4f}" for w, m in zip(summary["ways"], summary["mean"], strict=True)
        )
        return f"UtilityReport(NON-PRIVATE, mean total variation: {means})"


class CuratorTables(Protocol):
    """What :func:`utility_report` reads of a curator's session (its own tables).

    A :class:`~deniable.curator.session.Session` has these (the synth layer sits below the
    curator and does not import it).
    """

    _engines: dict[str, Engine]
    _bindings: dict[str, TableBinding]

    def _table_info(self, table: str) -> TableInfo: ...


def utility_report(
    session: CuratorTables, table: str, synthetic: Synthetic, *, ways: Sequence[int] = (1, 2, 3)
) -> UtilityReport:
    """NON-PRIVATE: total variation of every 1-, 2- and 3-way marginal, synthetic vs real.

    The real marginals are those of the table as the release saw it: same bins, each person
    bounded to ``max_rows`` rows (a fresh random choice). For the curator, who holds the data:
    exact, no noise, never charged, never stored as an answer.

    Raises:
        InvalidParameter: an unknown table, too many cells.
    """
    info = session._table_info(table)  # the curator's own session
    engine = session._engines[info.name]
    binding = session._bindings[info.name]
    disc = synthetic.discretization
    domain = disc.domain
    names = domain.names
    cliques: list[Clique] = [
        c for k in ways if 1 <= k <= len(names) for c in itertools.combinations(names, k)
    ]
    check_cells(domain, cliques)
    unit_name = info.policy.privacy_unit
    unit = None if unit_name is None else info.column(unit_name)
    real = exact_marginals(
        engine,
        binding,
        disc,
        cliques,
        unit=unit,
        max_rows=1 if unit is None else info.policy.max_rows,
        key=secrets.randbits(63),
    )
    rows = [
        {
            "clique": ", ".join(c),
            "ways": len(c),
            "tv": total_variation(marginal_of(synthetic.cells, domain, c), real[c]),
        }
        for c in cliques
    ]
    return UtilityReport(pd.DataFrame(rows))
