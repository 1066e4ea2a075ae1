"""DP partition selection: which private group keys may appear in an answer.

Implements the optimal rule of Desfontaines, Voss, Gipson and Mandayam, "Differentially
private partition selection" (PoPETs 2022), Theorem 1: when each privacy unit contributes to
at most one partition, keeping a partition that has ``n`` units with probability ``π(n)``,

    π(0) = 0,
    π(n) = min( e^ε·π(n−1) + δ,  1 − e^(−ε)·(1 − π(n−1) − δ),  1 ),

is (ε, δ)-DP and keeps every partition with the largest possible probability. Adding one
unit moves one partition from ``n`` to ``n+1`` units; the two inequalities are exactly the
(ε, δ) constraints on "kept" and "dropped" for that pair, and ``π`` is non-decreasing, so
the reverse constraints hold too. A key held by a single unit is released with probability
``π(1) = δ`` (rounded down, see below).

When a unit may touch ``m`` partitions we run the rule with ``(ε/m, δ/m)`` per partition
(basic composition over the ``m`` partitions one unit can change), as the paper suggests
for ``m > 1``.

Exactness: ``π`` is computed in exact integer arithmetic on the grid ``2^-bits``, where
``bits`` (a multiple of 64, at least 64) is chosen from δ so that ``δ·2^bits ≥ 2^64``: every
``π(n)`` is rounded *down* onto the grid, using a certified lower bound of ``e^ε`` and upper
bound of ``e^(−ε)``, so every constraint holds for the probabilities actually used, and
``π(1) = floor(δ·2^bits)/2^bits`` is within a relative ``2^-64`` of δ and never above it,
however small δ is. Each keep/drop is an exact Bernoulli draw of that rational: a uniform
``U' = 0.w₀w₁w₂…`` (64-bit words from the secure source) is compared with the binary
expansion of ``π(n)`` word by word; the first word settles all but a ``2^-64`` fraction of
the partitions, and only those draw more words.

Per-partition δ below ``1e-300`` is refused (it would need more than a thousand bits and
releases nothing anyway), as are parameters needing more than ten million steps for ``π`` to
reach 1. :func:`check_selection` performs every check :func:`select` would, so a planner can
refuse such parameters before charging anything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property, lru_cache

import numpy as np
import numpy.typing as npt

from deniable.errors import InternalError, InvalidParameter
from deniable.noise.exact import RationalLike, exp_neg_bounds, to_fraction
from deniable.noise.source import RandomSource, resolve

_WORD = 64
_MASK = (1 << _WORD) - 1
_MAX_STEPS = 10_000_000
_MIN_DELTA = Fraction(1, 10**300)
"""Smallest δ per partition: below it, partition selection releases nothing worth the bits."""
_MAX_BITS = 4096
"""Most bits of the grid of ``π``; ``_MIN_DELTA`` keeps ``bits`` near 1100, far below."""


@dataclass(frozen=True)
class KeepProbabilities:
    """``π(n)`` as integers over ``2^bits``: ``numerators[n] / 2^bits`` for ``n < len``, else 1.

    Attributes:
        epsilon: ε per partition.
        delta: δ per partition.
        bits: the grid: every ``π(n)`` is a multiple of ``2^-bits`` (a multiple of 64, ≥ 64).
        numerators: ``floor``-rounded ``π(n)·2^bits`` for ``n = 0 … n*−1``; ``π(n) = 1``
            from ``n*`` on.
    """

    epsilon: Fraction
    delta: Fraction
    bits: int
    numerators: tuple[int, ...]

    def probability(self, n: int) -> Fraction:
        """The exact keep probability of a partition with ``n`` units."""
        if n < 0:
            raise InvalidParameter("a number of units is ≥ 0")
        if n >= len(self.numerators):
            return Fraction(1)
        return Fraction(self.numerators[n], 1 << self.bits)

    @property
    def certain_from(self) -> int:
        """The least ``n`` kept with probability 1."""
        return len(self.numerators)

    @cached_property
    def leading_words(self) -> npt.NDArray[np.uint64]:
        """First 64-bit word of each ``π(n)``, ``n < n*``, then ``2^64 − 1`` standing for 1."""
        shift = self.bits - _WORD
        lead = [t >> shift for t in self.numerators]
        lead.append(_MASK)
        out = np.array(lead, dtype=np.uint64)
        out.flags.writeable = False
        return out

    def word(self, n: int, j: int) -> int:
        """Word ``j`` (0 = most significant) of the binary expansion of ``π(n)``, ``n < n*``."""
        return (self.numerators[n] >> (self.bits - _WORD * (j + 1))) & _MASK


def _grid_bits(delta: Fraction) -> int:
    """Least multiple of 64 (≥ 64) with ``δ·2^bits ≥ 2^64``, up to one extra bit of slack."""
    # δ = p/q ≥ 2^(len(p)−1) / 2^len(q) = 2^-low, so δ·2^(low+64) ≥ 2^64.
    low = max(0, delta.denominator.bit_length() - delta.numerator.bit_length() + 1)
    return _WORD * -(-(low + _WORD) // _WORD)


def _steps_lower_bound(eps: Fraction, dlt: Fraction) -> float:
    """A lower bound (up to float rounding) of the steps ``π`` needs to reach 1; 0 if unknown.

    ``π(n) ≤ e^ε·π(n−1) + δ`` gives ``π(n) ≤ δ·(e^(nε) − 1)/(e^ε − 1)``, so reaching 1 needs
    ``n ≥ ln(1 + (e^ε − 1)/δ)/ε``. Rounding down only slows ``π`` further.
    """
    e, d = float(eps), float(dlt)
    if not 0 < e <= 700 or d <= 0:
        return 0.0
    ratio_log = math.log(math.expm1(e)) - math.log(d)
    grow = ratio_log if ratio_log > 700 else math.log1p(math.exp(ratio_log))
    return grow / e


def _check_per_partition(eps: Fraction, dlt: Fraction) -> None:
    if eps <= 0:
        raise InvalidParameter("partition selection needs ε > 0")
    if not 0 < dlt < 1:
        raise InvalidParameter("partition selection needs 0 < δ < 1")
    if dlt < _MIN_DELTA:
        raise InvalidParameter(
            "δ per partition (δ divided by max_groups) is below 1e-300: partition selection "
            "would release nothing; spend a larger δ or lower max_groups"
        )


def _too_many_steps() -> InvalidParameter:
    return InvalidParameter(
        "ε and δ are too small for partition selection (the keep probability would "
        "need more than ten million steps to reach 1); spend more"
    )


@lru_cache(maxsize=16)
def _table(eps: Fraction, dlt: Fraction) -> KeepProbabilities:
    """The table of :func:`keep_probabilities` (parameters already checked; cached)."""
    if _steps_lower_bound(eps, dlt) > 2 * _MAX_STEPS:  # refuse at once, not after 10^7 steps
        raise _too_many_steps()
    bits = _grid_bits(dlt)
    if bits > _MAX_BITS:  # excluded by _MIN_DELTA; guard the arithmetic anyway
        raise InvalidParameter("δ is too small for partition selection")
    one = 1 << bits
    dp, dq = dlt.numerator, dlt.denominator
    # Precision of e^(−ε): finer than the grid, and than ε itself, so that 2^k/hi > 1.
    eps_bits = max(0, eps.denominator.bit_length() - eps.numerator.bit_length() + 1)
    k = bits + _WORD + eps_bits
    _, hi = exp_neg_bounds(eps, k)  # e^(−ε)·2^k ≤ hi, so e^ε ≥ 2^k/hi and e^(−ε) ≤ hi/2^k
    if not 0 < hi < (1 << k):
        raise InternalError("bounds of e^(−ε) out of range in partition selection")
    # With e_lo = 2^k/hi ≤ e^ε, f_hi = hi/2^k ≥ e^(−ε) and D = δ·2^bits, in units of 2^-bits:
    #   a = floor(e_lo·p + D)            = floor((p·2^k·q + d·2^bits·hi) / (hi·q))
    #   b = floor(2^bits − f_hi·(2^bits − p − D)) = 2^bits + floor(−hi·r / (2^k·q)),
    #       r = (2^bits − p)·q − d·2^bits.
    # Both exceed p by at least one unit (a − p ≥ D ≥ 2^64; b − p is a convex combination
    # of 2^bits − p ≥ 1 and D with weights 1 − f_hi, f_hi), so the loop always advances.
    den_a = hi * dq
    add_a = (dp * hi) << bits
    d_units = dp << bits
    den_b = dq << k
    nums = [0]
    p = 0
    while p < one:
        if len(nums) > _MAX_STEPS:
            raise _too_many_steps()
        a = ((p << k) * dq + add_a) // den_a
        b = one + (-hi * ((one - p) * dq - d_units)) // den_b
        nxt = min(a, b, one)
        if nxt <= p:
            raise InternalError("partition selection's keep probability did not increase")
        p = nxt
        if p < one:
            nums.append(p)
    return KeepProbabilities(eps, dlt, bits, tuple(nums))


def keep_probabilities(epsilon: RationalLike, delta: RationalLike) -> KeepProbabilities:
    """Compute the optimal ``π`` for one partition per unit at ``(epsilon, delta)``.

    Every ``π(n)`` is rounded down onto a grid ``2^-bits`` fine enough for δ, so
    ``π(1) ≤ δ`` and ``π(1) ≥ δ·(1 − 2^-64)``; the tables are cached.

    Raises:
        InvalidParameter: ε ≤ 0, δ not in [1e-300, 1), or parameters so small that ``π``
            would need more than ten million steps to reach 1.

    Examples:
        >>> p = keep_probabilities(Fraction(1), Fraction(1, 10**6))
        >>> p.probability(1) <= Fraction(1, 10**6)
        True
        >>> p.probability(10**6)
        Fraction(1, 1)
    """
    eps, dlt = to_fraction(epsilon, "epsilon"), to_fraction(delta, "delta")
    _check_per_partition(eps, dlt)
    return _table(eps, dlt)


def _selection_table(
    epsilon: RationalLike, delta: RationalLike, max_groups: int
) -> KeepProbabilities:
    if isinstance(max_groups, bool) or not isinstance(max_groups, int) or max_groups < 1:
        raise InvalidParameter("max_groups must be a positive integer")
    eps, dlt = to_fraction(epsilon, "epsilon"), to_fraction(delta, "delta")
    if not 0 < dlt < 1:
        raise InvalidParameter("partition selection needs 0 < δ < 1")
    return keep_probabilities(eps / max_groups, dlt / max_groups)


def check_selection(epsilon: RationalLike, delta: RationalLike, max_groups: int) -> None:
    """Refuse parameters :func:`select` would refuse; spends nothing, releases nothing.

    Call it before charging ``(epsilon, delta)`` for a selection: it performs the same checks
    (and computes and caches the same table) as :func:`select`, so a selection that passes
    here cannot fail on its parameters at release time.

    Raises:
        InvalidParameter: ``max_groups`` not a positive integer, ε ≤ 0, δ not in (0, 1),
            ``δ/max_groups < 1e-300``, or ``(ε/max_groups, δ/max_groups)`` so small that the
            keep probability would need more than ten million steps to reach 1.

    Examples:
        >>> check_selection(Fraction(1), Fraction(1, 10**9), 4)
        >>> check_selection(Fraction(1), Fraction(1, 10**300), 2)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        deniable.errors.InvalidParameter: δ per partition (δ divided by max_groups) is below...
    """
    _selection_table(epsilon, delta, max_groups)


def _break_ties(
    out: npt.NDArray[np.bool_],
    tied: npt.NDArray[np.intp],
    levels: npt.NDArray[np.int64],
    table: KeepProbabilities,
    source: RandomSource,
) -> None:
    """Settle the partitions whose first word equals ``π``'s: draw more words, in order.

    ``out`` is False at ``tied`` on entry. Word ``j`` of the uniform is compared with word
    ``j`` of ``π(n)``; the first difference decides. If all ``bits/64`` words are equal the
    uniform is ``≥ π(n)`` (``π(n)`` is on the grid), so the partition is dropped.
    """
    certain = levels >= table.certain_from
    out[tied[certain]] = True  # π = 1 (leading word 2^64 − 1 stood for it)
    active, lv = tied[~certain], levels[~certain]
    for j in range(1, table.bits // _WORD):
        if not active.size:
            break
        words = source.words(active.size)
        thr = np.array([table.word(int(n), j) for n in lv], dtype=np.uint64)
        out[active[words < thr]] = True
        same = words == thr
        active, lv = active[same], lv[same]


def select(
    units: npt.ArrayLike,
    *,
    epsilon: RationalLike,
    delta: RationalLike,
    max_groups: int,
    source: RandomSource | None = None,
) -> npt.NDArray[np.bool_]:
    """Decide which partitions to release from their numbers of privacy units; (ε, δ)-DP.

    Each partition with ``n`` units is kept independently with probability exactly
    ``π(n)`` of :func:`keep_probabilities` at ``(ε/max_groups, δ/max_groups)``; over the
    at most ``max_groups`` partitions one unit changes, the mask is (ε, δ)-DP.

    Args:
        units: number of distinct privacy units of each partition (after contribution
            bounding, so each unit is in at most ``max_groups`` partitions); one dimension.
        epsilon: ε of the whole selection.
        delta: δ of the whole selection.
        max_groups: most partitions one unit contributes to.
        source: randomness (default: the OS CSPRNG).

    Returns:
        A boolean mask: True for the partitions whose keys may be released.

    Raises:
        InvalidParameter: as :func:`check_selection`, or a negative number of units.

    Examples:
        >>> from deniable.noise.testing import SeededRandom
        >>> mask = select([1, 10_000], epsilon=Fraction(1), delta=Fraction(1, 10**9),
        ...               max_groups=1, source=SeededRandom(0))
        >>> bool(mask[1])
        True
    """
    table = _selection_table(epsilon, delta, max_groups)
    n = np.asarray(units, dtype=np.int64).reshape(-1)
    if n.size and int(n.min()) < 0:
        raise InvalidParameter("numbers of units are ≥ 0")
    src = resolve(source)
    words = src.words(n.size)
    level = np.minimum(n, table.certain_from)
    lead = table.leading_words[level]
    # U' < π(n) is settled by the first word unless it equals π(n)'s (probability 2^-64).
    out: npt.NDArray[np.bool_] = words < lead
    tied = np.flatnonzero(words == lead)
    if tied.size:
        _break_ties(out, tied, level[tied], table, src)
    return out
