"""Clamping ranges chosen by the expected error of a workload, from DP value histograms.

A ``SUM`` or ``AVG`` over a numeric column needs a clamping range ``[a, b]``. Clamping
tightly biases the answer (the values outside are moved to the ends); clamping loosely adds
noise (a sum's sensitivity grows with ``max(|a|, |b|)``, a centred sum's with ``b − a``).
This module releases, with differential privacy and charged to the dataset's ledger, a
histogram of each column's values on a public grid over the curator's *search range*, and
picks the range whose expected error (bias and noise together) for the stated workload is
least — the bias-variance trade-off of Amin, Kulesza, Muñoz Medina & Vassilvitskii
(ICML 2019), applied to values rather than to contributions.

What is released, per column ``v`` with search range ``[lo, hi]``: the number of rows in
each bin of :func:`value_edges` (a geometric grid, :data:`STEPS` bins an octave over
:data:`OCTAVES` octaves on each side of the *origin*: 0 when the range holds it, else the
range's end nearest 0; the outermost bins also hold the values beyond the range). Each
person adds at most ``k`` rows (a uniformly random ``k`` of theirs, by a keyed hash with a
fresh secret key; ``k = max_groups·max_rows`` of the policy in force), so a histogram
changes by at most ``k`` in L1 between neighbours: each is released with the discrete
Laplace (geometric) mechanism at sensitivity ``k`` and its share of ``ε``, and the columns
compose to ``ε`` (one charge). The statements compute the counts in the engine and return
one row a bin at most (a public size); rows never leave the engine. The choice
(:func:`choose_clamps`) is post-processing: free.

A heavy tail's last rows are too few a bin to show above the noise, yet they are what a tight
clamp costs: the choice therefore reads the histogram through :meth:`ValueHistogram.modelled`,
which continues each tail past the bins that stand out with a log-quadratic curve fitted to the
noisy counts from the tail's shoulder to the grid's end (:func:`fit_tail`; post-processing).
"""

from __future__ import annotations

import functools
import math
import secrets
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import numpy as np
import numpy.typing as npt
from sqlglot import exp

from deniable.accounting.loss import Epsilon, Number, exact
from deniable.engines.base import Capabilities, Engine, TableBinding
from deniable.errors import InvalidParameter, UtilityWarning
from deniable.ledger import Ledger
from deniable.mechanisms import Release, geometric
from deniable.noise.source import RandomSource
from deniable.query.catalog import Column
from deniable.query.execute import precheck_budget
from deniable.query.rewrite.compile import (
    SOURCE,
    canonical_unit_expression,
    keyed_hash,
    render,
)
from deniable.sqlnames import identifier

OCTAVES = 30
"""Octaves of the value grid on each side of the origin (down to ``2^-30`` of the span)."""

STEPS = 4
"""Bins an octave: adjacent edges differ by ``2^(1/4)`` (19%) in distance from the origin."""

NOISE_FLOOR = 0.9995
"""A bin whose noisy count is within the noise's half-width at this level counts as empty
(post-processing), so that noise alone in the far bins does not move the choice."""

TAIL_WINDOWS = (1, 2, 4, 8, 16, 32)
"""The widths of the windows that extend a histogram's support into its tails."""

TAIL_Z = 4.0
"""A window of ``w`` bins extends the support when its noisy total exceeds this many standard
deviations of ``w`` bins' noise (a noise-only window does so with probability about 3·10⁻⁵
for wide windows, where the sum is nearly normal; a single bin's discrete Laplace at 4
standard deviations: e^(−4√2) ≈ 0.35%, so the width-1 window must also be part of a run)."""

TAIL_SHOULDER = 4.0
"""A tail is modelled from its *shoulder*: the outermost bin whose noisy count is above this
many times the noise's half-width at :data:`NOISE_FLOOR` (well measured: a few per cent
relative noise at most). A histogram without such a bin gets no modelled tail."""

TAIL_MIN_ROWS = 0.5
"""A modelled tail ends where fewer than this many rows are expected from there outward (the
data's largest value lies about where one row is expected beyond)."""

