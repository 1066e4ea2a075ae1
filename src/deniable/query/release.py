"""Stage 5: turn the engine's exact bounded aggregates into the noisy answer.

Runs only after the ledger committed the plan's charge. In order: release group keys (the
whole public domain, empty groups included, or DP partition selection on the number of
privacy units of each partition), noise every measure with the mechanism and parameters of
its plan (whose composition the planner checked against the charge, once, before the
charge), then let each aggregate of :mod:`deniable.query.aggregates` post-process its noisy
measures into values and confidence intervals — which costs nothing.

Interval caveat, documented: sums are exact on the fixed-point grid ``2^e``; the per-row
rounding may move a sum of ``n`` values by up to ``n·2^e/2`` (``n·2^-31`` noise scales), which
the intervals do not include.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from deniable.errors import InternalError
from deniable.mechanisms import Release, discrete_gaussian, exponential, geometric
from deniable.noise.source import RandomSource
from deniable.query import partition
from deniable.query.aggregates import NoisyMeasures, Released
from deniable.query.measures import HistogramMeasure, Measure
from deniable.query.plan import DPPlan
from deniable.query.rewrite.compile import BIN, COUNT, PART, UNITS, CompiledQuery

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


@dataclass
class ExactAggregates:
    """The engine's result, per partition (exact; never leaves deniable).

    Attributes:
        keys: the key tuple of each non-empty partition.
        units: number of privacy units per partition (after bounding).
        measures: exact integer value of each additive measure per partition.
        histograms: per histogram measure, per key tuple, counts on the candidate grid.
    """

    keys: list[tuple[object, ...]]
    units: I64
    measures: dict[str, I64]
    histograms: dict[str, dict[tuple[object, ...], I64]] = field(default_factory=dict)


def read_result(table: pa.Table, compiled: CompiledQuery, plan: DPPlan) -> ExactAggregates:
    """Split the engine's result into per-partition arrays (vectorised; keys as Python values)."""
    key_lists = [table.column(k).to_pylist() for k in compiled.key_columns]

    def ints(name: str) -> I64:
        column = pc.fill_null(table.column(name), 0)
        return np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.int64)

    def key_tuples(rows: I64) -> list[tuple[object, ...]]:
        if not key_lists:
            return [()] * rows.size
        return list(zip(*([c[i] for i in rows.tolist()] for c in key_lists), strict=True))

    part = ints(PART)
    main = np.flatnonzero(part == 0)
    keys = key_tuples(main)
    units = ints(UNITS)[main]
    measures = {mid: ints(c)[main] for mid, c in compiled.measure_columns.items()}
    histograms: dict[str, dict[tuple[object, ...], I64]] = {}
    if compiled.histogram_parts:
        bins, counts = ints(BIN), ints(COUNT)
    for mid, j in compiled.distinct_parts.items():
        rows = np.flatnonzero(part == j)
        found = dict(zip(key_tuples(rows), ints(COUNT)[rows].tolist(), strict=True))
        measures[mid] = np.array([found.get(k, 0) for k in keys], dtype=np.int64)
    for mid, j in compiled.histogram_parts.items():
        rows = np.flatnonzero(part == j)
        ids: dict[tuple[object, ...], int] = {}
        row_ids = np.array([ids.setdefault(k, len(ids)) for k in key_tuples(rows)], dtype=np.int64)
        meas = plan.measure(mid)
        assert isinstance(meas, HistogramMeasure)
        grid = meas.grid
        hist = np.zeros((len(ids), grid + 1), dtype=np.int64)
        np.add.at(hist, (row_ids, bins[rows]), counts[rows])
        histograms[mid] = {key: hist[n] for key, n in ids.items()}
    return ExactAggregates(keys, units, measures, histograms)


@dataclass
class OutputColumn:
    """One released aggregate: values, interval bounds at the plan's level, and how it was made."""

    name: str
    values: npt.NDArray[np.generic]
    low: F64 | None
    high: F64 | None
    mechanism: str
    note: str | None = None


@dataclass
class NoisyAnswer:
    """Released keys and aggregates (all post-processing of charged releases).

    Attributes:
        keys: the released key tuples, in display order.
        columns: each aggregate's values and interval at the plan's level, by plan order.
        released: each aggregate's :class:`~deniable.query.aggregates.Released` (intervals
            at any level, for post-processing), by plan order.
        selected: number of keys kept by partition selection (None for public keys).
    """

    keys: list[tuple[object, ...]]
    columns: list[OutputColumn]
    released: list[Released]
    selected: int | None


