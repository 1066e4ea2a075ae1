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
``π(1) = δ``.

When a unit may touch ``m`` partitions we run the rule with ``(ε/m, δ/m)`` per partition
(basic composition over the ``m`` partitions one unit can change), as the paper suggests
for ``m > 1``.

Exactness: ``π`` is computed in exact rational arithmetic on the grid ``2^-64``, rounding
*down* and using a certified lower bound of ``e^ε`` and upper bound of ``e^(−ε)``, so every
constraint holds for the probabilities actually used; each keep/drop is then an exact
Bernoulli draw ``word < π·2^64`` on a uniform 64-bit word from the secure source.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from deniable.errors import InvalidParameter
from deniable.noise.exact import exp_neg_bounds
from deniable.noise.source import RandomSource, resolve

SCALE_BITS = 64
_ONE = 1 << SCALE_BITS
_MAX_STEPS = 10_000_000


@dataclass(frozen=True)
class KeepProbabilities:
    """``π(n)`` as integers over ``2^64``: ``numerators[n] / 2^64`` for ``n < len``, else 1.

    Attributes:
        epsilon: ε per partition.
        delta: δ per partition.
        numerators: ``floor``-rounded ``π(n)·2^64`` for ``n = 0 … n*−1``; ``π(n) = 1`` from
            ``n*`` on.
    """

    epsilon: Fraction
    delta: Fraction
    numerators: tuple[int, ...]

    def probability(self, n: int) -> Fraction:
        """The exact keep probability of a partition with ``n`` units."""
        if n < 0:
            raise InvalidParameter("a number of units is ≥ 0")
        if n >= len(self.numerators):
            return Fraction(1)
        return Fraction(self.numerators[n], _ONE)

    @property
    def certain_from(self) -> int:
        """The least ``n`` kept with probability 1."""
        return len(self.numerators)


def keep_probabilities(epsilon: Fraction, delta: Fraction) -> KeepProbabilities:
    """Compute the optimal ``π`` for one partition per unit at ``(epsilon, delta)``.

    Raises:
        InvalidParameter: ε ≤ 0, δ not in (0, 1), or parameters so small that ``π`` would
            need more than ten million steps to reach 1.

    Examples:
        >>> p = keep_probabilities(Fraction(1), Fraction(1, 10**6))
        >>> p.probability(1) <= Fraction(1, 10**6)
        True
        >>> p.probability(10**6)
        Fraction(1, 1)
    """
    eps, dlt = Fraction(epsilon), Fraction(delta)
    if eps <= 0:
        raise InvalidParameter("partition selection needs ε > 0")
    if not 0 < dlt < 1:
        raise InvalidParameter("partition selection needs 0 < δ < 1")
    k = 80
    _, hi = exp_neg_bounds(eps, k)  # e^(−ε)·2^k ≤ hi
    # e^ε ≥ 2^k/hi and e^(−ε) ≤ hi/2^k: using these keeps every constraint satisfied.
    e_lo = Fraction(1 << k, hi)
    f_hi = Fraction(hi, 1 << k)
    d_units = dlt * _ONE
    nums = [0]
    p = 0
    while p < _ONE:
        if len(nums) > _MAX_STEPS:
            raise InvalidParameter(
                "ε and δ are too small for partition selection (the keep probability would "
                "need more than ten million steps to reach 1); spend more"
            )
        a = e_lo * p + d_units
        b = _ONE - f_hi * (_ONE - p - d_units)
        nxt = min(a, b, Fraction(_ONE))
        nxt_int = int(nxt)  # floor: rounding down keeps every constraint
        if nxt_int <= p:  # cannot happen for ε, δ > 0; guard the loop anyway
            nxt_int = p + 1
        p = min(nxt_int, _ONE)
        if p < _ONE:
            nums.append(p)
    return KeepProbabilities(eps, dlt, tuple(nums))


def select(
    units: npt.ArrayLike,
    *,
    epsilon: Fraction,
    delta: Fraction,
    max_groups: int,
    source: RandomSource | None = None,
) -> npt.NDArray[np.bool_]:
    """Decide which partitions to release from their numbers of privacy units; (ε, δ)-DP.

    Args:
        units: number of distinct privacy units of each partition (after contribution
            bounding, so each unit is in at most ``max_groups`` partitions).
        epsilon: ε of the whole selection.
        delta: δ of the whole selection.
        max_groups: most partitions one unit contributes to.
        source: randomness (default: the OS CSPRNG).

    Returns:
        A boolean mask: True for the partitions whose keys may be released.

    Examples:
        >>> from deniable.noise.testing import SeededRandom
        >>> mask = select([1, 10_000], epsilon=Fraction(1), delta=Fraction(1, 10**9),
        ...               max_groups=1, source=SeededRandom(0))
        >>> bool(mask[1])
        True
    """
    if isinstance(max_groups, bool) or not isinstance(max_groups, int) or max_groups < 1:
        raise InvalidParameter("max_groups must be a positive integer")
    table = keep_probabilities(Fraction(epsilon) / max_groups, Fraction(delta) / max_groups)
    n = np.asarray(units, dtype=np.int64)
    if n.size and int(n.min()) < 0:
        raise InvalidParameter("numbers of units are ≥ 0")
    words = resolve(source).words(n.size)
    thresholds = np.array(table.numerators, dtype=np.uint64)
    idx = np.minimum(n, table.certain_from - 1) if table.certain_from else n
    below = n < table.certain_from
    threshold = thresholds[np.where(below, idx, 0)]
    # P[word < t] = t / 2^64 exactly; partitions past n* are always kept.
    out: npt.NDArray[np.bool_] = np.where(below, words < threshold, True)
    return out
