"""Bounds that fit the data: DP contribution histograms, and the policy they suggest.

A person-level table needs contribution bounds (``max_groups``, ``max_rows``) that the
curator states; choosing them blind either drops many rows (bias) or adds much noise. This
module measures, with differential privacy and charged to the dataset's ledger, how much
people contribute, and proposes the bounds that minimise the expected error of a stated
workload (after Amin, Kulesza, Muñoz Medina & Vassilvitskii, "Bounding user contributions:
a bias-variance trade-off", ICML 2019: choose the bound from a DP histogram of the
contributions).

What is released, for a table with privacy unit ``u`` and grouping columns ``G``: three
histograms over a public log-scale grid of :data:`BINS` bins (:data:`EDGES`: one bin per
value from 1 to 7, then four bins per octave — ``[8, 10), [10, 12), [12, 14), [14, 16),
[16, 20), …`` — up to ``2^20``, the last bin every value ``≥ 2^20``):

* ``rows``: each person's number of rows;
* ``groups``: each person's number of distinct groups (values of ``G``);
* ``rows_per_group``: each person's largest number of rows in one group;

and one joint histogram, ``rows_by_groups``: each person's (rows, groups) pair on a coarser
grid (:data:`JOINT_EDGES`, :data:`JOINT_BINS` bins an axis, flattened row-major: cell
``rows_bin·JOINT_BINS + groups_bin``). The joint is what the bias of ``max_groups`` needs:
bounding keeps a uniformly random ``m`` of a person's ``g`` groups, so a person with ``R``
rows keeps ``R·min(1, m/g)`` of them in expectation, whatever the rows' spread — and the
people with many groups are often the ones with many rows.

Each person lands in exactly one bin of each histogram, so adding or removing a person
changes each histogram by one in one bin: L1 sensitivity 1 per histogram. Each is released
with the discrete Laplace (geometric) mechanism at ``ε/4``; together ``ε``-DP by basic
composition (:func:`contribution_histograms`). The statement computes per-person
aggregates in the engine and returns only the bin counts (at most ``3·BINS +
JOINT_BINS²``): what reaches Python before the charge has a public size, and rows never
leave the engine. The proposal (:func:`propose`) is post-processing of the released
histograms: free.
"""

from __future__ import annotations

import functools
import math
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import pandas as pd
from sqlglot import exp

from deniable.accounting.loss import Epsilon, Number, exact
from deniable.curator.clamps import ClampChoice, error_curve
from deniable.engines.base import Capabilities, Engine, TableBinding
from deniable.errors import InvalidParameter
from deniable.ledger import Ledger
from deniable.mechanisms import Release, geometric
from deniable.noise.source import RandomSource
from deniable.query.catalog import Column
from deniable.query.execute import precheck_budget
from deniable.query.rewrite.compile import SOURCE, canonical_unit_expression, render
from deniable.sqlnames import identifier

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def _edges() -> tuple[int, ...]:
    low = list(range(1, 8))
    for k in range(3, 20):
        low += [(1 << k) + q * (1 << (k - 2)) for q in range(4)]
    return (*low, 1 << 20)


EDGES = _edges()
"""The least value of each bin of the grid: ``1, 2, …, 7, 8, 10, 12, 14, 16, 20, …, 2^20``
(exact below 8, then quarter octaves: a bin's values are within 25% of its low end)."""

BINS = len(EDGES)
"""Bins of the grid (76); the last holds every value ``≥ 2^20``."""


def _joint_edges() -> tuple[int, ...]:
    low = list(range(1, 8))
    for k in range(3, 20):
        low += [1 << k, (1 << k) + (1 << (k - 1))]
    return (*low, 1 << 20)


JOINT_EDGES = _joint_edges()
"""The least value of each bin of the joint histogram's axes: ``1, …, 7, 8, 12, 16, 24, …,
2^20`` (exact below 8, then half octaves)."""

JOINT_BINS = len(JOINT_EDGES)
"""Bins of each axis of the joint histogram (42); the last holds every value ``≥ 2^20``."""

KINDS = ("rows", "groups", "rows_per_group", "rows_by_groups")
"""The four histograms, in the order of the statement's ``kind`` column."""

