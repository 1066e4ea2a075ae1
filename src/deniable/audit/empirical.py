"""Empirical privacy loss: a statistical lower bound on ε (or ρ) from samples of a mechanism.

Run a mechanism ``M`` many times on two neighbouring inputs ``D`` and ``D'`` and keep the
outputs: ``sample_a`` from ``M(D)``, ``sample_b`` from ``M(D')``. For every event ``E`` (a set
of outputs), ε-DP promises ``P[M(D) ∈ E] ≤ e^ε·P[M(D') ∈ E] + δ`` in both directions, and
ρ-zCDP promises, by the data-processing inequality for Rényi divergences, that the pair of
Bernoulli laws ``(P[M(D) ∈ E], P[M(D') ∈ E])`` has ``D_λ ≤ ρλ`` for every order ``λ > 1``.
This module turns the observed frequencies into a *lower confidence bound* on the loss those
events exhibit:

``lower = max over tested events E and both directions of  ln((p̲_a(E) − δ) / p̄_b(E))``

(for ρ, the binary Rényi bound of :func:`renyi_rho` at ``(p̲_a(E), p̄_b(E))`` instead),

where ``p̲`` and ``p̄`` are one-sided Clopper–Pearson bounds (exact binomial, no normal
approximation; :func:`~deniable.stats.clopper_pearson_lower`, the package's one
implementation, in :mod:`deniable.stats`). Each of the ``2m`` one-sided bounds used for ``m`` tested
(event, direction) pairs has level ``α/(2m)`` (Bonferroni), so

``P[lower > the true largest log-ratio over the tested events] ≤ α``,

whatever the mechanism. A mechanism that really is ε-DP therefore gets ``lower > ε`` with
probability at most ``α`` (``1e-7`` by default): a statistical test that says "fail" when
``lower > claimed ε`` has a false-failure probability below ``α``. The estimator never claims
a mechanism *is* private; it can only catch one that is not (as in Ding et al., CCS 2018, and
the auditing literature).

Which events? If the caller gives none, they are chosen from the data *without* spending the
guarantee: the first ``selection_fraction`` of each sample is used only to choose events, the
rest only to test them, so the tested events are independent of the test data and the
Bonferroni count is exact. Candidate events are built from the pooled selection sample:

* cells — each output value with enough mass on its own, runs of rarer neighbouring values
  merged (integers), or quantile bins (reals), the two tails merged into the outer cells;
* thresholds — every ``{x ≤ e}`` and ``{x > e}`` at a cell edge (for additive noise these are
  the most revealing events: the likelihood ratio is monotone in the output).

Each candidate and direction is scored on the selection part (a normal approximation of the
bound it would get on the test part), and the best ``max_events`` are tested. Events with
fewer than ``min_count`` selection hits in either sample are never chosen: "well-populated"
events only. Every sample must be independent draws, in the order drawn.

Nothing here draws randomness or touches private data beyond the samples it is handed: it is
a test harness, and its outputs are statistics of mechanism outputs (post-processing).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal

import numpy as np
import numpy.typing as npt

from deniable.errors import InvalidParameter
from deniable.stats import clopper_pearson_lower, clopper_pearson_upper

Measure = Literal["epsilon", "rho"]
Sampler = Callable[[int], npt.ArrayLike]
"""``sampler(n)`` returns ``n`` independent outputs of a mechanism on one fixed input."""

_ORDERS = np.exp(np.linspace(math.log(1.001), math.log(1e4), 600))
"""Rényi orders over which ``sup_λ D_λ/λ`` is taken (any order gives a valid bound)."""


@dataclass(frozen=True, slots=True)
class Event:
    """An event given by the caller: a name and a vectorised membership test.

    Attributes:
        name: what the event is, for reports (e.g. ``"x ≤ 41"``).
        contains: maps an array of outputs (as float64; booleans are 0/1) to a boolean array
            of the same length.
    """

    name: str
    contains: Callable[[npt.NDArray[np.float64]], npt.ArrayLike]


@dataclass(frozen=True, slots=True)
class EventBound:
    """The evidence one tested (event, direction) gives.

    ``direction`` is ``"a/b"`` when the statistic compares ``P_a(E)`` above ``P_b(E)`` and
    ``"b/a"`` for the reverse. ``lower`` is this pair's lower confidence bound (already
    corrected for the number of pairs tested), ``point`` the plug-in value.
    """

    event: str
    direction: Literal["a/b", "b/a"]
    count_a: int
    count_b: int
    n_a: int
    n_b: int
    point: float
    lower: float


@dataclass(frozen=True, slots=True)
class EmpiricalLoss:
    """A lower confidence bound on a mechanism's privacy loss, from samples.

    Attributes:
        measure: ``"epsilon"`` (pure or approximate DP, at ``delta``) or ``"rho"`` (zCDP).
        lower: ``P[lower > true loss] ≤ alpha``; 0 when no event shows anything.
        point: the largest plug-in estimate over the tested events (optimistic; for reading).
        alpha: the overall false-alarm probability of ``lower``.
        delta: the δ subtracted (``"epsilon"`` only; 0 for pure DP).
        events: the tested (event, direction) pairs, best lower bound first.
    """

    measure: Measure
    lower: float
    point: float
    alpha: float
    delta: float
    events: tuple[EventBound, ...]

    def refutes(self, claimed: float) -> bool:
        """Whether the samples show, at confidence ``1 − alpha``, a loss above ``claimed``."""
        return self.lower > claimed

    def passes(self, claimed: float) -> bool:
        """Whether ``claimed`` survives the test (``lower ≤ claimed``)."""
        return not self.refutes(claimed)


# ----------------------------------------------------------------------------- statistics


def _epsilon_stat(delta: float) -> Callable[[float, float], float]:
    def stat(p_num: float, p_den: float) -> float:
        top = p_num - delta
        if top <= 0.0:
            return -math.inf
        if p_den <= 0.0:
            return math.inf
        return math.log(top) - math.log(p_den)

    return stat


def binary_renyi(p: float, q: float, order: float) -> float:
    """Rényi divergence ``D_λ(Bern(p) ‖ Bern(q))`` of order ``λ > 1`` (natural log).

    Examples:
        >>> round(binary_renyi(0.5, 0.5, 2.0), 12)
        0.0
    """
    if order <= 1.0:
        raise InvalidParameter("the Rényi order must be > 1")
    if not (0.0 <= p <= 1.0 and 0.0 <= q <= 1.0):
        raise InvalidParameter("p and q must be probabilities")
    terms = []
    for x, y in ((p, q), (1.0 - p, 1.0 - q)):
        if x == 0.0:
            continue
        if y == 0.0:
            return math.inf
        terms.append(order * math.log(x) + (1.0 - order) * math.log(y))
    top = max(terms)
    return (top + math.log(sum(math.exp(t - top) for t in terms))) / (order - 1.0)


def renyi_rho(p: float, q: float) -> float:
    """The zCDP parameter the pair ``(Bern(p), Bern(q))`` needs: ``sup_λ D_λ/λ``, ``p ≥ q``.

    The supremum is taken over a fixed grid of orders in ``(1, 10⁴]`` and the limit ``λ → 1``
    (the KL divergence); every order gives a valid lower bound, so the grid only makes the
    result (slightly) conservative. Returns 0 when ``p ≤ q``: the reverse direction is a
    separate event.

    Examples:
        >>> renyi_rho(0.3, 0.3)
        0.0
        >>> round(renyi_rho(0.5, 0.25), 3)
        0.146
    """
    if not (0.0 <= p <= 1.0 and 0.0 <= q <= 1.0):
        raise InvalidParameter("p and q must be probabilities")
    if p <= q:
        return 0.0
    if q <= 0.0:
        return math.inf
    lam = _ORDERS
    terms = [lam * math.log(p) + (1.0 - lam) * math.log(q)]
    if p < 1.0:  # then q < p < 1 too
        terms.append(lam * math.log1p(-p) + (1.0 - lam) * math.log1p(-q))
    d = np.logaddexp.reduce(np.vstack(terms), axis=0) / (lam - 1.0)
    # λ → 1 gives the Kullback–Leibler divergence, which ρ-zCDP also bounds by ρ.
    kl = p * math.log(p / q) + ((1.0 - p) * math.log((1.0 - p) / (1.0 - q)) if p < 1.0 else 0.0)
    return max(0.0, kl, float(np.max(d / lam)))


def _rho_stat(p_num: float, p_den: float) -> float:
    if p_num <= 0.0:
        return -math.inf
    return renyi_rho(min(p_num, 1.0), min(max(p_den, 0.0), 1.0))


# ----------------------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class _Cells:
    """A partition of the real line by edges: cell j is ``(edges[j−1], edges[j]]``."""

    edges: npt.NDArray[np.float64]

    @property
    def size(self) -> int:
        return int(self.edges.size) + 1

    def index(self, x: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
        return np.searchsorted(self.edges, x, side="left").astype(np.int64)

    def counts(self, x: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
        return np.bincount(self.index(x), minlength=self.size).astype(np.int64)

    def name(self, lo: int, hi: int) -> str:
        """Describe the union of cells ``lo..hi`` (inclusive)."""
        left = None if lo == 0 else _fmt(float(self.edges[lo - 1]))
        right = None if hi == self.size - 1 else _fmt(float(self.edges[hi]))
        if left is None and right is None:
            return "any output"
        if left is None:
            return f"x ≤ {right}"
        if right is None:
            return f"x > {left}"
        return f"{left} < x ≤ {right}"


def _fmt(v: float) -> str:
    return str(int(v)) if v.is_integer() and abs(v) < 2**53 else f"{v:.10g}"


def _cells(pooled: npt.NDArray[np.float64], target: int) -> _Cells:
    """Cells of at least ``target`` pooled selection outputs, edges between distinct values."""
    values, counts = np.unique(pooled, return_counts=True)
    edges: list[float] = []
    acc = 0
    for v, c in zip(values.tolist(), counts.tolist(), strict=True):
        acc += c
        if acc >= target:
            edges.append(v)
            acc = 0
    # The last edge goes: the outputs after it (fewer than ``target``, maybe none) join the
    # last full cell, which thereby reaches +inf.
    edges = edges[:-1]
    return _Cells(np.asarray(edges, dtype=np.float64))


def _ranges(k: int) -> list[tuple[int, int]]:
    """Cells, prefixes and suffixes of ``k`` cells as inclusive index ranges (no duplicates)."""
    out = {(j, j) for j in range(k)}
    out.update((0, j) for j in range(k - 1))
    out.update((j, k - 1) for j in range(1, k))
    out.discard((0, k - 1))
    return sorted(out)


def _range_counts(cell_counts: npt.NDArray[np.int64], ranges: list[tuple[int, int]]) -> list[int]:
    cum = np.concatenate([[0], np.cumsum(cell_counts)])
    return [int(cum[hi + 1] - cum[lo]) for lo, hi in ranges]


# ----------------------------------------------------------------------------- estimator


def _as_numeric(sample: npt.ArrayLike, name: str) -> npt.NDArray[np.float64]:
    x = np.asarray(sample)
    if x.ndim != 1:
        x = x.ravel()
    if x.dtype.kind not in "biuf":
        raise InvalidParameter(f"{name} must hold numbers or booleans (map outputs first)")
    xf = x.astype(np.float64)
    if not np.isfinite(xf).all():
        raise InvalidParameter(f"{name} must be finite")
    if x.dtype.kind in "iu" and x.size and float(np.max(np.abs(xf))) >= 2.0**53:
        raise InvalidParameter(f"{name}: integer outputs must be below 2^53 in magnitude")
    return xf


def _check_common(alpha: float, delta: float, min_count: int, max_events: int) -> None:
    if not (isinstance(alpha, float | int) and 0.0 < alpha < 0.5):
        raise InvalidParameter("alpha must be in (0, 0.5), e.g. 1e-7")
    if not (isinstance(delta, float | int) and 0.0 <= delta < 1.0):
        raise InvalidParameter("delta must be in [0, 1)")
    if not isinstance(min_count, int) or min_count < 1:
        raise InvalidParameter("min_count must be a positive integer")
    if not isinstance(max_events, int) or max_events < 1:
        raise InvalidParameter("max_events must be a positive integer")


@dataclass(frozen=True, slots=True)
class _Tested:
    """An (event, direction) pair with its counts on the test data."""

    name: str
    direction: Literal["a/b", "b/a"]
    count_a: int
    count_b: int


def _estimate(
    sample_a: npt.ArrayLike,
    sample_b: npt.ArrayLike,
    *,
    measure: Measure,
    alpha: float,
    delta: float,
    events: Sequence[Event] | None,
    min_count: int,
    max_events: int,
    max_cells: int,
    selection_fraction: float,
) -> EmpiricalLoss:
    _check_common(alpha, delta, min_count, max_events)
    stat = _epsilon_stat(float(delta)) if measure == "epsilon" else _rho_stat
    a = _as_numeric(sample_a, "sample_a")
    b = _as_numeric(sample_b, "sample_b")
    if events is not None:
        tested = _given_events(a, b, events)
        n_a, n_b = a.size, b.size
    else:
        if not (isinstance(selection_fraction, float) and 0.0 < selection_fraction < 1.0):
            raise InvalidParameter("selection_fraction must be in (0, 1)")
        if not isinstance(max_cells, int) or max_cells < 2:
            raise InvalidParameter("max_cells must be an integer ≥ 2")
        sel_a, sel_b = int(a.size * selection_fraction), int(b.size * selection_fraction)
        if min(sel_a, a.size - sel_a, sel_b, b.size - sel_b) < 1:
            raise InvalidParameter("samples too small to split into selection and test parts")
        tested = _select_and_count(
            (a[:sel_a], a[sel_a:]),
            (b[:sel_b], b[sel_b:]),
            stat=stat,
            alpha=alpha,
            min_count=min_count,
            max_events=max_events,
            max_cells=max_cells,
        )
        n_a, n_b = a.size - sel_a, b.size - sel_b
    return _bound(tested, n_a, n_b, measure=measure, alpha=alpha, delta=delta)


def _bound(
    tested: Sequence[_Tested],
    n_a: int,
    n_b: int,
    *,
    measure: Measure,
    alpha: float,
    delta: float,
) -> EmpiricalLoss:
    """Clopper–Pearson bounds of the tested pairs, Bonferroni over ``2·len(tested)`` bounds.

    ``tested`` must not depend on the counted data (fixed events, or events chosen on a
    separate selection split): then ``P[lower > the true largest loss] ≤ alpha``.
    """
    stat = _epsilon_stat(float(delta)) if measure == "epsilon" else _rho_stat
    if not tested:
        return EmpiricalLoss(measure, 0.0, 0.0, float(alpha), float(delta), ())
    beta = alpha / (2 * len(tested))  # two one-sided bounds per tested pair
    bounds = []
    for t in tested:
        if t.direction == "a/b":
            k_num, n_num, k_den, n_den = t.count_a, n_a, t.count_b, n_b
        else:
            k_num, n_num, k_den, n_den = t.count_b, n_b, t.count_a, n_a
        lo_num = clopper_pearson_lower(k_num, n_num, beta)
        hi_den = clopper_pearson_upper(k_den, n_den, beta)
        bounds.append(
            EventBound(
                event=t.name,
                direction=t.direction,
                count_a=t.count_a,
                count_b=t.count_b,
                n_a=n_a,
                n_b=n_b,
                point=stat(k_num / n_num, k_den / n_den),
                lower=stat(lo_num, hi_den),
            )
        )
    bounds.sort(key=lambda e: e.lower, reverse=True)
    lower = max(0.0, bounds[0].lower)
    point = max(0.0, max(e.point for e in bounds))
    return EmpiricalLoss(measure, lower, point, float(alpha), float(delta), tuple(bounds))


def _given_events(
    a: npt.NDArray[np.float64], b: npt.NDArray[np.float64], events: Sequence[Event]
) -> list[_Tested]:
    if not events:
        raise InvalidParameter("events must not be empty (or pass None to choose them)")
    tested: list[_Tested] = []
    for ev in events:
        if not isinstance(ev, Event):
            raise InvalidParameter("events must be deniable.audit.Event objects")
        ca, cb = _count_event(ev, a), _count_event(ev, b)
        tested.append(_Tested(ev.name, "a/b", ca, cb))
        tested.append(_Tested(ev.name, "b/a", ca, cb))
    return tested


def _count_event(ev: Event, x: npt.NDArray[np.float64]) -> int:
    inside = np.asarray(ev.contains(x))
    if inside.shape != x.shape or inside.dtype.kind != "b":
        raise InvalidParameter(f"event {ev.name!r} must return one boolean per output")
    return int(inside.sum())


def _score(
    ra: Sequence[int],
    rb: Sequence[int],
    n_sel: tuple[int, int],
    n_test: tuple[int, int],
    *,
    stat: Callable[[float, float], float],
    alpha: float,
    min_count: int,
    max_events: int,
    min_denominator: int | None = None,
) -> list[tuple[float, int, Literal["a/b", "b/a"]]]:
    """Score candidate events from their selection counts, best first.

    Score: the bound a pair would get on the test part, by a normal approximation at the
    Bonferroni level of ``max_events`` pairs. Only a heuristic: validity does not depend on
    it. A direction is left out when its numerator event has fewer than ``min_count``
    selection hits or its denominator event fewer than ``min_denominator`` (default
    ``min_count``: well-populated events only). With ``min_denominator = 0`` an event never
    seen on the other side is scored with one pseudo-hit there.
    """
    floor = min_count if min_denominator is None else min_denominator
    z = NormalDist().inv_cdf(1.0 - alpha / (2 * max_events))
    scored: list[tuple[float, int, Literal["a/b", "b/a"]]] = []
    for i, (ca, cb) in enumerate(zip(ra, rb, strict=True)):
        pa, pb = max(ca, 1) / n_sel[0], max(cb, 1) / n_sel[1]
        sa = z * math.sqrt(pa * (1 - pa) / n_test[0])
        sb = z * math.sqrt(pb * (1 - pb) / n_test[1])
        if ca >= min_count and cb >= floor:
            scored.append((stat(pa - sa, pb + sb), i, "a/b"))
        if cb >= min_count and ca >= floor:
            scored.append((stat(pb - sb, pa + sa), i, "b/a"))
    scored = [s for s in scored if s[0] > -math.inf]
    scored.sort(key=lambda s: s[0], reverse=True)
    return scored


def _select_and_count(
    part_a: tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]],
    part_b: tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]],
    *,
    stat: Callable[[float, float], float],
    alpha: float,
    min_count: int,
    max_events: int,
    max_cells: int,
) -> list[_Tested]:
    """Choose up to ``max_events`` pairs on the selection parts; count them on the test parts."""
    (sel_a, test_a), (sel_b, test_b) = part_a, part_b
    pooled = np.concatenate([sel_a, sel_b])
    cells = _cells(pooled, max(min_count, math.ceil(pooled.size / max_cells)))
    ranges = _ranges(cells.size)
    if not ranges:
        return []
    ra = _range_counts(cells.counts(sel_a), ranges)
    rb = _range_counts(cells.counts(sel_b), ranges)
    # Score: the bound a pair would get on the test part, by a normal approximation at the
    # Bonferroni level of max_events pairs. Only a heuristic: validity does not depend on it.
    scored = _score(
        ra,
        rb,
        (sel_a.size, sel_b.size),
        (test_a.size, test_b.size),
        stat=stat,
        alpha=alpha,
        min_count=min_count,
        max_events=max_events,
    )
    chosen = scored[:max_events]
    ta = _range_counts(cells.counts(test_a), [ranges[i] for _, i, _ in chosen])
    tb = _range_counts(cells.counts(test_b), [ranges[i] for _, i, _ in chosen])
    return [
        _Tested(cells.name(*ranges[i]), direction, ca, cb)
        for (_, i, direction), ca, cb in zip(chosen, ta, tb, strict=True)
    ]


# ----------------------------------------------------------------------------- public API


def estimate_epsilon(
    sample_a: npt.ArrayLike,
    sample_b: npt.ArrayLike,
    *,
    alpha: float = 1e-7,
    delta: float = 0.0,
    events: Sequence[Event] | None = None,
    min_count: int = 10,
    max_events: int = 8,
    max_cells: int = 64,
    selection_fraction: float = 0.2,
) -> EmpiricalLoss:
    """Lower confidence bound on the ε (at ``delta``) shown by two samples of a mechanism.

    Args:
        sample_a: independent outputs of ``M(D)``, in the order drawn (numbers or booleans).
        sample_b: independent outputs of ``M(D')`` for a neighbour ``D'`` of ``D``.
        alpha: probability that ``lower`` exceeds the true largest log-ratio over the tested
            events (so a truly ``(ε, δ)``-DP mechanism is refuted with probability ≤ alpha).
        delta: the δ of the claim under test; ``ln((P_a(E) − δ)/P_b(E))`` is bounded.
        events: fixed events to test (all of them, both directions, on all the data); by
            default events are chosen on a selection split (module docstring).
        min_count: fewest selection-part hits, in each sample, of an event that may be chosen.
        max_events: most (event, direction) pairs tested (the Bonferroni count).
        max_cells: most cells in the partition the candidate events are built from.
        selection_fraction: share of each sample used only to choose events.

    Returns:
        The :class:`EmpiricalLoss`; ``.passes(claimed_epsilon)`` is the test.

    Examples:
        >>> from deniable.mechanisms import geometric
        >>> from deniable.noise.testing import SeededRandom
        >>> a = geometric([41] * 20000, sensitivity=1, epsilon=1, source=SeededRandom(1)).value
        >>> b = geometric([42] * 20000, sensitivity=1, epsilon=1, source=SeededRandom(2)).value
        >>> est = estimate_epsilon(a, b)
        >>> est.passes(1.0), est.lower > 0.5
        (True, True)
    """
    return _estimate(
        sample_a,
        sample_b,
        measure="epsilon",
        alpha=alpha,
        delta=delta,
        events=events,
        min_count=min_count,
        max_events=max_events,
        max_cells=max_cells,
        selection_fraction=selection_fraction,
    )


def estimate_rho(
    sample_a: npt.ArrayLike,
    sample_b: npt.ArrayLike,
    *,
    alpha: float = 1e-7,
    events: Sequence[Event] | None = None,
    min_count: int = 10,
    max_events: int = 8,
    max_cells: int = 64,
    selection_fraction: float = 0.2,
) -> EmpiricalLoss:
    """Lower confidence bound on the zCDP ρ shown by two samples of a mechanism.

    ρ-zCDP means ``D_λ(M(D) ‖ M(D')) ≤ ρλ`` for all ``λ > 1``; post-processing an output into
    the indicator of an event cannot increase a Rényi divergence, so every event ``E`` gives
    ``ρ ≥ sup_λ D_λ(Bern(P_a(E)) ‖ Bern(P_b(E)))/λ``. The binary divergence grows as
    ``P_a(E)`` rises above ``P_b(E)`` and as ``P_b(E)`` falls, so plugging in the one-sided
    Clopper–Pearson bounds gives a lower confidence bound; the rest (selection split,
    Bonferroni over ``2·max_events`` bounds) is as in :func:`estimate_epsilon`.

    Examples:
        >>> from deniable.mechanisms import discrete_gaussian
        >>> from deniable.noise.testing import SeededRandom
        >>> a = discrete_gaussian([0] * 20000, sensitivity=1, rho=0.5, source=SeededRandom(1))
        >>> b = discrete_gaussian([1] * 20000, sensitivity=1, rho=0.5, source=SeededRandom(2))
        >>> estimate_rho(a.value, b.value).passes(0.5)
        True
    """
    return _estimate(
        sample_a,
        sample_b,
        measure="rho",
        alpha=alpha,
        delta=0.0,
        events=events,
        min_count=min_count,
        max_events=max_events,
        max_cells=max_cells,
        selection_fraction=selection_fraction,
    )


def audit_epsilon(
    sampler_a: Sampler,
    sampler_b: Sampler,
    *,
    n: int,
    alpha: float = 1e-7,
    delta: float = 0.0,
    events: Sequence[Event] | None = None,
    min_count: int = 10,
    max_events: int = 8,
) -> EmpiricalLoss:
    """Draw ``n`` outputs from each sampler and run :func:`estimate_epsilon` on them.

    Examples:
        >>> from deniable.mechanisms import coin_randomized_response
        >>> def answers(bit):
        ...     return lambda n: coin_randomized_response([bit] * n, q=0.5).value
        >>> audit_epsilon(answers(1), answers(0), n=20000).passes(math.log(3))
        True
    """
    a, b = _draw(sampler_a, n), _draw(sampler_b, n)
    return estimate_epsilon(
        a, b, alpha=alpha, delta=delta, events=events, min_count=min_count, max_events=max_events
    )


def audit_rho(
    sampler_a: Sampler,
    sampler_b: Sampler,
    *,
    n: int,
    alpha: float = 1e-7,
    events: Sequence[Event] | None = None,
    min_count: int = 10,
    max_events: int = 8,
) -> EmpiricalLoss:
    """Draw ``n`` outputs from each sampler and run :func:`estimate_rho` on them."""
    a, b = _draw(sampler_a, n), _draw(sampler_b, n)
    return estimate_rho(
        a, b, alpha=alpha, events=events, min_count=min_count, max_events=max_events
    )


def _draw(sampler: Sampler, n: int) -> npt.NDArray[np.generic]:
    if not isinstance(n, int) or isinstance(n, bool) or n < 2:
        raise InvalidParameter("n must be an integer ≥ 2")
    out = np.asarray(sampler(n))
    if out.shape != (n,):
        raise InvalidParameter("a sampler must return exactly n outputs as a 1-d array")
    return out