TAIL_RATIOS: npt.NDArray[np.float64] = np.linspace(0.0, 0.995, 100)
"""The candidate decay ``r`` a bin of a modelled tail (a Pareto tail of index ``α`` has
``r = 2^(−α/4)`` on the grid; r = 0: no tail)."""

TAIL_CURVES: npt.NDArray[np.float64] = np.concatenate([[1.0], 1 - np.geomspace(1e-3, 0.5, 24)])
"""The candidate curvature ``q`` of a modelled tail's logarithm (1: a power law; a lognormal's
counts on the grid are log-quadratic, ``q < 1``; lighter tails fall faster still)."""

Workload = Literal["sum", "avg"]
"""The aggregate a clamping range is chosen for: ``SUM(v)`` or ``AVG(v)`` per group."""

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


def _origin(low: float, high: float) -> float:
    if low <= 0 <= high:
        return 0.0
    return low if low > 0 else high


@functools.lru_cache(maxsize=256)
def value_edges(low: float, high: float) -> tuple[float, ...]:
    """The grid's edges over ``[low, high]``, ascending, ``low`` first and ``high`` last.

    Public: a function of the search range only. Bin ``i`` holds ``edges[i] ≤ v <
    edges[i+1]``; the first bin also holds every value below ``edges[1]`` and the last every
    value from ``edges[-2]`` up (beyond the range too).

    Raises:
        InvalidParameter: the range is not finite with ``low < high``.
    """
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise InvalidParameter(
            "a clamp search range must be two finite numbers (low, high) with low < high"
        )
    o = _origin(low, high)
    points = {float(low), float(high), o}
    for j in range(1, STEPS * OCTAVES + 1):
        f = 2.0 ** (-j / STEPS)
        if high > o:
            points.add(o + (high - o) * f)
        if low < o:
            points.add(o - (o - low) * f)
    return tuple(sorted(p for p in points if low <= p <= high))


def representatives(edges: Sequence[float]) -> F64:
    """Each bin's representative value: the middle of its two edges."""
    e = np.asarray(edges, dtype=np.float64)
    return (e[:-1] + e[1:]) / 2


def _bin(value: exp.Expression, edges: Sequence[float]) -> exp.Expression:
    """The bin of ``value`` (a DOUBLE): a balanced tree of comparisons, the same in every engine."""

    def literal(x: float) -> exp.Expression:
        return exp.Cast(this=exp.Literal.number(repr(x)), to=exp.DataType.build("DOUBLE"))

    def tree(lo: int, hi: int) -> exp.Expression:  # bins lo..hi-1
        if hi - lo == 1:
            return exp.Literal.number(lo)
        mid = (lo + hi) // 2
        test = exp.GTE(this=value.copy(), expression=literal(edges[mid]))
        return exp.Case(ifs=[exp.If(this=test, true=tree(mid, hi))], default=tree(lo, mid))

    return tree(0, len(edges) - 1)