SIZES = {"rows": BINS, "groups": BINS, "rows_per_group": BINS, "rows_by_groups": JOINT_BINS**2}
"""Cells of each histogram (public)."""

CANDIDATES = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 25, 32, 40, 50, 64, 100, 128, 256, 512, 1000)
"""The bounds a proposal chooses among (public)."""

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]


def bin_low(i: int) -> int:
    """The least value of bin ``i``."""
    return EDGES[i]


def bin_of(value: int) -> int:
    """The bin holding ``value ≥ 1`` (for references and tests; the engine has its own)."""
    return max(i for i, low in enumerate(EDGES) if low <= value)


def representative(i: int) -> float:
    """A bin's representative value: the geometric mean of its ends (the last: its low end)."""
    if i >= BINS - 1:
        return float(bin_low(i))
    return math.sqrt(bin_low(i) * (bin_low(i + 1) - 1))


def joint_representative(i: int) -> float:
    """A joint axis bin's representative value: the geometric mean of its ends."""
    if i >= JOINT_BINS - 1:
        return float(JOINT_EDGES[i])
    return math.sqrt(JOINT_EDGES[i] * (JOINT_EDGES[i + 1] - 1))


_REPS = np.array([representative(i) for i in range(BINS)])
_JOINT_REPS = np.array([joint_representative(i) for i in range(JOINT_BINS)])


def _bin(column: str, edges: Sequence[int] = EDGES) -> exp.Expression:
    """The bin ``i`` with ``edges[i] ≤ value < edges[i+1]`` (the last open), exactly.

    A balanced tree of ``CASE`` (about ``log2(len(edges))`` comparisons a value, not one a
    bin): integer comparisons only, the same in every engine.
    """

    def tree(lo: int, hi: int) -> exp.Expression:  # bins lo..hi-1, value ≥ edges[lo]
        if hi - lo == 1:
            return exp.Literal.number(lo)
        mid = (lo + hi) // 2
        test = exp.GTE(this=exp.column(column), expression=exp.Literal.number(edges[mid]))
        return exp.Case(ifs=[exp.If(this=test, true=tree(mid, hi))], default=tree(lo, mid))

    return tree(0, len(edges))


def _rows_per_pair(
    caps: Capabilities, table: str, unit: Column, groups: Sequence[str]
) -> exp.Select:
    """``__u`` (the canonical unit), ``__g<i>`` (the groups) and ``__n``, its rows there.

    One row per (person, group) of the table; rows without a unit belong to no one.
    """
    src = exp.to_identifier(SOURCE)
    keys = [exp.Column(this=identifier(g), table=src.copy()) for g in groups]
    return (
        exp.select(
            exp.alias_(canonical_unit_expression(unit, caps), "__u"),
            *(exp.alias_(k, f"__g{i}") for i, k in enumerate(keys)),
            exp.alias_(exp.Count(this=exp.Star()), "__n"),
        )
        .from_(
            exp.Table(this=identifier(table), alias=exp.TableAlias(this=src.copy())),
            copy=False,
        )
        .where(
            exp.Is(
                this=exp.Column(this=identifier(unit.name), table=src.copy()),
                expression=exp.Not(this=exp.Null()),
            ),
            copy=False,
        )
        .group_by(exp.column("__u"), *(exp.column(f"__g{i}") for i in range(len(keys))), copy=False)
    )


def contribution_statement(
    engine: Engine, binding: TableBinding, unit: Column, groups: Sequence[str]
) -> str:
    """The one statement computing the four histograms' exact bin counts (no noise).

    Its result has at most ``3·BINS + JOINT_BINS²`` rows ``(kind, bin, n)``: ``kind``
    indexes :data:`KINDS`. Rows whose unit is NULL belong to no one and are left out.
    """
    return _contribution_statement(engine.capabilities, binding.name, unit, tuple(groups))


