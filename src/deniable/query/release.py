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

import datetime as dt
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
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
from deniable.query.rewrite.compile import BIN, COUNT, PART, UNITS, CompiledQuery, key_as_text

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


@dataclass
class ExactAggregates:
    """The engine's result, per partition (exact; never leaves deniable).

    Keys are held in a total representation until they are released: integers, floats,
    booleans, text and bytes as the engine sent them, and the engine's own text for the
    keys it sends as text (:func:`deniable.query.rewrite.compile.key_as_text`: dates,
    timestamps, intervals, lists, decimals). Nothing about a key is converted, or can
    fail, before the charge; :meth:`decoded_keys` gives the Python values afterwards.

    Histograms are sparse (the non-empty cells of each partition): their size is the
    engine's result, never partitions × grid.

    Attributes:
        keys: the key tuple of each non-empty partition (total representation).
        units: number of privacy units per partition (after bounding).
        measures: exact integer value of each additive measure per partition.
        histograms: per histogram measure, per key tuple, its counts on the candidate grid
            (:class:`SparseHistograms`: stored sparse, dense one partition at a time).
        decoders: per key column, how its released values are decoded (None: as they are).
    """

    keys: list[tuple[object, ...]]
    units: I64
    measures: dict[str, I64]
    histograms: dict[str, SparseHistograms] = field(default_factory=dict)
    decoders: tuple[str | None, ...] = ()

    def decoded_keys(
        self, rows: Sequence[int] | None = None, *, uniform: bool = True
    ) -> list[tuple[object, ...]]:
        """The Python values of the keys of ``rows`` (all by default); never raises.

        Call only after the charge (or for keys that are public): decoding reads the
        values. With ``uniform`` (for keys that are shown), a column in which some value
        cannot be decoded (``'infinity'``, a year past 9999) is given as the engine's text
        throughout, so that every column has one type; without it (to match keys with a
        declared domain) each value falls back on its own.
        """
        picked = self.keys if rows is None else [self.keys[i] for i in rows]
        if not any(self.decoders) or not picked:
            return list(picked)
        columns: list[list[object]] = []
        for j, decoder in enumerate(self.decoders):
            raw = [key[j] for key in picked]
            if decoder is None:
                columns.append(raw)
                continue
            values = [decode_key(v, decoder) for v in raw]
            failed = any(isinstance(d, str) and d == v for d, v in zip(values, raw, strict=True))
            columns.append(raw if uniform and decoder != "text" and failed else values)
        return list(zip(*columns, strict=True))


class SparseHistograms(Mapping[tuple[object, ...], I64]):
    """Per partition, the non-empty cells ``(bins, counts)`` of a histogram on ``0..grid``.

    Reading one partition (``h[key]``) gives its dense counts; memory is the engine's
    result, never partitions × grid, so nothing sized by the number of private keys
    times a public parameter is allocated before the charge.
    """

    def __init__(self, cells: dict[tuple[object, ...], tuple[I64, I64]], grid: int) -> None:
        self._cells = cells
        self.grid = grid

    def cells(self, key: tuple[object, ...]) -> tuple[I64, I64] | None:
        """The non-empty cells of ``key``'s partition (None when it has none)."""
        return self._cells.get(key)

    def __getitem__(self, key: tuple[object, ...]) -> I64:
        return dense_histogram(self._cells[key], self.grid)

    def __iter__(self) -> Iterator[tuple[object, ...]]:
        return iter(self._cells)

    def __len__(self) -> int:
        return len(self._cells)


def dense_histogram(cells: tuple[I64, I64] | None, grid: int) -> I64:
    """The counts of one partition on the whole grid ``0..grid`` (zeros where no cell)."""
    hist = np.zeros(grid + 1, dtype=np.int64)
    if cells is not None:
        np.add.at(hist, cells[0], cells[1])
    return hist


def read_result(table: pa.Table, compiled: CompiledQuery, plan: DPPlan) -> ExactAggregates:
    """Split the engine's result into per-partition arrays (vectorised; keys total).

    Runs before the charge, so nothing here may depend on a value's content: keys are
    taken as the engine sent them (text for the kinds that could fail to convert),
    histograms stay sparse, and every array is sized by the engine's result.
    """
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
    histograms: dict[str, SparseHistograms] = {}
    if compiled.histogram_parts:
        bins, counts = ints(BIN), ints(COUNT)
    for mid, j in compiled.distinct_parts.items():
        rows = np.flatnonzero(part == j)
        found = dict(zip(key_tuples(rows), ints(COUNT)[rows].tolist(), strict=True))
        measures[mid] = np.array([found.get(k, 0) for k in keys], dtype=np.int64)
    shared: dict[int, SparseHistograms] = {}  # measures reading one engine histogram
    for mid, j in compiled.histogram_parts.items():
        if j in shared:
            histograms[mid] = shared[j]
            continue
        rows = np.flatnonzero(part == j)
        cells: dict[tuple[object, ...], list[int]] = {}
        for n, k in enumerate(key_tuples(rows)):
            cells.setdefault(k, []).append(n)
        meas = plan.measure(mid)
        assert isinstance(meas, HistogramMeasure)
        histograms[mid] = shared[j] = SparseHistograms(
            {k: (bins[rows[at]], counts[rows[at]]) for k, at in cells.items()}, meas.grid
        )
    decoders = tuple(key_decoder(k.sql_type) if key_as_text(k) else None for k in plan.keys)
    return ExactAggregates(keys, units, measures, histograms, decoders)


