"""Stage 5: turn the engine's exact bounded aggregates into the noisy answer.

Runs only after the ledger committed the plan's charge. In order: release group keys (the
whole public domain, empty groups included, or DP partition selection on the number of
privacy units of each partition), noise every measure with its planned mechanism, check
that the mechanisms' own reported losses compose to the charged loss (else
:class:`~deniable.errors.InternalError`, nothing released), then post-process — which costs
nothing — into outputs with confidence intervals:

* counts are clamped to ``≥ 0``; sums of non-negative (non-positive) ranges likewise;
* AVG is ``centre + S/N`` from the noisy centred sum ``S`` and noisy count ``N``, clamped to
  the bounds; its interval takes each of ``S``, ``N`` at level ``1 − (1−level)/2`` and the
  extreme ratios over that box (exact coverage ≥ ``level`` by the union bound);
* VARIANCE is ``(Q − S²/N)/(N − 1)`` from count, centred sum and sum of squares about the same
  centre, each at level ``1 − (1−level)/3``, with the interval from the extremes over the
  box; STDDEV is its square root;
* quantiles come from the exponential mechanism over the candidate grid (scores
  ``−|(1−q)·#below − q·#above|``); they have no value interval (any interval would need more
  queries of the data) — the metadata states their rank accuracy instead.

Interval caveat, documented: sums are exact on the fixed-point grid ``2^e``; the per-row
rounding may move a sum of ``n`` values by up to ``n·2^e/2`` (``n·2^-31`` noise scales), which
the intervals do not include.
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

from deniable.accounting.composition import compose
from deniable.accounting.conversions import convert
from deniable.accounting.loss import PrivacyLoss
from deniable.errors import InternalError
from deniable.mechanisms import Release, discrete_gaussian, exponential, geometric
from deniable.noise.source import RandomSource
from deniable.query import partition
from deniable.query.plan import DPPlan, Measure, OutputPlan
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
    for mid, j in compiled.histogram_parts.items():
        rows = np.flatnonzero(part == j)
        ids: dict[tuple[object, ...], int] = {}
        row_ids = np.array([ids.setdefault(k, len(ids)) for k in key_tuples(rows)], dtype=np.int64)
        grid = plan.measure(mid).grid
        hist = np.zeros((len(ids), grid + 1), dtype=np.int64)
        np.add.at(hist, (row_ids, bins[rows]), counts[rows])
        histograms[mid] = {key: hist[n] for key, n in ids.items()}
    return ExactAggregates(keys, units, measures, histograms)


@dataclass
class OutputColumn:
    """One released output: values, interval bounds, and how it was made."""

    name: str
    values: npt.NDArray[np.generic]
    low: F64 | None
    high: F64 | None
    mechanism: str
    note: str | None = None


@dataclass
class NoisyAnswer:
    """Released keys and outputs (all post-processing of charged releases)."""

    keys: list[tuple[object, ...]]
    columns: list[OutputColumn]
    selected: int | None


def release(
    plan: DPPlan, exact: ExactAggregates, *, source: RandomSource | None = None
) -> NoisyAnswer:
    """Release the noisy answer of ``plan``; spends exactly ``plan.loss`` (already charged).

    Raises:
        InternalError: the mechanisms' reported losses do not compose to ``plan.loss``;
            nothing is released.
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
        rel = _additive(meas, meas.coarsen(values_of(meas.id)), source)
        releases[meas.id] = rel
        noisy[meas.id] = np.asarray(rel.value, dtype=np.int64)  # in units of 2^shift
    chosen: dict[str, I64] = {}
    for meas in plan.measures:
        if meas.kind != "histogram":
            continue
        per = exact.histograms.get(meas.id, {})
        picks = np.zeros(len(keys), dtype=np.int64)
        for n, key in enumerate(keys):
            counts = per.get(key)
            if counts is None:
                counts = np.zeros(meas.grid + 1, dtype=np.int64)
            rel = exponential(
                quantile_scores(counts, meas.q or Fraction(1, 2)),
                sensitivity=meas.sensitivity,
                epsilon=meas.budget,
                source=source,
            )
            releases.setdefault(meas.id, rel)
            picks[n] = int(rel.value)
        chosen[meas.id] = picks
    _check_released_loss(plan, releases)

    columns: list[OutputColumn] = []
    for out in plan.outputs:
        if out.key is not None:
            continue
        columns.append(_output(plan, out, noisy, releases, chosen, len(keys)))
    return NoisyAnswer(keys=keys, columns=columns, selected=selected)