@functools.lru_cache(maxsize=64)
def _contribution_statement(
    caps: Capabilities, table: str, unit: Column, groups: tuple[str, ...]
) -> str:
    """:func:`contribution_statement`, built once per table shape (it is public)."""
    per_pair = _rows_per_pair(caps, table, unit, groups)
    per_person = (
        exp.select(
            exp.alias_(exp.Sum(this=exp.column("__n")), "__rows"),
            exp.alias_(exp.Count(this=exp.Star()), "__groups"),
            exp.alias_(exp.Max(this=exp.column("__n")), "__top"),
        )
        .from_(
            exp.Subquery(this=per_pair, alias=exp.TableAlias(this=exp.to_identifier("__pp"))),
            copy=False,
        )
        .group_by(exp.column("__u"), copy=False)
    )
    joint = exp.Add(
        this=exp.Mul(
            this=_bin("__rows", JOINT_EDGES),
            expression=exp.Literal.number(JOINT_BINS),
        ),
        expression=_bin("__groups", JOINT_EDGES),
    )
    cells = [_bin(c) for c in ("__rows", "__groups", "__top")] + [joint]
    parts = []
    for k, b in enumerate(cells):
        parts.append(
            exp.select(
                exp.alias_(exp.Literal.number(k), "kind"),
                exp.alias_(b, "bin"),
                exp.alias_(
                    exp.Cast(this=exp.Count(this=exp.Star()), to=exp.DataType.build("BIGINT")), "n"
                ),
            )
            .from_(exp.table_("__person"), copy=False)
            .group_by(exp.Literal.number(1), exp.Literal.number(2), copy=False)
        )
    union: exp.Expression = parts[0]
    for p in parts[1:]:
        union = exp.Union(this=union, expression=p, distinct=False)
    statement = exp.select("*").from_(
        exp.Subquery(this=union, alias=exp.TableAlias(this=exp.to_identifier("__h"))), copy=False
    )
    statement.set(
        "with_",
        exp.With(
            expressions=[
                exp.CTE(this=per_person, alias=exp.TableAlias(this=exp.to_identifier("__person")))
            ]
        ),
    )
    return render(statement, caps.dialect)


@dataclass(frozen=True)
class ContributionHistograms:
    """The released histograms (noisy counts of people per bin) and what they cost.

    Attributes:
        counts: per kind (:data:`KINDS`), the noisy number of people in each bin (the
            joint flattened, :data:`SIZES` cells each).
        releases: per kind, the mechanism's release (its interval gives each bin's error).
        epsilon: the total ε charged (``ε/4`` per histogram).
        groups: the grouping columns the histograms are about.
        charge_id: the ledger's charge.
    """

    counts: dict[str, I64]
    releases: dict[str, Release]
    epsilon: Fraction
    groups: tuple[str, ...]
    charge_id: int

    def people(self) -> float:
        """The noisy number of people (from the ``rows`` histogram, negatives as 0)."""
        return float(np.maximum(self.counts["rows"], 0).sum())


def contribution_histograms(
    engine: Engine,
    binding: TableBinding,
    unit: Column,
    groups: Sequence[str],
    *,
    ledger: Ledger,
    dataset: str,
    analyst: str,
    epsilon: Number,
    source: RandomSource | None = None,
    table_name: str | None = None,
) -> ContributionHistograms:
    """Release the four contribution histograms of ``binding``; spends ``ε`` (pure DP).

    The charge is committed before any noise is drawn or anything computed from the data is
    returned; a refusal (budget) happens before the engine runs. What reaches Python before
    the charge is ``3·BINS + JOINT_BINS²`` counts at most, whatever the data.

    Raises:
        InvalidParameter: ε not positive, no privacy unit column.
        BudgetExceeded: ε does not fit what is left (nothing spent).
    """
    eps = exact(epsilon, "epsilon")
    if eps <= 0:
        raise InvalidParameter("epsilon must be > 0 (the privacy loss of the measurement)")
    loss = Epsilon(epsilon=eps)
    precheck_budget(ledger, dataset, loss, what="measuring the contributions")
    exact_counts = exact_histograms(engine, binding, unit, groups)
    charge = ledger.charge(
        dataset,
        loss,
        analyst=analyst,
        query_key=f"tune/{secrets.token_hex(16)}",  # a measurement is never replayed
        query_text=f"contribution histograms of {table_name or binding.name!r} by {list(groups)}",
        details={"tune": {"groups": list(groups), "bins": BINS, "epsilon": str(eps)}},
    )
    # Only now, after the commit, is anything computed from the data released.
    releases = release_histograms(exact_counts, eps, source)
    counts = {k: np.asarray(r.value, dtype=np.int64) for k, r in releases.items()}
    return ContributionHistograms(counts, releases, eps, tuple(groups), charge.id)