def key_decoder(sql_type: str) -> str:
    """The decoder name of a key column sent as text (see :func:`decode_key`)."""
    base = sql_type.strip().upper().split("(", 1)[0].strip()
    if base in ("DECIMAL", "NUMERIC"):
        return "decimal"
    if base == "DATE":
        return "date"
    if base.startswith("TIMESTAMP") or base == "DATETIME":
        return "timestamp"
    if base.startswith("TIME"):
        return "time"
    return "text"


def decode_key(value: object, decoder: str | None) -> object:
    """A released key's Python value from the engine's text; total (never raises).

    Dates, timestamps and times become :mod:`datetime` values and decimals
    :class:`~decimal.Decimal` when Python can hold them; anything else (``'infinity'``, a
    year past 9999 or before 1, a BC date, an interval, a list) stays the engine's text.
    """
    if decoder is None or not isinstance(value, str) or decoder == "text":
        return value
    try:
        if decoder == "decimal":
            number = Decimal(value)
            return number if number.is_finite() else value
        if decoder == "date":
            return dt.date.fromisoformat(value)
        if decoder == "timestamp":
            return dt.datetime.fromisoformat(value)
        if decoder == "time":
            return dt.time.fromisoformat(value)
    except (ValueError, ArithmeticError, OverflowError):
        return value
    return value


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
    if plan.public_domain is not None:
        # After the charge: every partition's key is decoded to be matched with the domain.
        index = {k: i for i, k in enumerate(exact.decoded_keys(uniform=False))}
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
        decoded = exact.decoded_keys(rows)
        order = order_keys(decoded)
        rows = [rows[i] for i in order]
        keys = [decoded[i] for i in order]
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
        per = exact.histograms.get(meas.id)
        picks = np.zeros(len(keys), dtype=np.int64)
        for n, row in enumerate(rows):
            cells = per.cells(exact.keys[row]) if per is not None and row >= 0 else None
            counts = dense_histogram(cells, meas.grid)
            rel = exponential(
                quantile_scores(counts, meas.q, meas.target),
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


def quantile_scores(counts: npt.ArrayLike, q: Fraction, target: int = 0) -> I64:
    """Integer exponential-mechanism scores of each grid candidate ``j`` for quantile ``q``.

    With ``q = num/den``, ``target = 0`` (the quantile itself) gives
    ``−|S(j)|``, ``S(j) = (den−num)·#below(j) − num·#above(j)`` — ``den`` times the usual
    ``(1−q)·#below − q·#above``.

    An interval endpoint aims at ``target = ∓T``. Cell ``j``'s rows span the positions
    ``[lo_j, hi_j]`` with ``lo_j = den·#below(j) − num·n`` and ``hi_j = lo_j + den·c_j``
    (``S(j)`` lies between them, and ``hi_j = lo_{j+1}``: the cells tile
    ``[−num·n, (den−num)·n]``); candidate ``j`` scores ``−dist(target, [lo_j, hi_j])``, with
    the outer candidate's span open outwards (candidate 0 covers every position below
    ``hi_0`` for ``target < 0``, the last every position above its ``lo`` for
    ``target > 0``). So some candidate always scores 0 whatever the data (ties, gaps, few or
    no rows). One row more or less moves each ``lo_j`` and ``hi_j`` by at most
    ``max(num, den − num)``, and a distance to an interval by no more: the sensitivity is
    the same for every target.

    Examples:
        >>> quantile_scores([1, 0, 1], Fraction(1, 2)).tolist()
        [-1, 0, -1]
        >>> quantile_scores([1, 0, 1], Fraction(1, 2), -2).tolist()
        [0, -2, -2]
        >>> quantile_scores([1, 0, 1], Fraction(1, 2), 1).tolist()
        [-1, -1, 0]
    """
    c = np.asarray(counts, dtype=np.int64)
    below = np.concatenate([[0], np.cumsum(c)[:-1]])
    n = int(c.sum())
    num, den = q.numerator, q.denominator
    if target == 0:
        above = n - below - c
        return np.asarray(-np.abs((den - num) * below - num * above), dtype=np.int64)
    lo = den * below - num * n
    hi = lo + den * c
    if target < 0:
        lo[0] = target  # candidate 0: every position up to hi_0
    else:
        hi[-1] = target  # the last candidate: every position from its lo
    gap = np.maximum(np.maximum(lo - target, target - hi), 0)
    return np.asarray(-gap, dtype=np.int64)


def order_keys(keys: Sequence[tuple[object, ...]]) -> list[int]:
    """A deterministic order of released keys, for display: each column by its own order.

    Numbers numerically (NaN after them), text and bytes as themselves, dates and times
    chronologically, NULL last (DuckDB's ``ORDER BY``); values of different kinds by kind.
    Ties cannot happen (keys are distinct); the order never raises.

    Examples:
        >>> order_keys([(10,), (9,), (None,), (float("nan"),)])
        [1, 0, 3, 2]
    """
    return sorted(range(len(keys)), key=lambda i: tuple(_sort_key(v) for v in keys[i]))


def _sort_key(value: object) -> tuple[object, ...]:
    if value is None:
        return (10,)
    if isinstance(value, bool):
        return (1, int(value))
    if isinstance(value, int | float | Decimal | Fraction | np.integer | np.floating):
        number = float(value) if not isinstance(value, int) else value
        if isinstance(number, float) and math.isnan(number):
            return (3,)
        return (2, number)
    if isinstance(value, str):
        return (4, value)
    if isinstance(value, bytes):
        return (5, value)
    if isinstance(value, dt.datetime):
        aware = value.tzinfo is not None
        return (6, int(aware), value.timestamp() if aware else value.isoformat())
    if isinstance(value, dt.date):
        return (7, value.toordinal())
    if isinstance(value, dt.time):
        return (8, value.isoformat())
    return (9, type(value).__name__, repr(value))