def value_statement(
    caps: Capabilities,
    table: str,
    unit: Column | None,
    column: str,
    edges: Sequence[float],
    *,
    rows: int,
    key: int,
) -> str:
    """The statement counting rows per bin, at most ``rows`` random rows a person.

    Rows without a unit (no one's) and NULL values (no sum counts them) are left out; with
    ``unit=None`` (a table protecting rows) every row is counted. Its result has one row
    ``(bin, n)`` a non-empty bin: at most ``len(edges) − 1`` rows.
    """
    src = exp.to_identifier(SOURCE)
    value = exp.Cast(
        this=exp.Column(this=identifier(column), table=src.copy()),
        to=exp.DataType.build("DOUBLE"),
    )
    if unit is None:
        counted = (
            exp.select(
                exp.alias_(_bin(value, edges), "bin"),
                exp.alias_(
                    exp.Cast(this=exp.Count(this=exp.Star()), to=exp.DataType.build("BIGINT")),
                    "n",
                ),
            )
            .from_(
                exp.Table(this=identifier(table), alias=exp.TableAlias(this=src.copy())),
                copy=False,
            )
            .where(
                exp.Is(
                    this=exp.Column(this=identifier(column), table=src.copy()),
                    expression=exp.Not(this=exp.Null()),
                ),
                copy=False,
            )
            .group_by(exp.Literal.number(1), copy=False)
        )
        return render(counted, caps.dialect)
    unit_ref = exp.Column(this=identifier(unit.name), table=src.copy())
    base = (
        exp.select(
            exp.alias_(canonical_unit_expression(unit, caps), "__u"),
            exp.alias_(value, "__v"),
        )
        .from_(exp.Table(this=identifier(table), alias=exp.TableAlias(this=src.copy())), copy=False)
        .where(
            exp.and_(
                exp.Is(this=unit_ref, expression=exp.Not(this=exp.Null())),
                exp.Is(
                    this=exp.Column(this=identifier(column), table=src.copy()),
                    expression=exp.Not(this=exp.Null()),
                ),
            ),
            copy=False,
        )
    )
    order = exp.Window(
        this=exp.RowNumber(),
        partition_by=[exp.column("__u")],
        order=exp.Order(
            expressions=[
                exp.Ordered(this=keyed_hash(caps, key, ["__u", "__v"])),
                exp.Ordered(this=exp.column("__v")),
            ]
        ),
    )
    ranked = exp.select(exp.column("__v"), exp.alias_(order, "__i")).from_(
        exp.Subquery(this=base, alias=exp.TableAlias(this=exp.to_identifier("__b"))), copy=False
    )
    statement = (
        exp.select(
            exp.alias_(_bin(exp.column("__v"), edges), "bin"),
            exp.alias_(
                exp.Cast(this=exp.Count(this=exp.Star()), to=exp.DataType.build("BIGINT")), "n"
            ),
        )
        .from_(
            exp.Subquery(this=ranked, alias=exp.TableAlias(this=exp.to_identifier("__r"))),
            copy=False,
        )
        .where(
            exp.and_(
                exp.LTE(this=exp.column("__i"), expression=exp.Literal.number(rows)),
                exp.GT(this=exp.column("__i"), expression=exp.Literal.number(0)),
            ),
            copy=False,
        )
        .group_by(exp.Literal.number(1), copy=False)
    )
    return render(statement, caps.dialect)


def exact_value_counts(
    engine: Engine,
    binding: TableBinding,
    unit: Column | None,
    column: str,
    edges: Sequence[float],
    *,
    rows: int,
    key: int,
) -> I64:
    """The exact rows per bin (internal, never released); its size is public."""
    sql = value_statement(
        engine.capabilities, binding.name, unit, column, edges, rows=rows, key=key
    )
    engine.check(binding, sql)
    result = engine.run(binding, sql)
    bins = np.asarray(result.column("bin").to_numpy(zero_copy_only=False), dtype=np.int64)
    ns = np.asarray(result.column("n").to_numpy(zero_copy_only=False), dtype=np.int64)
    counts = np.zeros(len(edges) - 1, dtype=np.int64)
    np.add.at(counts, bins, ns)
    return counts