def exact_histograms(
    engine: Engine, binding: TableBinding, unit: Column, groups: Sequence[str]
) -> dict[str, I64]:
    """The exact bin counts by kind (:data:`SIZES` cells each): internal, never released.

    The release path (:func:`contribution_histograms`) and the tests read the engine
    through this one function; its allocations have public sizes.
    """
    sql = contribution_statement(engine, binding, unit, groups)
    engine.check(binding, sql)
    result = engine.run(binding, sql)
    kinds = np.asarray(result.column("kind").to_numpy(zero_copy_only=False), dtype=np.int64)
    bins = np.asarray(result.column("bin").to_numpy(zero_copy_only=False), dtype=np.int64)
    ns = np.asarray(result.column("n").to_numpy(zero_copy_only=False), dtype=np.int64)
    out = {}
    for k, kind in enumerate(KINDS):
        counts = np.zeros(SIZES[kind], dtype=np.int64)
        mine = kinds == k
        np.add.at(counts, bins[mine], ns[mine])
        out[kind] = counts
    return out


def release_histograms(
    exact_counts: dict[str, I64], epsilon: Fraction, source: RandomSource | None = None
) -> dict[str, Release]:
    """Noise each histogram with the discrete Laplace at sensitivity 1 and ``ε/4``: ε-DP.

    One person is in one bin of each histogram, so each changes by at most 1 (L1) between
    neighbours; the four compose to ``ε``. Call only after the charge.
    """
    share = epsilon / len(KINDS)
    return {
        kind: geometric(exact_counts[kind], sensitivity=1, epsilon=share, source=source)
        for kind in KINDS
    }


@dataclass(frozen=True)
class Choice:
    """One candidate policy and its expected error (post-processing of the histograms).

    Attributes:
        max_groups: the candidate ``max_groups``.
        max_rows: the candidate ``max_rows``.
        kept: the expected share of rows the bounds keep.
        bias: expected rows lost per group of the workload (from bounding).
        noise: the noise's standard deviation per group of the workload.
        error: ``√(bias² + noise²)``, the expected root-mean-square error per group.
    """

    max_groups: int
    max_rows: int
    kept: float
    bias: float
    noise: float
    error: float


NOISE_FLOOR = 1 - 0.0005 / BINS
"""Bins whose noisy count is within the noise's half-width at this level count as empty
(so an empty bin survives in a one-axis histogram with probability at most 0.05%: one
spurious bin at the top of the grid stands for up to 2^20 rows a person and would turn the
proposal; measured in ``benchmarks/utility.py``, a 5% floor let that happen in about one
tuning in twenty)."""


def _denoised(histograms: ContributionHistograms, kind: str) -> F64:
    """A one-axis histogram with its noise-only bins set to 0 (post-processing).

    An empty bin is noise alone; at the top of the log grid a bin stands for up to 2^20
    rows a person, so a few noisy people there would dominate every estimate. Counts within
    the noise's half-width at :data:`NOISE_FLOOR` (public: the mechanism's law) are taken
    as 0.
    """
    release = histograms.releases[kind]
    floor = release.half_width(NOISE_FLOOR)
    counts = histograms.counts[kind].astype(np.float64)
    return np.where(counts > floor, counts, 0.0)


def _support_end(people: F64) -> int:
    """One past the largest value a denoised one-axis histogram holds (1 when empty)."""
    held = np.flatnonzero(people)
    if held.size == 0:
        return 1
    top = int(held.max())
    return EDGES[top + 1] if top + 1 < BINS else 1 << 62


def _joint(histograms: ContributionHistograms, rows_end: int, groups_end: int) -> F64:
    """The joint (rows, groups) histogram inside the box the one-axis histograms support.

    Its cells are too many and too thin for a per-cell noise floor (the heavy users it is
    for are few people in many cells). Instead every cell outside the box ``rows <
    rows_end``, ``groups < groups_end`` (where the denoised ``rows`` and ``groups``
    histograms hold people) is taken as 0, and the cells inside keep their noisy counts,
    negatives as 0. Post-processing: free.
    """
    counts = histograms.counts["rows_by_groups"].astype(np.float64)
    cells = np.maximum(counts.reshape(JOINT_BINS, JOINT_BINS), 0.0)
    low = np.array(JOINT_EDGES)
    inside = (low[:, None] < rows_end) & (low[None, :] < groups_end)
    return np.where(inside, cells, 0.0)