def _additive(meas: Measure, values: I64, source: RandomSource | None) -> Release:
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


def _check_released_loss(plan: DPPlan, releases: dict[str, Release]) -> None:
    losses: list[PrivacyLoss] = []
    for meas in plan.measures:
        rel = releases.get(meas.id)
        losses.append(meas.loss if rel is None else rel.loss)
    if plan.selection is not None:
        losses.append(plan.selection.loss)
    actual = convert(compose(losses), type(plan.loss))
    if actual != plan.loss:
        raise InternalError(
            "the mechanisms' reported losses differ from the charged loss; nothing is released"
        )


def _split_level(level: float, parts: int) -> float:
    return 1.0 - (1.0 - level) / parts


def _interval(meas: Measure, rel: Release, level: float) -> tuple[F64, F64]:
    """Interval of the exact measure, in its row units (the rounding to ``2^shift`` added)."""
    lo, hi = rel.interval(level)
    step = float(2**meas.shift)
    slack = step / 2 if meas.shift else 0.0
    return (
        np.asarray(lo, dtype=np.float64) * step - slack,
        np.asarray(hi, dtype=np.float64) * step + slack,
    )


def _units(meas: Measure, noisy: dict[str, I64]) -> F64:
    """A noisy measure in its row units, as doubles."""
    return noisy[meas.id].astype(np.float64) * float(2**meas.shift)