def release(
    plan: DPPlan, exact: ExactAggregates, *, source: RandomSource | None = None
) -> NoisyAnswer:
    """Release the noisy aggregates of ``plan``; spends exactly ``plan.loss`` (already charged).

    Every mechanism is called with the parameters of its measure, which are the ones whose
    composition the planner checked against the charge before anything was written.
    """
    index = {k: i for i, k in enumerate(exact.keys)}
    if plan.public_domain is not None:
        keys = list(plan.public_domain)
        rows = [index.get(k, -1) for k in keys]
        selected = None
    else:
        assert plan.selection is not None
        sel = plan.selection
        mask = partition.select(
            exact.units,
            epsilon=sel.epsilon,
            delta=sel.delta,
            max_groups=sel.max_groups,
            source=source,
        )
        rows = [int(i) for i in np.flatnonzero(mask)]
        # The engine's row order may depend on unreleased partitions: sort by key instead.
        rows = [rows[i] for i in order_keys([exact.keys[i] for i in rows])]
        keys = [exact.keys[i] for i in rows]
        selected = len(keys)

    def values_of(measure_id: str) -> I64:
        arr = exact.measures[measure_id]
        return np.array([arr[i] if i >= 0 else 0 for i in rows], dtype=np.int64)

    releases: dict[str, Release] = {}
    noisy: dict[str, I64] = {}
    for meas in plan.measures:
        if meas.kind == "histogram":
            continue
        rel = additive_release(meas, meas.coarsen(values_of(meas.id)), source)
        releases[meas.id] = rel
        noisy[meas.id] = np.asarray(rel.value, dtype=np.int64)  # in units of 2^shift
    chosen: dict[str, I64] = {}
    for meas in plan.measures:
        if not isinstance(meas, HistogramMeasure):
            continue
        per = exact.histograms.get(meas.id, {})
        picks = np.zeros(len(keys), dtype=np.int64)
        for n, key in enumerate(keys):
            counts = per.get(key)
            if counts is None:
                counts = np.zeros(meas.grid + 1, dtype=np.int64)
            rel = exponential(
                quantile_scores(counts, meas.q),
                sensitivity=meas.sensitivity,
                epsilon=meas.budget,
                source=source,
            )
            releases.setdefault(meas.id, rel)
            picks[n] = int(rel.value)
        chosen[meas.id] = picks
    measured = NoisyMeasures(
        noisy=noisy, releases=releases, chosen=chosen, size=len(keys), level=plan.level
    )
    columns: list[OutputColumn] = []
    released: list[Released] = []
    for agg in plan.aggregates:
        out = agg.aggregate.release(tuple(plan.measure(i) for i in agg.measures), measured)
        released.append(out)
        low = high = None
        if out.interval is not None:
            low, high = out.interval(plan.level)
        columns.append(OutputColumn(agg.name, out.values, low, high, out.mechanism, out.note))
    return NoisyAnswer(keys=keys, columns=columns, released=released, selected=selected)


def additive_release(meas: Measure, values: I64, source: RandomSource | None) -> Release:
    """Noise on one additive measure's exact integers, by the measure's own mechanism.

    The one function the release path calls for counts and sums (the auditor and the
    privacy tests call it too). Privacy loss: the measure's ``budget`` for its
    ``sensitivity`` (ε-DP for the discrete Laplace, ρ-zCDP for the discrete Gaussian).
    """
    if meas.mechanism == "geometric":
        return geometric(
            values, sensitivity=int(meas.sensitivity), epsilon=meas.budget, source=source
        )
    if meas.mechanism == "discrete_gaussian":
        return discrete_gaussian(
            values, sensitivity=meas.sensitivity, rho=meas.budget, source=source
        )
    raise InternalError(f"measure {meas.id} has no additive mechanism")


def quantile_scores(counts: npt.ArrayLike, q: Fraction) -> I64:
    """Integer scores ``−|(den−num)·#below(j) − num·#above(j)|`` of each grid candidate ``j``.

    ``den`` times the usual ``−|(1−q)·#below − q·#above|``; one row more or less changes each
    score by at most ``max(num, den − num)``.

    Examples:
        >>> quantile_scores([1, 0, 1], Fraction(1, 2)).tolist()
        [-1, 0, -1]
    """
    c = np.asarray(counts, dtype=np.int64)
    below = np.concatenate([[0], np.cumsum(c)[:-1]])
    above = int(c.sum()) - below - c
    num, den = q.numerator, q.denominator
    return np.asarray(-np.abs((den - num) * below - num * above), dtype=np.int64)


def order_keys(keys: Sequence[tuple[object, ...]]) -> list[int]:
    """A deterministic order of released keys (by their text), for display."""
    return sorted(range(len(keys)), key=lambda i: tuple(repr(k) for k in keys[i]))