def _kept_share(people: F64, cap: int) -> float:
    reps = _REPS
    total = float((people * reps).sum())
    if total <= 0:
        return 1.0
    return float((people * np.minimum(reps, cap)).sum()) / total


def _kept_by_groups(joint: F64, cap: int) -> float:
    """The share of rows ``max_groups = cap`` keeps: ``Σ R·min(1, cap/g) / Σ R``."""
    reps = _JOINT_REPS
    rows = joint * reps[:, None]
    total = float(rows.sum())
    if total <= 0:
        return 1.0
    return float((rows * np.minimum(1.0, cap / reps[None, :])).sum()) / total


def propose(
    histograms: ContributionHistograms,
    *,
    epsilon: Number,
    groups: int = 1,
) -> list[Choice]:
    """Every candidate policy with its expected error for the workload, best first.

    The workload is one ``COUNT(*)`` per group over ``groups`` groups (a public number, e.g.
    the size of the grouping column's domain) answered at ``epsilon``. The model (stated, an
    estimate): ``max_groups = m`` keeps a uniformly random ``m`` of a person's ``g``
    groups, so ``R·min(1, m/g)`` of their ``R`` rows in expectation, summed over the joint
    ``rows_by_groups`` histogram (:func:`_joint`); ``max_rows = r`` then keeps
    ``Σ min(t, r)/Σ t`` of those, from the ``rows_per_group`` histogram (each person's
    fullest group: conservative). Bins stand for their geometric midpoints; one-axis bins
    within the noise's half-width count as empty (:func:`_denoised`). The rows lost are
    spread over the ``groups`` groups; the noise is the discrete Laplace's standard
    deviation at sensitivity ``m·r``. Post-processing: free.

    Raises:
        InvalidParameter: ε not positive, ``groups`` not a positive integer.
    """
    eps = exact(epsilon, "epsilon")
    if eps <= 0:
        raise InvalidParameter("epsilon must be > 0 (the budget of the workload)")
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise InvalidParameter("groups must be a positive integer (groups of the workload)")
    reps = _REPS
    per_rows = _denoised(histograms, "rows")
    per_group = _denoised(histograms, "groups")
    per_top = _denoised(histograms, "rows_per_group")
    rows_total = float((per_rows * reps).sum())
    joint = _joint(histograms, _support_end(per_rows), _support_end(per_group))
    out = []
    for m in CANDIDATES:
        by_groups = _kept_by_groups(joint, m)
        for r in CANDIDATES:
            kept = by_groups * _kept_share(per_top, r)
            bias = rows_total * (1.0 - kept) / groups
            scale = m * r / float(eps)
            noise = math.sqrt(2.0) * scale  # the discrete Laplace's sd is ≤ √2·scale
            out.append(Choice(m, r, kept, bias, noise, math.hypot(bias, noise)))
    out.sort(key=lambda c: (c.error, c.max_groups * c.max_rows))
    return out


@dataclass(frozen=True)
class UtilityAnalysis:
    """NON-PRIVATE: the exact share of rows each candidate policy keeps (curators only).

    Computed from the data without noise: it must never be shown to an analyst, charged or
    cached as a release. A curator holds the data already; this tells them, exactly, what
    a policy would cut.

    Attributes:
        rows: the table's rows with a privacy unit.
        kept: ``kept[i, j]``: the expected rows kept by ``max_groups = candidates[i]`` and
            ``max_rows = candidates[j]`` (each person keeps a uniformly random subset of
            ``max_groups`` groups, as the bounding does, so a person with ``g`` groups keeps
            each with probability ``min(1, max_groups/g)``).
        candidates: the bounds tried, on both axes.
    """

    rows: int
    kept: F64
    candidates: tuple[int, ...]

    non_private: bool = True

    def share(self, max_groups: int, max_rows: int) -> float:
        """The expected share of rows kept by one candidate."""
        i, j = self.candidates.index(max_groups), self.candidates.index(max_rows)
        return float(self.kept[i, j]) / self.rows if self.rows else 1.0


