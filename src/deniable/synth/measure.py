"""Marginals measured in the engine, and their noisy releases.

One statement computes the exact counts of every marginal a synthetic release may need, in
the engine where the data lives (DuckDB, PostgreSQL, Spark): rows never come into Python, and
what comes back has at most the public number of cells. Its shape (one CTE per step):

1. ``__rows``: each row's cells (:mod:`deniable.synth.discretize`) and, for a table with a
   privacy unit, the canonical unit ``__u`` and a keyed hash of the unit and the row's values;
   rows whose unit is NULL belong to no one and are dropped;
2. ``__kept``: per person, the ``max_rows`` rows ranked first by that hash (a uniformly random
   subset, under a fresh secret key: the compiler's bounding, :func:`keyed_hash`); a table
   protecting rows keeps every row;
3. ``__cube``: the counts of the full joint of the cells (one row per non-empty combination);
4. the marginals: ``GROUP BY GROUPING SETS`` over the cube, one set per clique. Cells are
   never NULL, so a result row's NULL columns tell which clique it counts.

Sensitivity: adding or removing one person changes at most ``r = max_rows`` kept rows (1 on
a table protecting rows), each in one cell of each marginal, so every marginal moves by at
most ``r`` in L1 and in L2 (all rows may fall in one cell). A marginal released with the
discrete Gaussian at variance ``σ²`` is therefore ``ρ = r²/(2σ²)``-zCDP
(:func:`measure_marginal`); an exponential-mechanism selection at ``ε`` whose scores move by
at most their stated sensitivity is ε-DP and ε-bounded-range, hence ``ε²/8``-zCDP
(:meth:`ReleaseLog.select`; Cesar & Rogers 2021).
:class:`ReleaseLog` draws every noisy release of one synthetic release and adds up their ρ
exactly; it refuses (``InternalError``, a bug) to pass the ρ charged for the whole release.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from deniable.accounting.bounds import round_down, sqrt_interval
from deniable.engines.base import SAMPLE_ALIAS, Capabilities, Engine, TableBinding
from deniable.errors import InternalError, InvalidParameter
from deniable.mechanisms import discrete_gaussian, exponential_rejection
from deniable.noise.source import RandomSource
from deniable.query.catalog import Column
from deniable.query.rewrite.compile import canonical_unit_expression, keyed_hash, render
from deniable.sqlnames import identifier
from deniable.synth.discretize import Discretization
from deniable.synth.domain import Domain
from deniable.synth.model import Measurement

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
Clique = tuple[str, ...]

MAX_MARGINAL_CELLS = 2_000_000
"""Most cells one marginal may have."""

MAX_TOTAL_CELLS = 20_000_000
"""Most cells all the marginals measured in one release may have together."""

MAX_SETS_PER_STATEMENT = 512
"""Most marginals (grouping sets) counted by one statement: AIM on 40 columns has 10,700
candidates, and DuckDB ran out of memory (16.9 GiB) counting them in one ``GROUPING SETS``;
above this the marginals are counted in several statements, each bounding every person's
rows under the same key (so the same rows are kept in all of them)."""


def _ident(name: str) -> exp.Identifier:
    return exp.to_identifier(name)


def _ref(name: str) -> exp.Column:
    return exp.Column(this=_ident(name))


def _alias(e: exp.Expression, name: str) -> exp.Alias:
    return exp.Alias(this=e, alias=_ident(name))


def _cte(name: str, query: exp.Expression) -> exp.CTE:
    return exp.CTE(this=query, alias=exp.TableAlias(this=_ident(name)))


def check_cells(domain: Domain, cliques: Sequence[Clique]) -> int:
    """Refuse marginals with too many cells (public: sizes only); return their total.

    Raises:
        InvalidParameter: one marginal above :data:`MAX_MARGINAL_CELLS`, or all together
            above :data:`MAX_TOTAL_CELLS`, naming the sizes and what to change.
    """
    total = 0
    for clique in cliques:
        size = domain.size(clique)
        if size > MAX_MARGINAL_CELLS:
            raise InvalidParameter(
                f"the marginal of {list(clique)} has {size:,} cells (most: "
                f"{MAX_MARGINAL_CELLS:,}): too many cells; use fewer bins or keys, or fewer "
                "columns"
            )
        total += size
    if total > MAX_TOTAL_CELLS:
        raise InvalidParameter(
            f"the marginals to measure have {total:,} cells together (most: "
            f"{MAX_TOTAL_CELLS:,}): too many cells; use fewer bins or keys, fewer columns, or "
            "method='mst'"
        )
    return total


def marginal_statement(
    caps: Capabilities,
    table: str,
    discretization: Discretization,
    cliques: Sequence[Clique],
    *,
    unit: Column | None,
    max_rows: int,
    key: int,
) -> exp.Select:
    """The one statement computing the exact counts of every clique's marginal.

    Its result has columns ``__c0 … __c{d-1}`` (a cell of each column, NULL where the
    column is not in the row's clique) and ``__n`` (the count), at most the cliques' total
    cells rows. ``key`` is the secret of the per-person row order (63 bits, from the CSPRNG).

    Raises:
        UnsafeQuery: the engine cannot normalise a text privacy unit.
    """
    if not 0 <= key < 2**63:
        raise InternalError("hash keys are 63-bit")
    names = discretization.names
    cells = [f"__c{j}" for j in range(len(names))]
    src = exp.Table(this=identifier(table), alias=exp.TableAlias(this=_ident(SAMPLE_ALIAS)))
    binned = [
        _alias(b.expression(caps), c) for b, c in zip(discretization.binnings, cells, strict=True)
    ]
    ctes: list[exp.CTE] = []
    if unit is None:
        kept = exp.select(*binned).from_(src, copy=False)
    else:
        raw = [f"__r{j}" for j in range(len(names))]
        raws = [
            _alias(exp.Column(this=identifier(n), table=_ident(SAMPLE_ALIAS)), r)
            for n, r in zip(names, raw, strict=True)
        ]
        canonical = canonical_unit_expression(unit, caps)
        rows = (
            exp.select(_alias(canonical, "__u"), *binned, *raws)
            .from_(src, copy=False)
            .where(exp.Not(this=exp.Is(this=canonical.copy(), expression=exp.Null())), copy=False)
        )
        ctes.append(_cte("__rows", rows))
        order = [keyed_hash(caps, key, ["__u", *raw]), *(_ref(c) for c in cells)]
        window = exp.Window(
            this=exp.RowNumber(),
            partition_by=[_ref("__u")],
            order=exp.Order(expressions=[exp.Ordered(this=o) for o in order]),
        )
        ranked = exp.select(*(_ref(c) for c in cells), _alias(window, "__rn")).from_("__rows")
        ctes.append(_cte("__ranked", ranked))
        # "row_number() <= r" alone lets DuckDB rewrite the window into a slower top-k;
        # the extra "> 0" keeps the window (as the compiler does).
        keep = exp.and_(
            exp.LTE(this=_ref("__rn"), expression=exp.Literal.number(max_rows)),
            exp.GT(this=_ref("__rn"), expression=exp.Literal.number(0)),
        )
        kept = exp.select(*(_ref(c) for c in cells)).from_("__ranked").where(keep, copy=False)
    ctes.append(_cte("__kept", kept))
    cube = (
        exp.select(*(_ref(c) for c in cells), _alias(exp.Count(this=exp.Star()), "__n"))
        .from_("__kept")
        .group_by(*(_ref(c) for c in cells), copy=False)
    )
    ctes.append(_cte("__cube", cube))
    position = {n: j for j, n in enumerate(names)}
    sets = [exp.Tuple(expressions=[_ref(cells[position[n]]) for n in clique]) for clique in cliques]
    total = exp.Cast(this=exp.Sum(this=_ref("__n")), to=exp.DataType.build("BIGINT"))
    # A column in none of this statement's sets is NULL in every row (engines refuse to
    # select an ungrouped column).
    grouped = {position[n] for clique in cliques for n in clique}
    outputs = [
        _ref(c)
        if j in grouped
        else _alias(exp.Cast(this=exp.Null(), to=exp.DataType.build("BIGINT")), c)
        for j, c in enumerate(cells)
    ]
    statement = exp.select(*outputs, _alias(total, "__n")).from_("__cube")
    statement.set("group", exp.Group(grouping_sets=[exp.GroupingSets(expressions=sets)]))
    statement.set("with_", exp.With(expressions=ctes))
    return statement


def exact_marginals(
    engine: Engine,
    binding: TableBinding,
    discretization: Discretization,
    cliques: Sequence[Clique],
    *,
    unit: Column | None,
    max_rows: int,
    key: int,
) -> dict[Clique, I64]:
    """The exact counts of each clique's marginal: internal, never released as they are.

    Each marginal is a flat int64 array over the clique's cells in row-major order of the
    clique's attributes (domain order). Every allocation is sized by the public domain, and
    nothing here can raise on the data's values. At most :data:`MAX_SETS_PER_STATEMENT`
    marginals per statement (a public split by their number).

    Raises:
        SQLError: the engine refused the statement's types (before reading any row).
        EngineError: the engine failed.
    """
    domain = discretization.domain
    canonical = [domain.canonical(c) for c in cliques]
    chunks = [
        canonical[i : i + MAX_SETS_PER_STATEMENT]
        for i in range(0, len(canonical), MAX_SETS_PER_STATEMENT)
    ]
    statements = [
        render(
            marginal_statement(
                engine.capabilities,
                binding.name,
                discretization,
                chunk,
                unit=unit,
                max_rows=max_rows,
                key=key,
            ),
            engine.capabilities.dialect,
        )
        for chunk in chunks
    ]
    for sql in statements:  # every type check before any row is read
        engine.check(binding, sql)
    out: dict[Clique, I64] = {}
    for sql, chunk in zip(statements, chunks, strict=True):
        out.update(read_marginals(engine.run(binding, sql), domain, chunk))
    return out


def read_marginals(
    result: pa.Table, domain: Domain, cliques: Sequence[Clique]
) -> dict[Clique, I64]:
    """Dense marginals from the statement's result (see :func:`marginal_statement`)."""
    d = len(domain)
    present = np.zeros((result.num_rows, d), dtype=bool)
    values = np.zeros((result.num_rows, d), dtype=np.int64)
    for j in range(d):
        col = result.column(f"__c{j}")
        present[:, j] = np.asarray(pc.is_valid(col).to_numpy(zero_copy_only=False), dtype=bool)
        filled = pc.fill_null(col, 0).to_numpy(zero_copy_only=False)
        values[:, j] = np.asarray(filled, dtype=np.int64)
    counts = np.asarray(
        pc.fill_null(result.column("__n"), 0).to_numpy(zero_copy_only=False), dtype=np.int64
    )
    masks = (present.astype(np.int64) << np.arange(d, dtype=np.int64)).sum(axis=1)
    out: dict[Clique, I64] = {}
    for clique in cliques:
        idx = [domain.index(n) for n in clique]
        mask = sum(1 << i for i in idx)
        mine = masks == mask
        shape = domain.shape(clique)
        size = math.prod(shape)
        flat = np.zeros(mine.sum(), dtype=np.int64)
        for i, s in zip(idx, shape, strict=True):
            flat = flat * s + np.clip(values[mine, i], 0, s - 1)
        out[clique] = np.bincount(flat, weights=counts[mine], minlength=size).astype(np.int64)
    return out


def measure_marginal(
    exact: I64, *, max_rows: int, sigma2: Fraction, source: RandomSource | None = None
) -> tuple[I64, Fraction]:
    """Noisy counts ``exact + Z``, ``Z`` discrete Gaussian of variance parameter ``σ²``.

    Returns the counts and their loss ``ρ = r²/(2σ²)`` (zCDP; ``r = max_rows`` bounds the
    marginal's L2 sensitivity).
    """
    rho = Fraction(max_rows * max_rows) / (2 * sigma2)
    release = discrete_gaussian(exact, sensitivity=max_rows, rho=rho, source=source)
    return np.asarray(release.value, dtype=np.int64), rho


def selection_rho(epsilon: Fraction) -> Fraction:
    """The zCDP cost ``ε²/8`` of one exponential-mechanism selection at ``ε``.

    The exponential mechanism is ε-bounded-range, hence ``ε²/8``-zCDP (Cesar & Rogers 2021):
    the cost MST and AIM charge it (:func:`~deniable.mechanisms.exponential_rejection`).
    """
    return epsilon * epsilon / 8


def epsilon_for(rho: Fraction) -> Fraction:
    """The largest ε (53-bit, rounded down) of a selection costing at most ``ρ = ε²/8``."""
    low, _ = sqrt_interval(8 * rho)
    eps = round_down(low)
    if eps <= 0 or selection_rho(eps) > rho:
        raise InternalError("no positive selection ε fits the share of the budget")
    return eps


@dataclass(frozen=True)
class Event:
    """One noisy release of a synthetic release (public: what analysts may see).

    Attributes:
        kind: ``"marginal"`` (discrete Gaussian counts) or ``"selection"`` (the
            exponential mechanism, sampled exactly by rejection).
        clique: the marginal's columns (a measured marginal) or the chosen clique.
        rho: its zCDP loss.
        sigma: the noise's standard deviation parameter σ in counts (marginals).
        epsilon: its ε (selections; ρ = ε²/8; key selections: ρ = ε²/2).
        candidates: the number of candidates (selections).
        delta: its δ (key selections: ``(ε, δ)``-DP, δ-approximately ``ε²/2``-zCDP).

    Kinds of a release with a measured domain (:mod:`deniable.synth.learn`): ``"bins"``
    (a column's quantile histogram on its grid, discrete Gaussian, σ) and ``"keys"`` (a
    column's keys by partition selection, ε and δ).
    """

    kind: str
    clique: Clique
    rho: Fraction
    sigma: float | None = None
    epsilon: Fraction | None = None
    candidates: int | None = None
    delta: Fraction | None = None

    def describe(self) -> dict[str, object]:
        """The event as JSON-ready public metadata."""
        out: dict[str, object] = {
            "kind": self.kind,
            "clique": list(self.clique),
            "rho": str(self.rho),
        }
        if self.sigma is not None:
            out["sigma"] = self.sigma
        if self.epsilon is not None:
            out["epsilon"] = str(self.epsilon)
            if self.candidates is not None:
                out["candidates"] = self.candidates
        if self.delta is not None:
            out["delta"] = str(self.delta)
        return out


@dataclass
class ReleaseLog:
    """Draws a synthetic release's noisy measurements and adds up their ρ exactly.

    Only used after the release's one charge of ``rho_cap`` committed. Every draw checks
    first that the total stays within the charge: the composition of the events equals at
    most the amount charged, or nothing is drawn (``InternalError``: a bug).

    Attributes:
        exact: the exact marginals by clique (internal).
        domain: the public domain.
        max_rows: ``r``, the sensitivity of each marginal (L1 and L2).
        rho_cap: the ρ charged for the whole release.
        source: randomness (default: the OS CSPRNG).
    """

    exact: dict[Clique, I64]
    domain: Domain
    max_rows: int
    rho_cap: Fraction
    source: RandomSource | None = None
    events: list[Event] = field(default_factory=list)
    measurements: list[Measurement] = field(default_factory=list)

    @property
    def spent(self) -> Fraction:
        """The exact ρ of every event so far (zCDP composition: a sum)."""
        return sum((e.rho for e in self.events), Fraction(0))

    @property
    def remaining(self) -> Fraction:
        """What the charge still covers."""
        return self.rho_cap - self.spent

    def _admit(self, rho: Fraction) -> None:
        if rho <= 0 or self.spent + rho > self.rho_cap:
            raise InternalError("a synthetic release tried to spend beyond its one charge")

    def measure(self, clique: Clique, *, rho: Fraction) -> Measurement:
        """Release clique's marginal with discrete Gaussian noise costing ``ρ``: ρ-zCDP.

        ``σ² = r²/(2ρ)``; the measurement holds the noisy counts and ``sd = σ``.
        """
        clique = self.domain.canonical(clique)
        self._admit(rho)
        r = self.max_rows
        sigma2 = Fraction(r * r) / (2 * rho)
        noisy, spent = measure_marginal(
            self.exact[clique], max_rows=r, sigma2=sigma2, source=self.source
        )
        if spent != rho:
            raise InternalError("the marginal's loss is not the loss admitted")
        sigma = math.sqrt(float(sigma2))
        self.events.append(Event("marginal", clique, rho, sigma=sigma))
        measurement = Measurement(clique, noisy.astype(np.float64), sigma)
        self.measurements.append(measurement)
        return measurement

    def select(
        self,
        candidates: Sequence[Clique],
        scores: I64,
        *,
        sensitivity: int,
        epsilon: Fraction,
    ) -> int:
        """Choose a candidate by the exponential mechanism: ε-DP, ε-bounded-range.

        ``scores`` are exact integers whose change between neighbouring datasets is at most
        ``sensitivity``; the choice costs ``ρ = ε²/8`` (bounded range implies ε²/8-zCDP,
        Cesar & Rogers 2021). Sampled by rejection, whose time depends on the scores: this
        runs after the release's one charge.
        """
        rho = selection_rho(epsilon)
        self._admit(rho)
        if len(candidates) != len(scores):
            raise InternalError("one score per candidate")
        release = exponential_rejection(
            np.asarray(scores, dtype=np.int64),
            sensitivity=sensitivity,
            epsilon=epsilon,
            source=self.source,
        )
        index = int(release.value)
        self.events.append(
            Event("selection", candidates[index], rho, epsilon=epsilon, candidates=len(scores))
        )
        return index


SCORE_BITS = 8
"""Model estimates are rounded to ``2^-SCORE_BITS`` before scoring, so that scores are exact
integers (in units of ``2^-SCORE_BITS`` counts) and their sensitivity holds exactly."""


def l1_score(exact: I64, estimate: F64) -> int:
    """``Σ|x − x̂|`` in units of ``2^-SCORE_BITS``, exactly (x̂ rounded to the grid first).

    The rounded estimate does not depend on the data beyond earlier releases, so the score
    moves by at most ``‖x − x′‖₁·2^SCORE_BITS`` between neighbours.
    """
    scale = 1 << SCORE_BITS
    est = np.rint(np.nan_to_num(np.asarray(estimate, dtype=np.float64), nan=0.0) * scale)
    est = np.clip(est, -(2.0**52), 2.0**52).astype(np.int64)
    return int(np.abs(np.asarray(exact, dtype=np.int64) * scale - est).sum())


def check_max_rows(max_rows: int) -> int:
    """Validate ``r`` (positive integer)."""
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
        raise InvalidParameter("max_rows must be a positive integer")
    return max_rows
