"""The exponential mechanism, sampled exactly by permute-and-flip (McKenna & Sheldon 2020).

Candidates are visited in a uniformly random order; candidate ``r`` is accepted with
probability ``exp(−ε(q* − q_r)/(2Δ))`` where ``q*`` is the best score. The best candidate is
accepted with probability 1, so the walk always ends. Scores are shifted by ``q*`` before
exponentiating (never ``exp(ε·q)`` of raw scores), every acceptance is an exact
Bernoulli(e^(−γ)) draw of a rational γ, and all candidates' coins are drawn at once, so the
time taken does not depend on which candidate wins. ε-DP when each score changes by at most Δ
between neighbouring inputs.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import numpy.typing as npt

from deniable.accounting.loss import Epsilon
from deniable.errors import InvalidParameter
from deniable.mechanisms.release import Release
from deniable.noise.bernoulli import bernoulli_exp_neg, decide_exp_neg
from deniable.noise.exact import RationalLike, positive_fraction, sensitivity_fraction, to_fraction
from deniable.noise.source import RandomSource, resolve
from deniable.noise.uniform import REL, U64_MAX, uniform_int


def random_permutation(n: int, *, source: RandomSource | None = None) -> npt.NDArray[np.int64]:
    """Return a uniformly random permutation of ``range(n)``, exactly.

    Sorts ``n`` independent uniform 64-bit words and redraws them all in the rare case that two
    are equal: given that the words are distinct, every order of them is equally likely, so
    the sorting permutation is exactly uniform.
    """
    if n < 0 or n > U64_MAX:
        raise InvalidParameter("permutation size out of range")
    if n < 2:
        return np.arange(n, dtype=np.int64)
    src = resolve(source)
    while True:
        words = src.words(n)
        order = np.argsort(words)
        ranked = words[order]
        if bool(np.all(ranked[1:] != ranked[:-1])):
            return order.astype(np.int64, copy=False)


def exponential(
    scores: npt.ArrayLike,
    *,
    sensitivity: RationalLike,
    epsilon: RationalLike,
    source: RandomSource | None = None,
) -> Release:
    """Choose an index with the exponential mechanism (permute-and-flip); ε-DP.

    Args:
        scores: finite utility of each candidate (higher is better).
        sensitivity: the most any score changes between neighbouring inputs.
        epsilon: the privacy loss spent.
        source: randomness (default: the OS CSPRNG).

    Returns:
        A Release whose ``value`` is the chosen index (0-d int64 array).

    Examples:
        >>> from deniable.noise.testing import SeededRandom
        >>> int(exponential([0, 0, 100], sensitivity=1, epsilon=5, source=SeededRandom(0)).value)
        2
    """
    d = sensitivity_fraction(sensitivity)
    eps = positive_fraction(epsilon, "epsilon")
    arr = np.asarray(scores)
    if arr.ndim != 1 or arr.size == 0:
        raise InvalidParameter("scores must be a non-empty 1-d sequence")
    src = resolve(source)
    order = random_permutation(arr.size, source=src)
    coins = _integer_coins(arr, order, eps / (2 * d), src)
    if coins is None:  # scores that are not all integers: exact rationals throughout
        q = [to_fraction(s.item() if hasattr(s, "item") else s, "score") for s in arr]
        best = max(q)
        gammas = [eps * (best - q[int(i)]) / (2 * d) for i in order]
        coins = bernoulli_exp_neg(gammas, source=src)
    first = int(np.argmax(coins))  # the best candidate's coin is always True
    return Release(
        value=np.asarray(order[first], dtype=np.int64),
        loss=Epsilon(epsilon=eps),
        mechanism="exponential",
        scale=float(2 * d / eps),
    )


def exponential_rejection(
    scores: npt.ArrayLike,
    *,
    sensitivity: RationalLike,
    epsilon: RationalLike,
    source: RandomSource | None = None,
) -> Release:
    """The exponential mechanism's own law ``P[r] ∝ e^(ε·q_r/(2Δ))``, sampled exactly; ε-DP.

    Rejection sampling: a uniformly random candidate ``r`` is accepted with probability
    ``e^(−ε(q* − q_r)/(2Δ))`` (an exact Bernoulli draw), and the draw is repeated until one
    is accepted, so the output's law is exactly proportional to those probabilities — the
    exponential mechanism, not permute-and-flip. Besides ε-DP it is ε-*bounded-range* (each
    output's log-probability moves within an interval of width ε between neighbours), hence
    ``ε²/8``-zCDP (Cesar & Rogers 2021, "Bounding, concentrating, and truncating"), a
    quarter of what pure ε-DP alone gives under zCDP: what MST and AIM charge a selection.

    Its running time depends on the scores (about ``n / Σ e^(−γ_r)`` tries): use it only
    after the release it belongs to is charged (DESIGN §6.5).

    Args:
        scores: finite utility of each candidate (higher is better).
        sensitivity: the most any score changes between neighbouring inputs.
        epsilon: the privacy loss spent.
        source: randomness (default: the OS CSPRNG).

    Returns:
        A Release whose ``value`` is the chosen index (0-d int64 array).

    Examples:
        >>> from deniable.noise.testing import SeededRandom
        >>> r = exponential_rejection([0, 0, 100], sensitivity=1, epsilon=5, source=SeededRandom(0))
        >>> int(r.value)
        2
    """
    d = sensitivity_fraction(sensitivity)
    eps = positive_fraction(epsilon, "epsilon")
    arr = np.asarray(scores)
    if arr.ndim != 1 or arr.size == 0:
        raise InvalidParameter("scores must be a non-empty 1-d sequence")
    src = resolve(source)
    n = arr.size
    rate = eps / (2 * d)
    integer = arr.dtype.kind in "iu" and int(arr.max()) - int(arr.min()) < 2**53
    if integer:
        gaps = np.subtract(arr.dtype.type(int(arr.max())), arr).astype(np.int64)
    else:
        q = [to_fraction(s.item() if hasattr(s, "item") else s, "score") for s in arr]
        best = max(q)
    batch = max(1, min(n, 4096))
    while True:
        picks = uniform_int(n, batch, source=src)
        if integer:
            g = gaps[picks]
            gamma_f = g.astype(np.float64) * float(rate)

            def exact_gamma(i: int, g: npt.NDArray[np.int64] = g) -> Fraction:
                return rate * int(g[i])

            coins = decide_exp_neg(gamma_f, REL * (1.0 + gamma_f), exact_gamma, src)
        else:
            coins = bernoulli_exp_neg([rate * (best - q[int(i)]) for i in picks], source=src)
        accepted = np.flatnonzero(coins)
        if accepted.size:
            return Release(
                value=np.asarray(picks[int(accepted[0])], dtype=np.int64),
                loss=Epsilon(epsilon=eps),
                mechanism="exponential",
                scale=float(2 * d / eps),
            )


def _integer_coins(
    scores: npt.NDArray[np.generic],
    order: npt.NDArray[np.int64],
    rate: Fraction,
    source: RandomSource,
) -> npt.NDArray[np.bool_] | None:
    """Permute-and-flip's coins for integer scores, vectorised; None for other scores.

    Coin ``i`` is Bernoulli(e^(−γ_i)) with ``γ_i = rate·(q* − q_order[i])``, the same law as
    the rational path. The gaps ``q* − q`` are exact integers below 2^53, so ``γ_i`` in float
    (the gap times the correctly rounded ``rate``) is within 2^-52 of γ_i relatively — far
    inside the filter's tolerance ``REL``; undecided draws get the exact rational γ_i.
    """
    if scores.dtype.kind not in "iu":
        return None
    best, low = int(scores.max()), int(scores.min())
    if best - low >= 2**53:
        return None
    # q* − q in the scores' own type cannot overflow: 0 ≤ q* − q ≤ q* − min < 2^53.
    gaps = np.subtract(scores.dtype.type(best), scores).astype(np.int64)[order]
    gamma_f = gaps.astype(np.float64) * float(rate)
    return decide_exp_neg(gamma_f, REL * (1.0 + gamma_f), lambda i: rate * int(gaps[i]), source)


def exponential_probabilities(
    scores: npt.ArrayLike, *, sensitivity: RationalLike, epsilon: RationalLike
) -> npt.NDArray[np.float64]:
    """Exact output law of permute-and-flip for small candidate sets (for tests and explain).

    Computed by summing over all orders would be exponential; instead use the closed form
    ``P[r] = p_r · E[∏_{s before r} (1 − p_s)]`` evaluated by dynamic programming over subsets
    for up to 12 candidates.
    """
    arr = [Fraction(float(s)) for s in np.asarray(scores, dtype=np.float64)]
    d = sensitivity_fraction(sensitivity)
    eps = positive_fraction(epsilon, "epsilon")
    n = len(arr)
    if n > 12:
        raise InvalidParameter("exact permute-and-flip law is computed for ≤ 12 candidates")
    best = max(arr)
    p = [float(np.exp(-float(eps * (best - s) / (2 * d)))) for s in arr]
    # f[mask] = probability that the walk has visited exactly `mask` (in some order) and
    # rejected all of them; visiting order is uniform among remaining candidates.
    from itertools import combinations

    f = {0: 1.0}
    out = np.zeros(n)
    for size in range(n):
        for combo in combinations(range(n), size):
            mask = sum(1 << i for i in combo)
            prob = f.get(mask, 0.0)
            if prob == 0.0:
                continue
            rest = [i for i in range(n) if not mask >> i & 1]
            for r in rest:
                step = prob / len(rest)
                out[r] += step * p[r]
                nm = mask | (1 << r)
                f[nm] = f.get(nm, 0.0) + step * (1 - p[r])
    return out
