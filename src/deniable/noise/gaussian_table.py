"""Fast exact discrete Gaussian for moderate σ: a dyadic alias-table proposal plus rejection.

Target (folded): ``|X|`` with weights ``ω_0 = 1``, ``ω_k = 2e^(−k²/(2σ²))``, and a fair sign.

Proposal ``Q``: for ``k ≤ K``, ``Q(k) = c_k/2^64`` with integers ``c_k ≥ 1`` built from float
weights; the remaining mass ``c_T/2^64`` (about ``2^-20``) goes to a tail branch proposing
``k = K + 1 + Geom(e^(−(K+1)/σ²))``. ``Q`` is sampled exactly with one 64-bit word through a
Walker alias table built in integer arithmetic (column capacity ``2^(64−b)``).

Acceptance: ``r(k) = ω_k / (M·Q(k))`` with a dyadic ``M ≥ max ω_k/Q(k)`` certified with a wide
margin, so ``r ≤ 1`` everywhere and the output law is exactly ∝ ω (rejection sampling). As
``Q`` follows ω to 2^-20 relative, ``r`` is within about 2^-20 of 1: a 32-bit uniform settles
almost every acceptance by a table lookup; the rest are decided exactly
(:class:`~deniable.noise.exact.LazyUniform` against certified bounds of ``r``).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from deniable.errors import InternalError
from deniable.noise.discrete_laplace import geometric
from deniable.noise.exact import LazyUniform, exp_neg_bounds
from deniable.noise.source import RandomSource

I64 = npt.NDArray[np.int64]

TABLE_MAX_SIGMA2 = Fraction(2**28)
"""Up to σ = 2^14 the table (at most 2^18 entries, cached per σ²) is used; above, CKS."""

_MARGIN = 2.0**-40  # relative margin on float weights (their error is below 2^-50)


@dataclass(frozen=True)
class _Table:
    sigma2: Fraction
    K: int
    bits: int  # alias table has 2^bits columns
    threshold: npt.NDArray[np.uint64]  # keep column i iff remainder < threshold[i]
    alias: npt.NDArray[np.int32]
    accept_below: npt.NDArray[np.uint32]  # u32 < accept_below[k]  ⇒ accept
    reject_above: npt.NDArray[np.uint32]  # u32 > reject_above[k]  ⇒ reject
    counts: tuple[int, ...]  # c_0 … c_K, then c_T
    M: Fraction


def _weights(sigma2: float, K: int) -> npt.NDArray[np.float64]:
    k = np.arange(K + 1, dtype=np.float64)
    w = 2.0 * np.exp(-(k * k) / (2.0 * sigma2))
    w[0] = 1.0
    return w


_TABLES: OrderedDict[Fraction, _Table] = OrderedDict()
_MAX_TABLES = 16


def build_table(sigma2: Fraction) -> _Table:
    """Return the exact proposal table and acceptance thresholds for ``σ²``.

    The 16 most recently used tables are kept; this dict is the only record of what is built.
    """
    table = _TABLES.get(sigma2)
    if table is None:
        table = _build_table(sigma2)
        _TABLES[sigma2] = table
        while len(_TABLES) > _MAX_TABLES:
            _TABLES.popitem(last=False)
    _TABLES.move_to_end(sigma2)
    return table


def clear_tables() -> None:
    """Forget every built table (tests that change the filter margins rebuild them)."""
    _TABLES.clear()


def _build_table(sigma2: Fraction) -> _Table:
    s2 = float(sigma2)
    # K: last k whose share is ≥ 2^-30; the rest goes to the tail branch (a few draws in 10^7).
    total = 1.0 + math.sqrt(2 * math.pi * s2) * 2  # generous upper bound of Σω for the cut
    K = 0
    while 2.0 * math.exp(-((K + 1) ** 2) / (2 * s2)) / total * 2.0**30 >= 1.0:
        K += 1
    w = _weights(s2, K)
    W = float(math.fsum(w))
    # Spare mass for the tail branch: enough that it dominates the tail (checked below).
    one_minus_alpha = -math.expm1(-(K + 1) / s2)
    tail_weight = 2.0 * math.exp(-((K + 1) ** 2) / (2 * s2))
    spare = max(2.0**-20, 4.0 * tail_weight / (W * one_minus_alpha))
    share = w / W * (1.0 - spare)
    counts = [max(int(x), 1) for x in (share * 2.0**64)]
    c_tail = 2**64 - sum(counts)
    if c_tail <= 0:
        raise InternalError("discrete Gaussian table lost its tail mass")
    # M ≥ max ω_k·2^64/c_k, certified: float ω_k within 2^-50, margin 2^-40.
    ratios = [float(w[k]) * 2.0**64 / counts[k] for k in range(K + 1)]
    M = Fraction(max(ratios) * (1.0 + _MARGIN))
    # Tail dominance: r ≤ 1 needs M·(c_T/2^64)·(1 − α_T) ≥ 2e^(−(K+1)²/(2σ²)).
    need = tail_weight * (1 + _MARGIN)
    if float(M) * c_tail / 2.0**64 * one_minus_alpha * (1 - _MARGIN) < need:
        raise InternalError("discrete Gaussian tail branch does not dominate")
    counts.append(c_tail)
    n = len(counts)
    bits = max(1, (n - 1).bit_length())
    cap = 1 << (64 - bits)
    size = 1 << bits
    masses = counts + [0] * (size - n)
    threshold = [0] * size
    alias = list(range(size))
    small = [i for i, m in enumerate(masses) if m < cap]
    large = [i for i, m in enumerate(masses) if m >= cap]
    while small and large:
        s, big = small.pop(), large.pop()
        threshold[s], alias[s] = masses[s], big
        masses[big] -= cap - masses[s]
        (small if masses[big] < cap else large).append(big)
    for i in small + large:  # exact arithmetic leaves these full
        threshold[i] = cap
    # Acceptance thresholds in units of 2^-32 from float r_k with margin.
    r = np.array(ratios) / float(M)
    # Accept surely when (u+1)/2^32 ≤ r_lo, i.e. u < floor(r_lo·2^32) (capped at 2^32 − 1);
    # reject surely when u/2^32 ≥ r_hi, i.e. u > ceil(r_hi·2^32) − 1.
    acc = np.minimum(np.floor(r * (1 - _MARGIN) * 2.0**32), 2.0**32 - 1).astype(np.uint32)
    rej = (np.minimum(np.ceil(r * (1 + _MARGIN) * 2.0**32), 2.0**32) - 1).astype(np.uint32)
    # Tail index K+1 and padding: always take the exact path (never "sure").
    acc = np.concatenate([acc, np.zeros(size - K - 1, dtype=np.uint32)])
    rej = np.concatenate([rej, np.full(size - K - 1, 2**32 - 1, dtype=np.uint32)])
    return _Table(
        sigma2=sigma2,
        K=K,
        bits=bits,
        threshold=np.array(threshold, dtype=np.uint64),
        alias=np.array(alias, dtype=np.int32),
        accept_below=acc,
        reject_above=rej,
        counts=tuple(counts),
        M=M,
    )


def is_cached(sigma2: Fraction) -> bool:
    """Whether the table for ``σ²`` is already built (large tables cost ~0.5 s to build)."""
    return sigma2 in _TABLES


def _scaled_exp_bounds(gamma: Fraction, factor: Fraction, prec: int) -> tuple[int, int]:
    """Bounds of ``factor·e^(−γ)·2^prec``."""
    g = prec + 16 + max(factor.numerator.bit_length() - factor.denominator.bit_length(), 0)
    lo, hi = exp_neg_bounds(gamma, g)
    num, den = factor.numerator, factor.denominator << (g - prec)
    return (lo * num) // den, -((-hi * num) // den)


def _accept_exact(tab: _Table, k: int, word: int, src: RandomSource) -> bool:
    """Exact Bernoulli(r(k)) for a table index k ≤ K."""
    factor = Fraction(2**64 * (1 if k == 0 else 2), 1) / (tab.M * tab.counts[k])
    gamma = Fraction(k * k) / (2 * tab.sigma2)
    return LazyUniform(word, src, 32).less_than(lambda p: _scaled_exp_bounds(gamma, factor, p))


def _tail_draw(tab: _Table, src: RandomSource) -> int | None:
    """The tail branch: propose ``K+1+Geom``, accept exactly; None when rejected."""
    K1 = tab.K + 1
    k = K1 + int(geometric(tab.sigma2 / K1, 1, source=src)[0])
    gamma = Fraction((k - K1) ** 2 + K1 * K1) / (2 * tab.sigma2)
    beta = Fraction(K1) / tab.sigma2
    factor = Fraction(2 * 2**64) / (tab.M * tab.counts[-1])
    word = int(src.words(1)[0] >> np.uint64(32))

    def bounds(p: int) -> tuple[int, int]:
        g = p + 64
        e_lo, e_hi = _scaled_exp_bounds(gamma, factor, g)
        a_lo, a_hi = exp_neg_bounds(beta, g)
        one = 1 << g
        # r = (factor·e^(−γ)) / (1 − e^(−β))
        return (e_lo << p) // (one - a_lo), -((-(e_hi << p)) // (one - a_hi))

    return k if LazyUniform(word, src, 32).less_than(bounds) else None


def sample_folded(sigma2: Fraction, n: int, src: RandomSource) -> I64:
    """Return ``n`` exact discrete Gaussian draws using the cached table for ``σ²``."""
    tab = build_table(sigma2)
    out = np.empty(n, dtype=np.int64)
    have = 0
    shift = np.uint64(64 - tab.bits)
    mask = np.uint64((1 << (64 - tab.bits)) - 1)
    while have < n:
        m = n - have + 8
        w = src.words(2 * m)
        prop, acc_word = w[:m], w[m:]
        col = (prop >> shift).astype(np.int64)
        keep = (prop & mask) < tab.threshold[col]
        k = np.where(keep, col, tab.alias[col])
        u = (acc_word >> np.uint64(32)).astype(np.uint32)
        sure_yes = u < tab.accept_below[k]
        sure_no = u > tab.reject_above[k]
        ok = sure_yes
        vals = k.astype(np.int64)
        for i in np.flatnonzero(~(sure_yes | sure_no)):
            ki = int(k[i])
            if ki <= tab.K:
                ok[i] = _accept_exact(tab, ki, int(u[i]), src)
            else:
                drawn = _tail_draw(tab, src)
                ok[i] = drawn is not None
                if drawn is not None:
                    vals[i] = drawn
        negative = (acc_word & np.uint64(1)).astype(bool)
        vals = np.where(negative, -vals, vals)[ok]
        take = min(vals.size, n - have)
        out[have : have + take] = vals[:take]
        have += take
    return out
