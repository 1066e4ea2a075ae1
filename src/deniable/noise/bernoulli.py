"""Exact Bernoulli samplers: of a rational ``p``, and of ``e^(−γ)`` for rational ``γ ≥ 0``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from deniable.errors import InvalidParameter
from deniable.noise.exact import (
    LazyUniform,
    RationalLike,
    exp_neg_bound_fn,
    rational_bounds,
    to_fraction,
)
from deniable.noise.source import RandomSource, resolve
from deniable.noise.uniform import ABS, REL, exp_prefix

Bools = npt.NDArray[np.bool_]


def bernoulli(p: RationalLike, size: int, *, source: RandomSource | None = None) -> Bools:
    """Return ``size`` independent draws equal to True with probability exactly ``p``.

    ``p`` is taken as the exact rational it denotes (a float is its exact dyadic value).

    Examples:
        >>> from deniable.noise.testing import SeededRandom
        >>> bernoulli(1, 3, source=SeededRandom(0)).tolist()
        [True, True, True]
    """
    q = to_fraction(p, "p")
    if not 0 <= q <= 1:
        raise InvalidParameter(f"p must be in [0, 1], got {float(q)!r}")
    src = resolve(source)
    words = src.words(size)
    threshold = (q.numerator << 64) // q.denominator  # floor(p·2^64)
    if threshold >= 2**64:
        return np.ones(size, dtype=bool)
    t = np.uint64(threshold)
    out = words < t  # U' < (w+1)/2^64 ≤ threshold/2^64 ≤ p
    for i in np.flatnonzero(words == t):  # the one word that needs more bits
        out[i] = LazyUniform(int(words[i]), src).less_than(rational_bounds(q))
    return out


def bernoulli_exp_neg(
    gamma: RationalLike | Sequence[Fraction],
    size: int | None = None,
    *,
    source: RandomSource | None = None,
) -> Bools:
    """Return draws equal to True with probability exactly ``e^(−γ)``.

    ``gamma`` is one rational ``γ ≥ 0`` (then ``size`` draws) or a sequence of them (one draw
    each). A float filter on ``−ln U'`` settles nearly every draw; the rest are decided exactly.

    Examples:
        >>> from deniable.noise.testing import SeededRandom
        >>> bernoulli_exp_neg(0, 2, source=SeededRandom(0)).tolist()
        [True, True]
    """
    if isinstance(gamma, Sequence):
        gammas = [to_fraction(g, "gamma") for g in gamma]
    else:
        if size is None:
            raise InvalidParameter("give size when gamma is a single number")
        gammas = [to_fraction(gamma, "gamma")]
    if any(g < 0 for g in gammas):
        raise InvalidParameter("gamma must be ≥ 0")
    n = len(gammas) if isinstance(gamma, Sequence) else int(size or 0)
    src = resolve(source)
    gf = np.array([float(g) for g in gammas], dtype=np.float64)
    if gf.size == 1 and n != 1:
        gf = np.full(n, gf[0])
    return decide_exp_neg(gf, REL * (1.0 + gf), lambda i: gammas[i % len(gammas)], src)


def decide_exp_neg(
    gamma_f: npt.NDArray[np.float64],
    gamma_err: npt.NDArray[np.float64],
    exact_gamma: Callable[[int], Fraction],
    source: RandomSource,
) -> Bools:
    """Draw one Bernoulli(e^(−γ_i)) per entry: True iff ``U'_i < e^(−γ_i)``, i.e. ``E_i > γ_i``.

    ``gamma_f`` approximates γ within ``gamma_err``; ``exact_gamma(i)`` gives the exact
    rational γ of draw ``i`` for the rare draws the float filter cannot settle. Uses 32-bit
    uniforms: a boundary falls inside a prefix's interval with probability about 2^-31.
    """
    pre = exp_prefix(gamma_f.size, wide=False, signed=False, source=source)
    e_lo = pre.e_hi - pre.width - ABS
    yes = e_lo * (1.0 - REL) > gamma_f + gamma_err
    no = pre.e_hi * (1.0 + REL) + ABS < gamma_f - gamma_err
    out = yes
    for i in np.flatnonzero(~(yes | no)):
        g = exact_gamma(int(i))
        out[i] = LazyUniform(int(pre.word[i]), source, pre.bits).less_than(exp_neg_bound_fn(g))
    return out


def decide_exp_neg_scalar_err(
    gamma_f: npt.NDArray[np.float64],
    gamma_err: float,
    exact_gamma: Callable[[int], Fraction],
    source: RandomSource,
) -> Bools:
    """Like :func:`decide_exp_neg` with one error bound for all entries, in the exp domain.

    True iff ``U'_i < e^(−γ_i)``: with a 32-bit prefix ``u``, ``U' ∈ [u, u+1)/2^32``; the float
    ``e^(−γ_f)`` is within relative ``m = gamma_err + 2^-40`` of ``e^(−γ)`` (one correctly rounded
    ``exp`` and the error of ``γ_f``), so ``u + 1 ≤ v(1 − 2m)`` settles True and ``u ≥ v(1 + 2m)``
    settles False; the rest are decided exactly.
    """
    n = gamma_f.size
    u = source.words((n + 1) // 2).view(np.uint32)[:n]
    uf = u.astype(np.float64)
    v = np.negative(gamma_f)
    np.exp(v, out=v)
    v *= 2.0**32
    m = 2.0 * (gamma_err + REL)
    yes = uf + 1.0 <= v * (1.0 - m)
    no = uf >= v * (1.0 + m)
    out = yes
    for i in np.flatnonzero(~(yes | no)):
        g = exact_gamma(int(i))
        out[i] = LazyUniform(int(u[i]), source, 32).less_than(exp_neg_bound_fn(g))
    return out