def utility_analysis(
    engine: Engine,
    binding: TableBinding,
    unit: Column,
    groups: Sequence[str],
    candidates: Sequence[int] = CANDIDATES,
) -> UtilityAnalysis:
    """NON-PRIVATE exact analysis: expected rows kept by each ``(max_groups, max_rows)``.

    One statement in the engine (per person and group ``min(n, r)`` for every candidate
    ``r``, then per person the share of groups kept for every candidate ``m``); only the
    ``len(candidates)²`` totals come back. No privacy: it reads the data exactly, so it is
    for the curator alone, never charged and never stored as an answer.

    Raises:
        InvalidParameter: a candidate that is not a positive integer.
    """
    cands = tuple(candidates)
    if not cands or any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in cands):
        raise InvalidParameter("candidates must be positive integers")
    caps = engine.capabilities
    per_pair = _rows_per_pair(caps, binding.name, unit, groups)

    def least(r: int) -> exp.Expression:
        return exp.Least(this=exp.column("__n"), expressions=[exp.Literal.number(r)])

    per_person = exp.select(
        exp.alias_(exp.Count(this=exp.Star()), "__g"),
        exp.alias_(exp.Sum(this=exp.column("__n")), "__rows"),
        *(exp.alias_(exp.Sum(this=least(r)), f"__s{j}") for j, r in enumerate(cands)),
    ).from_(exp.Subquery(this=per_pair, alias=exp.TableAlias(this=exp.to_identifier("__pp"))))
    per_person = per_person.group_by(exp.column("__u"))
    double = exp.DataType.build("DOUBLE")
    totals: list[exp.Expr] = [
        exp.alias_(exp.Cast(this=exp.Sum(this=exp.column("__rows")), to=double), "rows")
    ]
    for i, m in enumerate(cands):
        share = exp.Least(
            this=exp.Literal.number(1),
            expressions=[
                exp.Div(
                    this=exp.Cast(this=exp.Literal.number(m), to=double),
                    expression=exp.column("__g"),
                )
            ],
        )
        for j in range(len(cands)):
            rows_kept = exp.Mul(this=share.copy(), expression=exp.column(f"__s{j}"))
            totals.append(
                exp.alias_(exp.Cast(this=exp.Sum(this=rows_kept), to=double), f"k{i}_{j}")
            )
    statement = exp.select(*totals).from_(
        exp.Subquery(this=per_person, alias=exp.TableAlias(this=exp.to_identifier("__per")))
    )
    sql = render(statement, caps.dialect)
    engine.check(binding, sql)
    result = engine.run(binding, sql)
    row = {name: result.column(name)[0].as_py() for name in result.column_names}
    kept = np.array(
        [[row[f"k{i}_{j}"] or 0.0 for j in range(len(cands))] for i in range(len(cands))],
        dtype=np.float64,
    )
    return UtilityAnalysis(int(row["rows"] or 0), kept, cands)