@dataclass(frozen=True)
class ValueHistogram:
    """One column's released histogram (noisy rows per bin of :attr:`edges`).

    Attributes:
        column: the column.
        search: the curator's search range ``(low, high)`` (public).
        edges: the grid (:func:`value_edges`).
        counts: the noisy number of rows per bin.
        release: the mechanism's release (its law gives each bin's error).
        rows_per_person: ``k``, the most rows one person adds (the sensitivity).
    """

    column: str
    search: tuple[float, float]
    edges: tuple[float, ...]
    counts: I64
    release: Release
    rows_per_person: int

    def denoised(self) -> F64:
        """Counts with noise-only bins set to 0 (post-processing).

        A bin alone counts when its noisy count is above the noise's half-width at
        :data:`NOISE_FLOOR`. A distribution's tail is thin but contiguous, so from the
        outermost such bins the support is then extended outward by windows of ``w = 1, 2,
        4, …, 32`` adjacent bins: a window counts when its total is above :data:`TAIL_Z`
        standard deviations of the noise of ``w`` bins (a thin tail's rows, spread over
        several bins, add up; noise does not). Counts outside the support are 0; inside,
        negatives are 0.
        """
        c = self.counts.astype(np.float64)
        floor = self.release.half_width(NOISE_FLOOR)
        held = np.flatnonzero(c > floor)
        out = np.zeros_like(c)
        if held.size == 0:
            return out
        noise = self.release.noise
        assert noise is not None  # the geometric mechanism always has its noise law
        sd = noise.std
        first, last = int(held.min()), int(held.max())

        def extend(start: int, step: int) -> int:
            """The last index of the support going from ``start`` in direction ``step``."""
            at = start
            while 0 <= at + step < c.size:
                for w in TAIL_WINDOWS:
                    lo, hi = sorted((at + step, at + step * w))
                    lo, hi = max(lo, 0), min(hi, c.size - 1)
                    width = hi - lo + 1
                    if c[lo : hi + 1].sum() > TAIL_Z * sd * math.sqrt(width):
                        at = hi if step > 0 else lo
                        break
                    if width < w:
                        return at
                else:
                    return at
            return at

        first, last = extend(first, -1), extend(last, +1)
        out[first : last + 1] = np.maximum(c[first : last + 1], 0.0)
        return out

    def modelled(self) -> F64:
        """:meth:`denoised` counts with each tail continued past the support (post-processing).

        Each side's *shoulder* is its outermost bin above :data:`TAIL_SHOULDER` times the
        noise's half-width; :func:`fit_tail` fits a decaying curve to the noisy counts from
        the shoulder to the grid's end (the bins past the support included: their counts,
        noise around the truth, pull the curve down as much as up), and the curve's expected
        counts fill the bins past the support, up to where fewer than :data:`TAIL_MIN_ROWS`
        rows remain beyond. Rows that are too few a bin to stand out of the noise but many
        together (a heavy tail) are so counted; a tail that ends (bounded values) fits a curve
        that falls to nothing at once. Without a shoulder (too few rows for the noise) the
        counts are :meth:`denoised`'s.
        """
        n = self.denoised()
        held = np.flatnonzero(n > 0)
        solid = np.flatnonzero(n > TAIL_SHOULDER * self.release.half_width(NOISE_FLOOR))
        if solid.size == 0:
            return n
        c = self.counts.astype(np.float64)
        first, last = int(held.min()), int(held.max())
        out = n.copy()
        up = np.arange(int(solid.max()), c.size)  # from the upper shoulder upwards
        down = np.arange(int(solid.min()), -1, -1)  # from the lower shoulder downwards
        for idx, past_support in ((up, up > last), (down, down < first)):
            past = int(np.count_nonzero(~past_support))  # the first bin past the support
            if past >= idx.size:
                continue
            model = fit_tail(c[idx])[past:]
            remaining = np.cumsum(model[::-1])[::-1]  # rows expected from each bin outward
            out[idx[past:]] += np.where(remaining >= TAIL_MIN_ROWS, model, 0.0)
        return out


def _weighted_medians(values: F64, weights: F64) -> F64:
    """Each row's weighted median (the least-absolute-deviation multiplier)."""
    order = np.argsort(values, axis=1)
    v = np.take_along_axis(values, order, 1)
    cw = np.cumsum(np.take_along_axis(weights, order, 1), axis=1)
    at = np.minimum((cw < cw[:, -1:] / 2).sum(axis=1), v.shape[1] - 1)
    return np.asarray(v[np.arange(v.shape[0]), at], dtype=np.float64)


def fit_tail(counts: npt.ArrayLike) -> F64:
    """The decaying curve closest to ``counts`` in absolute deviation (post-processing).

    ``counts[j]`` is the noisy count ``j`` bins outward from a tail's shoulder. The curve is
    ``m_j = A·r^j·q^(j(j−1)/2)``: ``r`` from :data:`TAIL_RATIOS`, ``q`` from
    :data:`TAIL_CURVES` (a grid search) and ``A ≥ 0`` exact for each (a weighted median);
    least absolute deviations is the likelihood's maximum under the discrete Laplace noise
    (ties go to the smaller ``r``). Returns ``m`` (expected counts, as floats).
    """
    y = np.asarray(counts, dtype=np.float64)
    j = np.arange(y.size, dtype=np.float64)
    r, q = np.meshgrid(TAIL_RATIOS, TAIL_CURVES, indexing="ij")
    log_r = np.log(np.maximum(r.ravel(), 1e-300))  # r = 0: e^-690 a bin, nothing past j = 0
    log_w = j[None, :] * log_r[:, None] + (j * (j - 1) / 2)[None, :] * np.log(q.ravel())[:, None]
    w = np.exp(log_w)
    used = w > 1e-12
    ratio = np.where(used, y[None, :] / np.where(used, w, 1.0), 0.0)
    a = np.maximum(_weighted_medians(ratio, np.where(used, w, 0.0)), 0.0)
    loss = np.abs(y[None, :] - a[:, None] * w).sum(axis=1)
    best = int(np.argmin(loss))
    return np.asarray(a[best] * w[best], dtype=np.float64)


