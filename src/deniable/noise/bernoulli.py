"""Exact Bernoulli samplers: of a rational ``p``, and of ``e^(−γ)`` for rational ``γ ≥ 0``."""

from __future__ import annotations

from collections.abc import Sequence
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
from deniable.noise.uniform import REL, neg_log_interval

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
    words = src.words(n)
    gf = np.array([float(g) for g in gammas], dtype=np.float64)
    if gf.size == 1 and n != 1:
        gf = np.full(n, gf[0])
    return _decide_exp_neg(words, gf, REL * (1.0 + gf), lambda i: gammas[i % len(gammas)], src)


def _decide_exp_neg(
    words: npt.NDArray[np.uint64],
    gamma_f: npt.NDArray[np.float64],
    gamma_err: npt.NDArray[np.float64],
    exact_gamma: object,
    source: RandomSource,
) -> Bools:
    """Decide ``U' < e^(−γ)`` (i.e. ``−ln U' > γ``) for each word.

    ``gamma_f`` approximates γ within ``gamma_err``; ``exact_gamma(i)`` gives the exact
    rational γ of draw ``i`` for the rare draws the float filter cannot settle.
    """
    lo, hi = neg_log_interval(words)
    yes = lo > gamma_f + gamma_err
    no = hi < gamma_f - gamma_err
    out = yes
    unsure = np.flatnonzero(~(yes | no))
    for i in unsure:
        g: Fraction = exact_gamma(int(i))  # type: ignore[operator]
        out[i] = LazyUniform(int(words[i]), source).less_than(exp_neg_bound_fn(g))
    return out
