"""Whole-query auditing: a lower confidence bound on the ε a whole query actually delivers.

A query releases a *vector* of numbers (every aggregate of every released group, the noisy
measures behind them, which groups were kept). Auditing one mechanism at a time
(:mod:`deniable.audit.empirical`) misses the bugs that live between mechanisms: a budget
split that counts twice, a sensitivity that forgets a group, bounding that is not applied.
This module audits the joint output instead.

The query is a black box. The caller hands over, for each of two neighbouring datasets
``D`` and ``D'``, a *sampler*: ``sampler(n)`` returns ``n`` independent releases of the
whole query on that dataset as an ``(n, k)`` array (row ``i`` = all ``k`` numbers released
by trial ``i``, in a fixed order; a group that was not released is encoded by the caller,
e.g. a 0/1 presence column and 0 in its value columns). :func:`repeat` builds a sampler
from any ``release() -> vector`` callable; a fast sampler computes the exact aggregates
once per dataset and draws only the noise per trial (see ``deniable.cli.audit``). This
module imports nothing from the query layer.

Events over vectors. ε-DP bounds ``P[M(D) ∈ E] ≤ e^ε·P[M(D') ∈ E] + δ`` for *every* event
``E`` of the vector output, in particular for every event on any function of it
(post-processing). The first ``selection_fraction`` of each sample is used only to build
candidate statistics and events; the rest only to test them:

* per-coordinate statistics — the ``max_coordinates`` coordinates whose means differ most
  (in pooled standard deviations) on the selection part;
* the Laplace log-likelihood-ratio statistic ``Σ_j (|y_j − m_j| − |y_j − m'_j|)/s_j``,
  with medians ``m``, ``m'`` and scales ``s`` estimated on the selection part (the
  Neyman–Pearson optimal combination for additive Laplace-type noise);
* the Gaussian one, linear: ``Σ_j (μ_j − μ'_j)/σ_j² · y_j`` (optimal for Gaussian noise;
  with ``μ``, ``σ²`` estimated on the selection part).

On each statistic the candidate events are cells, prefixes and suffixes of a partition into
quantile cells (as in :func:`~deniable.audit.empirical.estimate_epsilon`); events seen on
one side only are allowed (a deterministic leak is then caught too). All candidates of all
statistics are scored on the selection part and the best ``max_events`` (event, direction)
pairs are tested on the test part, with one-sided Clopper–Pearson bounds at level
``α/(2·max_events)`` each (Bonferroni). Since the tested events are independent of the test
data, ``P[lower > the true largest loss over the tested events] ≤ α`` whatever the
mechanism: a query that really is ε-DP is refuted (``lower > ε``) with probability ≤ α.

With several neighbour pairs (:func:`audit_query_pairs`), α is divided evenly among them
and the bound is the largest: the false-failure probability stays ≤ α overall.

Privacy: nothing here touches data; the samples are outputs of the audited query, and the
report is a statistic of them. But the samplers are run by the data owner on the real data
(often with exact aggregates computed once), and a report can reveal how much a real person
moves the answer: audit reports are curator-side diagnostics, not differentially private
releases.

Examples:
    A "query" releasing two noisy counts with half the noise it claims is caught:

    >>> import numpy as np
    >>> from deniable.mechanisms import geometric
    >>> from deniable.noise.testing import SeededRandom
    >>> def counts(values, eps, seed):
    ...     src = SeededRandom(seed)
    ...     def sampler(n):
    ...         x = np.tile(values, n)
    ...         return geometric(x, sensitivity=2, epsilon=eps, source=src).value.reshape(n, -1)
    ...     return sampler
    >>> honest = audit_query(counts([40, 7], 1, 1), counts([41, 8], 1, 2),
    ...                      trials=50_000, claimed=1.0)
    >>> honest.passed, honest.lower > 0.5
    (True, True)
    >>> buggy = audit_query(counts([40, 7], 2, 3), counts([41, 8], 2, 4),
    ...                     trials=50_000, claimed=1.0)
    >>> buggy.passed
    False
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

import numpy as np
import numpy.typing as npt

from deniable.audit.empirical import (
    EmpiricalLoss,
    Measure,
    _bound,
    _Cells,
    _cells,
    _epsilon_stat,
    _range_counts,
    _ranges,
    _rho_stat,
    _score,
    _Tested,
)
from deniable.errors import InvalidParameter

F64 = npt.NDArray[np.float64]
QuerySampler = Callable[[int], npt.ArrayLike]
"""``sampler(n)`` returns ``n`` independent releases of a whole query as an ``(n, k)`` array."""
D = TypeVar("D")

__all__ = [
    "NeighbourPair",
    "QueryAudit",
    "QuerySampler",
    "audit_query",
    "audit_query_pairs",
    "audit_release",
    "estimate_query_loss",
    "repeat",
]


@dataclass(frozen=True, slots=True)
class NeighbourPair:
    """Samplers of a whole query on two neighbouring datasets, with a label for reports."""

    label: str
    sampler_a: QuerySampler
    sampler_b: QuerySampler


@dataclass(frozen=True, slots=True)
class QueryAudit:
    """The result of a whole-query audit.

    Attributes:
        claimed: the ε (or ρ) the query claims.
        measure: ``"epsilon"`` or ``"rho"``.
        loss: the overall evidence: ``loss.lower`` is the largest pair's lower bound, and
            ``P[loss.lower > true loss] ≤ loss.alpha`` (Bonferroni over the pairs).
        pairs: each neighbour pair's label and its own evidence (at ``alpha/len(pairs)``).
        trials: releases drawn on each dataset of each pair.
    """

    claimed: float
    measure: Measure
    loss: EmpiricalLoss
    pairs: tuple[tuple[str, EmpiricalLoss], ...]
    trials: int

    @property
    def lower(self) -> float:
        """The lower confidence bound on the loss the query delivers."""
        return self.loss.lower

    @property
    def confidence(self) -> float:
        """``1 − alpha``: the confidence of :attr:`lower`."""
        return 1.0 - self.loss.alpha

    @property
    def passed(self) -> bool:
        """Whether the claim survives (``lower ≤ claimed``); never a proof of privacy."""
        return self.loss.passes(self.claimed)

    @property
    def verdict(self) -> str:
        """``"pass"`` (no evidence against the claim) or ``"fail"`` (the claim is refuted)."""
        return "pass" if self.passed else "fail"

    def describe(self, top: int = 3) -> dict[str, object]:
        """A JSON-compatible report (numbers, verdict, the most revealing events per pair)."""
        name = "epsilon" if self.measure == "epsilon" else "rho"
        return {
            "measure": name,
            f"claimed_{name}": self.claimed,
            "lower_bound": self.lower,
            "confidence": self.confidence,
            "alpha": self.loss.alpha,
            "delta": self.loss.delta,
            "trials": self.trials,
            "verdict": self.verdict,
            "pairs": [
                {
                    "pair": label,
                    "lower_bound": ev.lower,
                    "point": ev.point,
                    "events": [
                        {
                            "event": e.event,
                            "direction": e.direction,
                            "count_a": e.count_a,
                            "count_b": e.count_b,
                            "lower_bound": e.lower,
                        }
                        for e in ev.events[:top]
                    ],
                }
                for label, ev in self.pairs
            ],
        }


# ----------------------------------------------------------------------------- samplers


def repeat(release: Callable[[], npt.ArrayLike]) -> QuerySampler:
    """A sampler that calls ``release()`` (one whole release, a vector) ``n`` times.

    The slow, general path: each trial runs the whole query. Its vectors must all have the
    same length.

    Examples:
        >>> import numpy as np
        >>> np.asarray(repeat(lambda: [1, 2])(3)).tolist()
        [[1.0, 2.0], [1.0, 2.0], [1.0, 2.0]]
    """

    def sampler(n: int) -> F64:
        rows = [np.asarray(release(), dtype=np.float64).reshape(-1) for _ in range(n)]
        if len({r.size for r in rows}) > 1:
            raise InvalidParameter("every release must have the same number of outputs")
        return np.vstack(rows) if rows else np.zeros((0, 0))

    return sampler


def _matrix(sample: npt.ArrayLike, name: str) -> F64:
    x = np.asarray(sample)
    if x.ndim == 1:
        x = x.reshape(-1, 1)
    if x.ndim != 2:
        raise InvalidParameter(f"{name} must be an (n, k) array: one row per release")
    if x.dtype.kind not in "biuf":
        raise InvalidParameter(f"{name} must hold numbers or booleans (encode outputs first)")
    xf = x.astype(np.float64)
    if not np.isfinite(xf).all():
        raise InvalidParameter(f"{name} must be finite (encode missing groups explicitly)")
    if x.dtype.kind in "iu" and x.size and float(np.max(np.abs(xf))) >= 2.0**53:
        raise InvalidParameter(f"{name}: integer outputs must be below 2^53 in magnitude")
    return xf


# ----------------------------------------------------------------------------- statistics


@dataclass(frozen=True, slots=True)
class _Statistic:
    """A real function of a release vector, fixed from the selection part only."""

    name: str
    apply: Callable[[F64], F64]


def _coordinate(j: int, name: str) -> _Statistic:
    return _Statistic(name, lambda y: y[:, j])


def _statistics(
    sel_a: F64, sel_b: F64, names: Sequence[str], max_coordinates: int
) -> list[_Statistic]:
    """Candidate statistics built from the selection parts (module docstring)."""
    mean_a, mean_b = sel_a.mean(axis=0), sel_b.mean(axis=0)
    var = (sel_a.var(axis=0) + sel_b.var(axis=0)) / 2
    diff = np.abs(mean_a - mean_b)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(diff > 0, diff / np.sqrt(var), 0.0)
    order = [int(j) for j in np.argsort(-z, kind="stable") if z[j] > 0][:max_coordinates]
    stats = [_coordinate(j, names[j]) for j in order]
    moving = var > 0
    if int(np.count_nonzero(moving & (diff > 0))) >= 2:
        med_a, med_b = np.median(sel_a, axis=0), np.median(sel_b, axis=0)
        mad = (np.abs(sel_a - med_a).mean(axis=0) + np.abs(sel_b - med_b).mean(axis=0)) / 2
        use = moving & (mad > 0) & (med_a != med_b)
        if np.any(use):
            ca, cb, w = med_a[use], med_b[use], 1.0 / mad[use]
            idx = np.flatnonzero(use)

            def laplace(y: F64) -> F64:
                part = y[:, idx]
                return np.asarray((np.abs(part - ca) - np.abs(part - cb)) @ w, dtype=np.float64)

            stats.append(_Statistic("Laplace likelihood-ratio statistic", laplace))
        lin = moving & (diff > 0)
        weights = np.where(lin, (mean_a - mean_b) / np.where(lin, var, 1.0), 0.0)

        def linear(y: F64) -> F64:
            return np.asarray(y @ weights, dtype=np.float64)

        stats.append(_Statistic("Gaussian likelihood-ratio statistic", linear))
    return stats


# ----------------------------------------------------------------------------- estimator


def estimate_query_loss(
    sample_a: npt.ArrayLike,
    sample_b: npt.ArrayLike,
    *,
    measure: Measure = "epsilon",
    alpha: float = 1e-7,
    delta: float = 0.0,
    names: Sequence[str] | None = None,
    min_count: int = 10,
    max_events: int = 8,
    max_cells: int = 64,
    max_coordinates: int = 16,
    selection_fraction: float = 0.2,
) -> EmpiricalLoss:
    """Lower confidence bound on the loss shown by releases of a whole query on ``D``, ``D'``.

    Args:
        sample_a: ``(n, k)`` releases on ``D``, independent, in the order drawn.
        sample_b: ``(m, k)`` releases on a neighbour ``D'`` (same columns).
        measure: ``"epsilon"`` (at ``delta``) or ``"rho"`` (zCDP, binary Rényi bound).
        alpha: ``P[lower > the true largest loss over the tested events] ≤ alpha``.
        delta: the δ of an ``(ε, δ)`` claim (subtracted in every event's ratio).
        names: a name per column, for reports (default ``y[j]``).
        min_count: fewest selection hits of a numerator event that may be chosen.
        max_events: most (event, direction) pairs tested (the Bonferroni count).
        max_cells: most cells per statistic.
        max_coordinates: most single coordinates used as statistics.
        selection_fraction: share of each sample used only to choose statistics and events.

    Returns:
        The :class:`~deniable.audit.empirical.EmpiricalLoss`.
    """
    if measure not in ("epsilon", "rho"):
        raise InvalidParameter("measure must be 'epsilon' or 'rho'")
    if not (isinstance(alpha, float | int) and 0.0 < alpha < 0.5):
        raise InvalidParameter("alpha must be in (0, 0.5), e.g. 1e-7")
    if not (isinstance(delta, float | int) and 0.0 <= delta < 1.0):
        raise InvalidParameter("delta must be in [0, 1)")
    if measure == "rho" and delta:
        raise InvalidParameter("a ρ claim has no δ")
    for value, what, least in (
        (min_count, "min_count", 1),
        (max_events, "max_events", 1),
        (max_cells, "max_cells", 2),
        (max_coordinates, "max_coordinates", 1),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise InvalidParameter(f"{what} must be an integer ≥ {least}")
    if not (isinstance(selection_fraction, float) and 0.0 < selection_fraction < 1.0):
        raise InvalidParameter("selection_fraction must be in (0, 1)")
    a, b = _matrix(sample_a, "sample_a"), _matrix(sample_b, "sample_b")
    if a.shape[1] != b.shape[1]:
        raise InvalidParameter("both samples must release the same number of outputs")
    k = a.shape[1]
    labels = list(names) if names is not None else [f"y[{j}]" for j in range(k)]
    if len(labels) != k:
        raise InvalidParameter("names must give one name per released output")
    sel_a, sel_b = int(a.shape[0] * selection_fraction), int(b.shape[0] * selection_fraction)
    if min(sel_a, a.shape[0] - sel_a, sel_b, b.shape[0] - sel_b) < 1:
        raise InvalidParameter("samples too small to split into selection and test parts")
    stat = _epsilon_stat(float(delta)) if measure == "epsilon" else _rho_stat
    n_test = (a.shape[0] - sel_a, b.shape[0] - sel_b)

    candidates: list[tuple[float, int, int, Literal["a/b", "b/a"]]] = []
    built: list[tuple[_Statistic, _Cells, list[tuple[int, int]]]] = []
    for s in _statistics(a[:sel_a], b[:sel_b], labels, max_coordinates):
        xa, xb = s.apply(a[:sel_a]), s.apply(b[:sel_b])
        pooled = np.concatenate([xa, xb])
        cells = _cells(pooled, max(min_count, math.ceil(pooled.size / max_cells)))
        ranges = _ranges(cells.size)
        if not ranges:
            continue
        ra = _range_counts(cells.counts(xa), ranges)
        rb = _range_counts(cells.counts(xb), ranges)
        scored = _score(
            ra,
            rb,
            (sel_a, sel_b),
            n_test,
            stat=stat,
            alpha=alpha,
            min_count=min_count,
            max_events=max_events,
            min_denominator=0,
        )
        si = len(built)
        built.append((s, cells, ranges))
        candidates.extend((score, si, i, d) for score, i, d in scored[:max_events])
    candidates.sort(key=lambda c: c[0], reverse=True)
    chosen = candidates[:max_events]

    tested: list[_Tested] = []
    test_a, test_b = a[sel_a:], b[sel_b:]
    values: dict[int, tuple[F64, F64]] = {}
    for _, si, i, direction in chosen:
        s, cells, ranges = built[si]
        if si not in values:
            values[si] = (s.apply(test_a), s.apply(test_b))
        ta, tb = values[si]
        (ca,) = _range_counts(cells.counts(ta), [ranges[i]])
        (cb,) = _range_counts(cells.counts(tb), [ranges[i]])
        tested.append(_Tested(f"{s.name}: {cells.name(*ranges[i])}", direction, ca, cb))
    return _bound(tested, n_test[0], n_test[1], measure=measure, alpha=alpha, delta=delta)


# ----------------------------------------------------------------------------- audits


def audit_query_pairs(
    pairs: Iterable[NeighbourPair],
    *,
    trials: int,
    claimed: float,
    measure: Measure = "epsilon",
    alpha: float = 1e-7,
    delta: float = 0.0,
    names: Sequence[str] | None = None,
    max_events: int = 8,
    max_coordinates: int = 16,
) -> QueryAudit:
    """Audit a whole query on several neighbour pairs; α is split evenly among them.

    Each pair's samplers are called once with ``trials``; the pair's bound is taken at
    ``alpha/len(pairs)``, so the largest of them exceeds the query's true loss with
    probability ≤ ``alpha``. The pairs must be finite (a generator is consumed).

    Returns:
        The :class:`QueryAudit`; ``.passed`` is the test of ``claimed``.
    """
    chosen = list(pairs)
    if not chosen:
        raise InvalidParameter("give at least one pair of neighbouring datasets")
    if not isinstance(trials, int) or isinstance(trials, bool) or trials < 10:
        raise InvalidParameter("trials must be an integer ≥ 10")
    if not (isinstance(claimed, float | int) and claimed >= 0 and math.isfinite(claimed)):
        raise InvalidParameter("the claimed loss must be a finite number ≥ 0")
    if not (isinstance(alpha, float | int) and 0.0 < alpha < 0.5):
        raise InvalidParameter("alpha must be in (0, 0.5), e.g. 1e-7")
    each = alpha / len(chosen)
    results: list[tuple[str, EmpiricalLoss]] = []
    for pair in chosen:
        if not isinstance(pair, NeighbourPair):
            raise InvalidParameter("pairs must be deniable.audit.NeighbourPair objects")
        a = _draw(pair.sampler_a, trials)
        b = _draw(pair.sampler_b, trials)
        est = estimate_query_loss(
            a,
            b,
            measure=measure,
            alpha=each,
            delta=delta,
            names=names,
            max_events=max_events,
            max_coordinates=max_coordinates,
        )
        results.append((pair.label, est))
    worst = max(results, key=lambda r: r[1].lower)[1]
    overall = EmpiricalLoss(
        worst.measure,
        worst.lower,
        max(r[1].point for r in results),
        float(alpha),
        float(delta),
        worst.events,
    )
    return QueryAudit(float(claimed), measure, overall, tuple(results), trials)


def audit_query(
    sampler_a: QuerySampler,
    sampler_b: QuerySampler,
    *,
    trials: int,
    claimed: float,
    measure: Measure = "epsilon",
    alpha: float = 1e-7,
    delta: float = 0.0,
    names: Sequence[str] | None = None,
    max_events: int = 8,
    max_coordinates: int = 16,
) -> QueryAudit:
    """Audit a whole query on one pair of neighbouring datasets (see :func:`audit_query_pairs`).

    Args:
        sampler_a: ``sampler_a(n)``: ``n`` releases of the query on ``D``, an ``(n, k)`` array.
        sampler_b: the same on a neighbour ``D'``.
        trials: releases drawn on each.
        claimed: the ε (or ρ) the query claims to spend.
        measure: ``"epsilon"`` or ``"rho"``.
        alpha: false-failure probability for an honest query (default 1e-7).
        delta: the δ of an ``(ε, δ)`` claim.
        names: one name per released output, for reports.
        max_events: Bonferroni count of tested (event, direction) pairs.
        max_coordinates: most single outputs considered as statistics.
    """
    return audit_query_pairs(
        [NeighbourPair("D vs D'", sampler_a, sampler_b)],
        trials=trials,
        claimed=claimed,
        measure=measure,
        alpha=alpha,
        delta=delta,
        names=names,
        max_events=max_events,
        max_coordinates=max_coordinates,
    )


def audit_release(
    release: Callable[[D], npt.ArrayLike],
    neighbours: Iterable[tuple[D, D]],
    *,
    trials: int,
    claimed: float,
    measure: Measure = "epsilon",
    alpha: float = 1e-7,
    delta: float = 0.0,
    names: Sequence[str] | None = None,
) -> QueryAudit:
    """Audit ``release(dataset) -> vector`` (one whole release per call) on neighbour pairs.

    The general, slow path: every trial runs ``release`` once. ``neighbours`` yields pairs
    ``(D, D')`` (finite); α is split evenly among them.

    Examples:
        >>> from deniable.mechanisms import coin_randomized_response
        >>> def survey(bits):
        ...     return coin_randomized_response(bits, q=0.5).value
        >>> audit_release(survey, [([1, 0], [0, 0])], trials=4000, claimed=math.log(3)).passed
        True
    """
    pairs = [
        NeighbourPair(
            f"pair {i}",
            repeat(_bind(release, d)),
            repeat(_bind(release, d2)),
        )
        for i, (d, d2) in enumerate(neighbours)
    ]
    return audit_query_pairs(
        pairs,
        trials=trials,
        claimed=claimed,
        measure=measure,
        alpha=alpha,
        delta=delta,
        names=names,
    )


def _bind(release: Callable[[D], npt.ArrayLike], dataset: D) -> Callable[[], npt.ArrayLike]:
    return lambda: release(dataset)


def _draw(sampler: QuerySampler, n: int) -> F64:
    out = _matrix(sampler(n), "a sampler's output")
    if out.shape[0] != n:
        raise InvalidParameter("a sampler must return exactly n releases (one per row)")
    return out