def release_value_counts(
    counts: I64, rows_per_person: int, epsilon: Fraction, source: RandomSource | None = None
) -> Release:
    """Noise one value histogram: the discrete Laplace at sensitivity ``rows_per_person``; ε-DP.

    A person adds at most ``rows_per_person`` rows, each to one bin: the histogram changes by
    at most that much in L1 between neighbours. Call only after the charge.
    """
    return geometric(counts, sensitivity=rows_per_person, epsilon=epsilon, source=source)


def value_histograms(
    engine: Engine,
    binding: TableBinding,
    unit: Column,
    search: Mapping[str, tuple[float, float]],
    *,
    rows_per_person: int,
    ledger: Ledger,
    dataset: str,
    analyst: str,
    epsilon: Number,
    source: RandomSource | None = None,
    table_name: str | None = None,
) -> tuple[dict[str, ValueHistogram], int]:
    """Release a value histogram of each column in ``search``; spends ``ε`` (pure DP), one charge.

    Each column gets ``ε / len(search)``; each histogram has L1 sensitivity
    ``rows_per_person`` (a person's rows beyond that many are left out at random). The
    budget is checked before the engine runs; the charge is committed before any noise is
    drawn; what reaches Python before it is one count a bin of a public grid.

    Returns:
        The histograms by column and the ledger's charge id.

    Raises:
        InvalidParameter: ε not positive, an empty or malformed search range,
            ``rows_per_person < 1``.
        BudgetExceeded: ε does not fit what is left (nothing spent).
    """
    eps = exact(epsilon, "epsilon")
    if eps <= 0:
        raise InvalidParameter("epsilon must be > 0 (the privacy loss of the measurement)")
    if not search:
        raise InvalidParameter("name at least one column and its search range to tune clamps")
    if rows_per_person < 1:
        raise InvalidParameter("rows_per_person must be at least 1")
    grids = {c: value_edges(float(lo), float(hi)) for c, (lo, hi) in search.items()}
    loss = Epsilon(epsilon=eps)
    precheck_budget(ledger, dataset, loss, what="measuring the values")
    key = secrets.randbelow(2**63)
    exact_counts = {
        c: exact_value_counts(engine, binding, unit, c, grid, rows=rows_per_person, key=key)
        for c, grid in grids.items()
    }
    charge = ledger.charge(
        dataset,
        loss,
        analyst=analyst,
        query_key=f"tune/{secrets.token_hex(16)}",  # a measurement is never replayed
        query_text=f"value histograms of {table_name or binding.name!r}: {sorted(search)}",
        details={
            "tune": {
                "values": {c: [float(lo), float(hi)] for c, (lo, hi) in search.items()},
                "rows_per_person": rows_per_person,
                "epsilon": str(eps),
            }
        },
    )
    # Only now, after the commit, is anything computed from the data released.
    share = eps / len(grids)
    out = {}
    for c, grid in grids.items():
        release = release_value_counts(exact_counts[c], rows_per_person, share, source)
        lo, hi = search[c]
        out[c] = ValueHistogram(
            c,
            (float(lo), float(hi)),
            grid,
            np.asarray(release.value, dtype=np.int64),
            release,
            rows_per_person,
        )
    return out, charge.id


@dataclass(frozen=True)
class ClampChoice:
    """One candidate clamping range and its expected error (post-processing).

    Attributes:
        low: the range's lower end.
        high: its upper end.
        bias: the expected error from clamping, per group, in the workload's units.
        noise: the noise's standard deviation per group, in the workload's units.
        error: ``√(bias² + noise²)``.
    """

    low: float
    high: float
    bias: float
    noise: float
    error: float


