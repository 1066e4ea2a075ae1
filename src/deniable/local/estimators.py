"""Server-side estimators: unbiased category frequencies from locally randomised reports.

Every randomiser of :mod:`deniable.local` is a *pure frequency oracle*: a report "supports"
category ``v`` with probability ``p`` when the respondent's true value is ``v`` and with
probability ``q < p`` otherwise (binary RR: ``q = 1 − p``; k-ary RR: ``q = (1−p)/(k−1)``;
unary encoding: the bit probabilities; the Bloom-filter encoder is decoded separately in
:mod:`deniable.local.bloom`). With ``c_v`` supporting reports among ``n``,

    ``f̂_v = (c_v/n − q) / (p − q)``

is unbiased for the true frequency ``f_v`` of the ``n`` respondents, and

    ``Var f̂_v = (f_v·p(1−p) + (1−f_v)·q(1−q)) / (n·(p−q)²)``

exactly, for the fixed set of respondents (the randomisation is the only randomness). The
reported variance plugs in ``f̂_v`` clipped to [0, 1]; for binary randomized response it does
not depend on ``f`` and is exact. Intervals:

* :meth:`FrequencyEstimate.interval` — **normal approximation**, ``f̂ ± z·√Var``, clipped to
  [0, 1] (clipping keeps the truth inside, so it never lowers coverage). Good for aggregated
  frequencies of hundreds of reports or more, not a guarantee for tiny ``n``.
* :meth:`BinaryEstimate.exact_interval` — for binary RR, the Clopper–Pearson interval of the
  "yes" probability ``λ = (2p−1)·f + (1−p)`` mapped through the (increasing) debiasing map.
  Exact for a binomial count; for a fixed population the count is Poisson-binomial, which is
  more concentrated than the binomial of the same mean (Hoeffding 1956), so the interval is
  conservative there.

Estimation is post-processing of released reports: it costs no privacy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from deniable.errors import InvalidParameter
from deniable.local.intervals import check_level, clopper_pearson, normal_quantile
from deniable.noise.exact import RationalLike, to_fraction

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class FrequencyEstimate:
    """Unbiased frequency estimates of each category, with variances and intervals.

    Attributes:
        frequencies: ``f̂_v`` for each label (may fall slightly outside [0, 1]: clipping
            would bias it; clip for display only).
        variance: the (plug-in) variance of each ``f̂_v``.
        n: number of reports.
        mechanism: the randomiser that produced the reports.
        labels: the category of each entry.
    """

    frequencies: F64
    variance: F64
    n: int
    mechanism: str
    labels: tuple[Any, ...]
    method: str = field(default="normal approximation")

    @property
    def counts(self) -> F64:
        """Unbiased estimates of the number of respondents in each category."""
        return self.frequencies * self.n

    @property
    def std_error(self) -> F64:
        """Standard error of each frequency estimate."""
        return np.sqrt(self.variance)

    def interval(self, level: float = 0.95) -> tuple[F64, F64]:
        """Normal-approximation interval of each true frequency, clipped to [0, 1].

        Covers each true frequency with probability close to ``level`` when the counts are
        large (a normal approximation, not a guarantee for small ``n``).
        """
        h = normal_quantile(level) * self.std_error
        return np.clip(self.frequencies - h, 0, 1), np.clip(self.frequencies + h, 0, 1)

    def __getitem__(self, label: Any) -> float:
        """The estimated frequency of ``label``."""
        try:
            return float(self.frequencies[self.labels.index(label)])
        except ValueError:
            raise InvalidParameter(f"unknown label {label!r}") from None


@dataclass(frozen=True, eq=False)
class BinaryEstimate(FrequencyEstimate):
    """The estimate of a yes/no question (labels ``(0, 1)``), with an exact interval too.

    Attributes:
        yes_reports: number of "yes" reports.
        p: the probability that a report equals the truth (coin RR: ``(1+q)/2``).
    """

    yes_reports: int = 0
    p: Fraction = Fraction(1)

    @property
    def fraction(self) -> float:
        """The estimated fraction of true "yes" answers."""
        return float(self.frequencies[1])

    def exact_interval(self, level: float = 0.95) -> tuple[float, float]:
        """Clopper–Pearson interval of the true "yes" fraction, mapped through the debiasing.

        If the "yes" count is binomial, the interval contains the true fraction with
        probability at least ``level`` (conservative for a fixed population, see the module
        docstring).

        Examples:
            >>> lo, hi = estimate_coin(400, 1000, q=0.5).exact_interval(0.95)
            >>> round(lo, 3), round(hi, 3)
            (0.239, 0.362)
        """
        lam_lo, lam_hi = clopper_pearson(self.yes_reports, self.n, check_level(level))
        p = float(self.p)
        lo = (lam_lo - (1 - p)) / (2 * p - 1)
        hi = (lam_hi - (1 - p)) / (2 * p - 1)
        return max(0.0, lo), min(1.0, hi)


def _fraction_in(value: RationalLike, name: str, lo: Fraction, hi: Fraction) -> Fraction:
    f = to_fraction(value, name)
    if not lo < f < hi:
        raise InvalidParameter(f"{name} must be in ({lo}, {hi}), got {float(f)!r}")
    return f


def _check_n(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise InvalidParameter("n (the number of reports) must be an integer ≥ 1")
    return int(n)


def pure_estimate(
    support_counts: npt.ArrayLike,
    n: int,
    *,
    p: RationalLike,
    q: RationalLike,
    mechanism: str,
    labels: Sequence[Any] | None = None,
) -> FrequencyEstimate:
    """Estimate frequencies from the counts of reports supporting each category.

    ``p`` (resp. ``q``) is the probability that a report supports a category equal to
    (resp. different from) the respondent's value; see the module docstring for the formulas.

    Examples:
        >>> est = pure_estimate([700, 300], 1000, p=0.75, q=0.25, mechanism="rr")
        >>> [round(float(f), 6) for f in est.frequencies]
        [0.9, 0.1]
    """
    n = _check_n(n)
    c = np.asarray(support_counts, dtype=np.float64)
    if c.ndim != 1 or c.size < 1 or (c < 0).any() or (c > n).any():
        raise InvalidParameter("support counts must be a 1-D array of integers in [0, n]")
    pf, qf = to_fraction(p, "p"), to_fraction(q, "q")
    if not 0 <= qf < pf <= 1:
        raise InvalidParameter("need 0 ≤ q < p ≤ 1")
    pp, qq = float(pf), float(qf)
    freq = (c / n - qq) / (pp - qq)
    f = np.clip(freq, 0, 1)
    var = (f * pp * (1 - pp) + (1 - f) * qq * (1 - qq)) / (n * (pp - qq) ** 2)
    lab = tuple(range(c.size)) if labels is None else tuple(labels)
    if len(lab) != c.size:
        raise InvalidParameter("need one label per count")
    return FrequencyEstimate(frequencies=freq, variance=var, n=n, mechanism=mechanism, labels=lab)


def estimate_binary(
    yes: int, n: int, *, p: RationalLike, mechanism: str = "randomized_response"
) -> BinaryEstimate:
    """Unbiased estimate of the true "yes" fraction from binary randomized response.

    Each report equals the truth with probability ``p`` in (1/2, 1). The point estimate
    ``(yes/n − (1−p))/(2p−1)`` is computed exactly in rationals, then rounded once.

    Examples:
        >>> estimate_binary(700, 1000, p=0.75).fraction
        0.9
    """
    n = _check_n(n)
    if isinstance(yes, bool) or not isinstance(yes, int | np.integer) or not 0 <= yes <= n:
        raise InvalidParameter("yes must be an integer in [0, n]")
    yes = int(yes)
    pf = _fraction_in(p, "p", Fraction(1, 2), Fraction(1))
    f1 = (Fraction(yes, n) - (1 - pf)) / (2 * pf - 1)
    freq = np.array([float(1 - f1), float(f1)])
    var = float(pf * (1 - pf) / (n * (2 * pf - 1) ** 2))
    return BinaryEstimate(
        frequencies=freq,
        variance=np.array([var, var]),
        n=n,
        mechanism=mechanism,
        labels=(0, 1),
        yes_reports=yes,
        p=pf,
    )


def estimate_coin(yes: int, n: int, *, q: RationalLike) -> BinaryEstimate:
    """Estimate of the true "yes" fraction from coin randomized response (truth w.p. ``q``).

    A report equals the truth with probability ``p = (1+q)/2``, so this is
    :func:`estimate_binary` with that ``p``: ``(yes/n − (1−q)/2)/q``.

    Examples:
        >>> estimate_coin(400, 1000, q=0.5).fraction  # the thesis survey: 30%
        0.3
    """
    qf = _fraction_in(q, "q", Fraction(0), Fraction(1))
    return estimate_binary(yes, n, p=(1 + qf) / 2, mechanism="coin_randomized_response")


def estimate_k_rr(
    counts: npt.ArrayLike, *, keep_probability: RationalLike, labels: Sequence[Any] | None = None
) -> FrequencyEstimate:
    """Frequencies over ``{0, …, k−1}`` from k-ary randomized response reports.

    ``counts[v]`` is how many reports equal ``v``; a report keeps the true value with
    probability ``keep_probability`` and is otherwise uniform over the other ``k − 1``.

    Examples:
        >>> est = estimate_k_rr([400, 300, 300], keep_probability=Fraction(1, 2))
        >>> [round(float(f), 6) for f in est.frequencies]
        [0.6, 0.2, 0.2]
    """
    c = np.asarray(counts)
    if c.ndim != 1 or c.size < 2:
        raise InvalidParameter("counts must be a 1-D array with one entry per value (k ≥ 2)")
    k = c.size
    pf = to_fraction(keep_probability, "keep_probability")
    qf = (1 - pf) / (k - 1)
    return pure_estimate(
        c, int(c.sum()), p=pf, q=qf, mechanism="k_randomized_response", labels=labels
    )


def estimate_unary(
    bit_counts: npt.ArrayLike,
    n: int,
    *,
    p: RationalLike,
    q: RationalLike,
    labels: Sequence[Any] | None = None,
) -> FrequencyEstimate:
    """Frequencies from unary-encoding reports (OUE: ``p = 1/2``, ``q = 1/(e^ε+1)``).

    ``bit_counts[v]`` is how many of the ``n`` reports have bit ``v`` set; bit ``v`` is set
    with probability ``p`` if the respondent's value is ``v`` and ``q`` otherwise.
    """
    return pure_estimate(bit_counts, n, p=p, q=q, mechanism="unary_encoding", labels=labels)