def _output(
    plan: DPPlan,
    out: OutputPlan,
    noisy: dict[str, I64],
    releases: dict[str, Release],
    chosen: dict[str, I64],
    size: int,
) -> OutputColumn:
    level = plan.level
    func = out.func
    ms = [plan.measure(i) for i in out.measures]
    if func in ("count", "count_distinct"):
        (m,) = ms
        v = np.maximum(noisy[m.id] * (1 << m.shift), 0)
        lo, hi = _interval(m, releases[m.id], level)
        return OutputColumn(
            out.name, v, np.maximum(lo, 0.0), np.maximum(hi, 0.0), _describe(m, releases[m.id])
        )
    assert out.bounds is not None
    b_lo, b_hi = float(out.bounds.lower), float(out.bounds.upper)
    if func == "sum":
        (m,) = ms
        g = float(m.row_granularity)
        lo, hi = _interval(m, releases[m.id], level)
        values: npt.NDArray[np.generic]
        if m.integer_column and m.exponent == 0 and m.shift == 0:
            values = noisy[m.id].copy()
        else:
            values = _units(m, noisy) * g
        lo, hi = lo * g, hi * g
        if b_lo >= 0:
            values, lo, hi = np.maximum(values, 0), np.maximum(lo, 0.0), np.maximum(hi, 0.0)
        if b_hi <= 0:
            values, lo, hi = np.minimum(values, 0), np.minimum(lo, 0.0), np.minimum(hi, 0.0)
        return OutputColumn(out.name, values, lo, hi, _describe(m, releases[m.id]))
    if func == "avg":
        mc, ms_ = ms
        lvl = _split_level(level, 2)
        n = _units(mc, noisy)
        g = float(ms_.row_granularity)
        centre = ms_.centre
        s = _units(ms_, noisy)
        mean = np.clip(g * (centre + s / np.maximum(n, 1.0)), b_lo, b_hi)
        n_lo, n_hi = _interval(mc, releases[mc.id], lvl)
        s_lo, s_hi = _interval(ms_, releases[ms_.id], lvl)
        low = np.full(size, b_lo)
        high = np.full(size, b_hi)
        ok = n_lo > 0
        if ok.any():
            with np.errstate(invalid="ignore", divide="ignore"):
                cands = np.stack(
                    [
                        g * (centre + s_lo / n_lo),
                        g * (centre + s_lo / n_hi),
                        g * (centre + s_hi / n_lo),
                        g * (centre + s_hi / n_hi),
                    ]
                )
                low = np.where(ok, np.clip(cands.min(axis=0), b_lo, b_hi), low)
                high = np.where(ok, np.clip(cands.max(axis=0), b_lo, b_hi), high)
        desc = f"{_describe(mc, releases[mc.id])} / {_describe(ms_, releases[ms_.id])}"
        return OutputColumn(out.name, mean, low, high, f"mean = sum/count: {desc}")
    if func in ("variance", "stddev"):
        mc, ms_, mq = ms
        lvl = _split_level(level, 3)
        n = _units(mc, noisy)
        g, g2 = float(ms_.row_granularity), float(mq.row_granularity)
        s = _units(ms_, noisy) * g
        q = _units(mq, noisy) * g2
        top = (b_hi - b_lo) ** 2 / 2  # sample variance of values in [lo, hi], n ≥ 2
        if out.population:
            top = (b_hi - b_lo) ** 2 / 4
        shift = 0.0 if out.population else 1.0
        n_eff = np.maximum(n, 2.0)
        var = np.clip((q - s * s / n_eff) / (n_eff - shift), 0.0, top)
        n_lo, n_hi = _interval(mc, releases[mc.id], lvl)
        s_lo, s_hi = (x * g for x in _interval(ms_, releases[ms_.id], lvl))
        q_lo, q_hi = (x * g2 for x in _interval(mq, releases[mq.id], lvl))
        s2_max = np.maximum(s_lo * s_lo, s_hi * s_hi)
        s2_min = np.where((s_lo <= 0) & (s_hi >= 0), 0.0, np.minimum(s_lo * s_lo, s_hi * s_hi))
        low = np.zeros(size)
        high = np.full(size, top)
        ok = n_lo > 1.0
        with np.errstate(invalid="ignore", divide="ignore"):
            a_lo = q_lo - s2_max / n_lo
            a_hi = q_hi - s2_min / n_hi
            low = np.where(ok, np.clip(np.maximum(a_lo, 0.0) / (n_hi - shift), 0.0, top), low)
            high = np.where(ok, np.clip(np.maximum(a_hi, 0.0) / (n_lo - shift), 0.0, top), high)
        desc = ", ".join(_describe(x, releases[x.id]) for x in ms)
        if func == "stddev":
            return OutputColumn(
                out.name, np.sqrt(var), np.sqrt(low), np.sqrt(high), f"√variance from {desc}"
            )
        return OutputColumn(out.name, var, low, high, f"variance from {desc}")
    # median / quantile
    (m,) = ms
    grid = m.grid
    step = (b_hi - b_lo) / grid
    idx = chosen[m.id].astype(np.float64)
    values = np.where(idx >= grid, b_hi, b_lo + idx * step)
    rank = rank_error(m, level)
    note = (
        f"exponential mechanism over {grid + 1} candidates in [{b_lo:g}, {b_hi:g}]; with "
        f"probability ≥ {level:g} the released value's |(1−q)·#below − q·#above| is within "
        f"{rank:.1f} of the best candidate's"
    )
    return OutputColumn(
        out.name,
        values,
        None,
        None,
        f"exponential (ε = {float(m.budget):.4g}, score sensitivity {m.sensitivity})",
        note,
    )


def rank_error(m: Measure, level: float) -> float:
    """Utility bound of the exponential mechanism, in rows: ``2Δ/ε·ln(|R|/(1−level))/den``."""
    q = m.q or Fraction(1, 2)
    return (
        float(2 * m.sensitivity / m.budget) * math.log((m.grid + 1) / (1 - level)) / q.denominator
    )


def _describe(m: Measure, rel: Release) -> str:
    scale = rel.scale * float(m.granularity)
    unit = f", grid {float(m.granularity):.3g}" if m.kind in ("sum", "squares") or m.shift else ""
    param = "ρ" if m.mechanism == "discrete_gaussian" else "ε"
    return (
        f"{m.mechanism} ({param} = {float(m.budget):.4g}, sensitivity {m.sensitivity}, "
        f"scale {scale:.4g}{unit})"
    )


def order_keys(keys: Sequence[tuple[object, ...]]) -> list[int]:
    """A deterministic order of released keys (by their text), for display."""
    return sorted(range(len(keys)), key=lambda i: tuple(repr(k) for k in keys[i]))