def choose_clamps(
    histogram: ValueHistogram,
    *,
    workload: Workload,
    epsilon: Number,
    max_groups: int,
    max_rows: int,
    groups: int = 1,
) -> list[ClampChoice]:
    """Every clamping range on the grid's edges with its expected error, best first.

    The workload is one ``SUM(v)`` (or ``AVG(v)``) per group over ``groups`` groups,
    answered at ``epsilon`` under the bounds ``max_groups``, ``max_rows``. The model
    (stated, an estimate from the released histogram: :meth:`ValueHistogram.modelled`,
    bins at their middles, noise-only bins empty, tails past them continued by a fitted
    curve):

    * bias of the total: ``Σ n_b·|clamp(x_b, a, b) − x_b|``, spread evenly over the groups
      (each end's shift in full: the ends cancel in a group's total only when every group
      has the same spread of values, which nothing tells us);
    * ``SUM``: the discrete Laplace's deviation at sensitivity ``m·r·max(|a|, |b|)``;
    * ``AVG`` (a centred sum and a count at ``ε/2`` each, as the query planner does): the
      bias of the mean ``bias/N`` and the noise of ``centre + S/n`` per group, with
      ``n = N/groups`` rows a group, ``S``'s deviation at sensitivity
      ``m·r·(b − a)/2`` and the count's at ``m·r``, scaled by how far the mean is from the
      centre.

    Ties go to the narrower range. Post-processing: free.

    A histogram with no bin above its noise (too few people for the ε it was released at)
    says nothing about where the values lie: every range would look free of bias and the
    narrowest would win. Then the whole search range comes first (no clamping beyond what
    was declared) and a :class:`~deniable.errors.UtilityWarning` says why.

    Raises:
        InvalidParameter: a workload other than "sum"/"avg", ε not positive, bounds or
            ``groups`` not positive integers.
    """
    if workload not in ("sum", "avg"):
        raise InvalidParameter('the clamp workload must be "sum" or "avg"')
    eps = float(exact(epsilon, "epsilon"))
    if eps <= 0:
        raise InvalidParameter("epsilon must be > 0 (the budget of the workload)")
    for name, v in (("max_groups", max_groups), ("max_rows", max_rows), ("groups", groups)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InvalidParameter(f"{name} must be a positive integer")
    edges = np.asarray(histogram.edges, dtype=np.float64)
    reps = representatives(histogram.edges)
    n = histogram.modelled()
    # below[i]: rows (and their total) of the bins wholly below edge i; above[j]: from bin j up.
    below_n = np.concatenate([[0.0], np.cumsum(n)])
    below_s = np.concatenate([[0.0], np.cumsum(n * reps)])
    above_n = below_n[-1] - below_n
    above_s = below_s[-1] - below_s
    a = edges[:, None]
    b = edges[None, :]
    # Each end's shift counts in full: the two ends' shifts cancel in a total only when every
    # group has the same spread of values, which nothing tells us.
    raised = a * below_n[:, None] - below_s[:, None]
    lowered = above_s[None, :] - b * above_n[None, :]
    total_bias = np.maximum(raised, 0.0) + np.maximum(lowered, 0.0)
    rows_total = float(below_n[-1])
    k = max_groups * max_rows
    sd = math.sqrt(2.0) * k / eps  # the discrete Laplace's sd at scale k/ε is ≤ √2·k/ε
    if workload == "sum":
        bias = total_bias / groups
        noise = sd * np.maximum(np.abs(a), np.abs(b))
    else:
        per_group = max(rows_total / groups, 1.0)
        bias = total_bias / max(rows_total, 1.0)
        clipped_sum = float((n * reps).sum()) + raised - lowered
        mean = clipped_sum / max(rows_total, 1.0)
        centre = (a + b) / 2
        sum_sd = 2 * sd * (b - a) / 2  # at ε/2: twice the deviation
        count_sd = 2 * sd
        noise = np.hypot(sum_sd, np.abs(mean - centre) * count_sd) / per_group
    error = np.hypot(bias, noise)
    valid = a < b
    ii, jj = np.nonzero(valid)
    width = edges[jj] - edges[ii]
    errs = error[ii, jj]
    order = np.lexsort((width, errs))
    if not np.any(n > 0):
        warnings.warn(
            f"the value histogram of {histogram.column!r} shows no bin above its noise: it "
            "cannot tell where the values lie, so the whole search range is proposed; tune "
            "with a larger epsilon (or on more people) to choose a narrower one",
            UtilityWarning,
            stacklevel=2,
        )
        whole = int(np.flatnonzero((ii == 0) & (jj == edges.size - 1))[0])
        order = np.concatenate([[whole], order[order != whole]])
    return [
        ClampChoice(
            float(edges[ii[t]]),
            float(edges[jj[t]]),
            float(bias[ii[t], jj[t]]),
            float(noise[ii[t], jj[t]]),
            float(errs[t]),
        )
        for t in order
    ]


def error_curve(choices: Sequence[ClampChoice]) -> list[ClampChoice]:
    """For each upper end, its best candidate (the trade-off a table or a plot shows)."""
    best: dict[float, ClampChoice] = {}
    for c in choices:
        if c.high not in best or c.error < best[c.high].error:
            best[c.high] = c
    return [best[h] for h in sorted(best)]


ALL_ROWS = 2**62
"""A per-person row limit no table reaches: the exact (non-private) analysis counts every row."""

SHARES = (0.1, 0.05, 0.01, 0.001, 0.0001, 0.0)
"""The shares of values clamped at which :meth:`ClampAnalysis.ranges` reports a range."""


@dataclass(frozen=True)
class ClampAnalysis:
    """NON-PRIVATE: the exact number of values of a column in each bin of the value grid.

    For the curator, who holds the data: computed without noise, never charged, never
    stored as an answer; do not show it to analysts.

    Attributes:
        column: the column.
        edges: the grid (:func:`value_edges` of the search range).
        counts: the exact number of non-NULL values in each bin (all rows).
    """

    column: str
    edges: tuple[float, ...]
    counts: I64
    non_private: bool = True

    @property
    def values(self) -> int:
        """Non-NULL values of the column."""
        return int(self.counts.sum())

    def clamped_share(self, low: float, high: float) -> float:
        """The exact share of values in the bins below ``low`` or from ``high`` up.

        Exact for ranges on the grid's edges (values equal to ``high`` count as clamped).
        """
        e = np.asarray(self.edges)
        below = self.counts[: max(int(np.searchsorted(e, low, side="right")) - 1, 0)].sum()
        above = self.counts[int(np.searchsorted(e, high, side="left")) :].sum()
        return float(below + above) / self.values if self.values else 0.0

    def ranges(self) -> list[tuple[float, float, float]]:
        """For each share in :data:`SHARES`, the narrowest range clamping at most that share.

        Returns ``(share, low, high)`` triples: the range of grid edges holding all but
        ``share`` of the values (half of it allowed at each end).
        """
        e = np.asarray(self.edges)
        total = max(self.values, 1)
        below = np.concatenate([[0], np.cumsum(self.counts)])  # values below edge i
        above = total - below  # values at or above edge i
        out = []
        for share in SHARES:
            allowed = share / 2 * total
            low = int(np.flatnonzero(below <= allowed).max())
            high = int(np.flatnonzero(above <= allowed).min())  # the last edge always fits
            out.append((share, float(e[low]), float(e[high])))
        return out


def clamp_analysis(
    engine: Engine,
    binding: TableBinding,
    unit: Column | None,
    column: str,
    low: float,
    high: float,
) -> ClampAnalysis:
    """NON-PRIVATE exact analysis of ``column`` on the grid over ``[low, high]``.

    One statement in the engine; only the bins' counts come back. It reads the data
    exactly: for the curator alone, never charged, never stored as an answer.

    Raises:
        InvalidParameter: a malformed range.
    """
    edges = value_edges(float(low), float(high))
    counts = exact_value_counts(engine, binding, unit, column, edges, rows=ALL_ROWS, key=0)
    return ClampAnalysis(column, edges, counts)