@dataclass(frozen=True)
class TuneReport:
    """What :meth:`deniable.curator.session.Session.tune` measured and proposes.

    Attributes:
        histograms: the released contribution histograms (charged).
        choices: every candidate policy with its expected error, best first (free).
        workload_epsilon: the ε the workload's error was computed at.
        groups: the workload's number of groups.
        clamps: proposed clamping ranges ``(low, high)`` by column, each the least expected
            error of the clamp workload (empty when no ``clamps`` were asked).
        clamp_choices: by column, every candidate range with its expected error, best first
            (:func:`deniable.curator.clamps.choose_clamps`; post-processing).
        clamp_workload: the aggregate the ranges were chosen for ("sum" or "avg").
        clamp_charge_id: the ledger's charge of the value histograms (None: no clamps).
        clamp_epsilon: the ε that charge spent (0: no clamps).
    """

    histograms: ContributionHistograms
    choices: tuple[Choice, ...]
    workload_epsilon: Fraction
    groups: int
    clamps: dict[str, tuple[float, float]] = field(default_factory=dict)
    clamp_choices: dict[str, tuple[ClampChoice, ...]] = field(default_factory=dict)
    clamp_workload: str = "sum"
    clamp_charge_id: int | None = None
    clamp_epsilon: Fraction = Fraction(0)

    @property
    def best(self) -> Choice:
        """The candidate with the least expected error."""
        return self.choices[0]

    def to_pandas(self, top: int = 10) -> pd.DataFrame:
        """The ``top`` candidates as a table (expected error per group, in rows)."""
        return pd.DataFrame(
            [
                {
                    "max_groups": c.max_groups,
                    "max_rows": c.max_rows,
                    "rows kept": round(c.kept, 4),
                    "bias": round(c.bias, 2),
                    "noise sd": round(c.noise, 2),
                    "expected error": round(c.error, 2),
                }
                for c in self.choices[:top]
            ]
        )

    def clamp_table(self, column: str, top: int = 10) -> pd.DataFrame:
        """The trade-off of ``column``'s clamping range: for each upper end, its best range.

        The ``top`` rows around the chosen one (expected error per group, in the workload's
        units: the column's for a SUM or an AVG).

        Raises:
            InvalidParameter: no clamps were tuned for ``column``.
        """
        curve = error_curve(self._clamp_choices(column))
        best = self.clamp_choices[column][0]
        at = next(i for i, c in enumerate(curve) if c.high == best.high)
        start = max(0, min(at - top // 2, len(curve) - top))
        return pd.DataFrame(
            [
                {
                    "low": c.low,
                    "high": c.high,
                    "bias": float(f"{c.bias:.4g}"),
                    "noise sd": float(f"{c.noise:.4g}"),
                    "expected error": float(f"{c.error:.4g}"),
                    "chosen": c == best,
                }
                for c in curve[start : start + top]
            ]
        )

    def _clamp_choices(self, column: str) -> tuple[ClampChoice, ...]:
        if column not in self.clamp_choices:
            tuned = ", ".join(sorted(self.clamp_choices)) or "none"
            raise InvalidParameter(
                f"no clamps were tuned for {column!r} (tuned: {tuned}); pass "
                "clamps={column: (low, high)} to tune()"
            )
        return self.clamp_choices[column]

    def plot_clamps(self, column: str, ax: Axes | None = None) -> Figure:
        """Expected error per group against the clamping range's upper end (best marked).

        Raises:
            InvalidParameter: no clamps were tuned for ``column``.
        """
        import matplotlib.pyplot as plt

        curve = error_curve(self._clamp_choices(column))
        best = self.clamp_choices[column][0]
        if ax is None:
            _, ax = plt.subplots(figsize=(6.4, 4))
        fig = ax.get_figure(root=True)
        assert fig is not None
        shown = [c for c in curve if c.high > 0] or curve
        ax.plot([c.high for c in shown], [max(c.error, 1e-12) for c in shown], marker="o", ms=2)
        ax.scatter([best.high], [max(best.error, 1e-12)], color="C3", zorder=3)
        if all(c.high > 0 for c in shown):
            ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(f"upper end of the clamping range of {column} (best lower end each)")
        ax.set_ylabel(f"expected error per group ({self.clamp_workload.upper()})")
        ax.set_title(
            f"best: {column} in [{best.low:.4g}, {best.high:.4g}] "
            f"(workload ε = {float(self.workload_epsilon):g}, {self.groups} groups)"
        )
        return fig

    def plot(self, ax: Axes | None = None) -> Figure:
        """Expected error per group against ``max_groups × max_rows`` (best marked)."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(6.4, 4))
        fig = ax.get_figure(root=True)
        assert fig is not None
        per_product: dict[int, float] = {}
        for c in self.choices:
            product = c.max_groups * c.max_rows
            per_product[product] = min(per_product.get(product, math.inf), c.error)
        xs = sorted(per_product)
        ax.plot(xs, [per_product[x] for x in xs], marker="o", ms=3)
        best = self.best
        ax.scatter([best.max_groups * best.max_rows], [best.error], color="C3", zorder=3)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("max_groups × max_rows (most rows one person adds)")
        ax.set_ylabel("expected error per group (rows)")
        ax.set_title(
            f"best: max_groups = {best.max_groups}, max_rows = {best.max_rows} "
            f"(workload ε = {float(self.workload_epsilon):g}, {self.groups} groups)"
        )
        return fig
