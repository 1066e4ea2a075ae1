"""Shared statistics for the tests of :mod:`deniable.noise` and the grid releases.

Every test built on these helpers rejects at a quantile of level ``ALPHA = 1e-7`` of the
statistic's distribution under the null hypothesis, so a correct sampler fails a given check
with probability below 1e-7; a test function makes at most a few such checks, which keeps its
false-failure probability below 1e-6 (union bound).

* :func:`chi2_gof` — Pearson chi-square goodness of fit of integer samples against an exact
  pmf. Cells are merged by mass: every bin has expected count at least ``MIN_EXPECTED`` (200,
  forty times Cochran's rule of 5, so that the chi-square approximation holds out to the 1e-7
  quantile), and the two tails are swallowed by the first and the last bin.
* :func:`binomial_check` — exact two-sided binomial test (Clopper–Pearson style, via scipy's
  ``binomtest``) for a frequency such as ``P[|X| > c]`` far in a tail.
* :func:`two_sample_chi2` — chi-square test of homogeneity of two samples of a discrete
  feature (e.g. the low bits of released doubles), categories with small pooled counts merged.
* :func:`control_power` — the probability that a negative control is rejected, from the
  non-central chi-square; controls assert it is above ``1 − 1e-6`` so that they cannot flake
  either.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt
from scipy import stats

ALPHA = 1e-7
"""Level of every individual check: a correct sampler fails it with probability < 1e-7."""

MIN_EXPECTED = 200.0
"""Smallest expected count of a chi-square bin."""

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]


# ----------------------------------------------------------------------------- exact pmfs


@dataclass(frozen=True)
class Pmf:
    """A pmf on the integers given on a window, with the exact mass of both tails.

    ``probs[i]`` is ``P[X = lo + i]``; ``left = P[X < lo]`` and ``right = P[X > hi]``.
    """

    lo: int
    probs: Floats
    left: float
    right: float

    @property
    def hi(self) -> int:
        return self.lo + len(self.probs) - 1

    @cached_property
    def _upper(self) -> Floats:
        """``_upper[i] = P[X ≥ lo + i]``, summed from the tail inwards (no cancellation)."""
        return np.cumsum(self.probs[::-1])[::-1] + self.right

    @cached_property
    def _lower(self) -> Floats:
        """``_lower[i] = P[X ≤ lo + i]``, summed from the tail inwards."""
        return np.cumsum(self.probs) + self.left

    def tail_above(self, c: int) -> float:
        """Return ``P[X > c]``."""
        if c >= self.hi:
            return self.right
        if c < self.lo:
            return 1.0
        return float(self._upper[c - self.lo + 1])

    def tail_below(self, c: int) -> float:
        """Return ``P[X < c]``."""
        if c <= self.lo:
            return self.left
        if c > self.hi:
            return 1.0
        return float(self._lower[c - self.lo - 1])


def _alpha(scale: float) -> tuple[float, float]:
    """Return ``(α, 1 − α)`` for ``α = e^(−1/scale)``, the second without cancellation."""
    return math.exp(-1.0 / scale), -math.expm1(-1.0 / scale)


def geometric_pmf(scale: float, width: float = 60.0) -> Pmf:
    """``P[Y = k] = (1 − α)α^k`` for ``k ≥ 0``, on a window holding all but ``e^-width``."""
    _, one_minus_a = _alpha(scale)
    hi = math.ceil(width * scale) + 2
    k = np.arange(hi + 1, dtype=np.float64)
    probs = one_minus_a * np.exp(-k / scale)
    return Pmf(lo=0, probs=probs, left=0.0, right=math.exp(-(hi + 1) / scale))


def discrete_laplace_pmf(scale: float, width: float = 60.0) -> Pmf:
    """``P[X = k] = (1 − α)/(1 + α)·α^|k|``, with the exact mass of both tails."""
    a, one_minus_a = _alpha(scale)
    c = math.ceil(width * scale) + 2
    k = np.arange(-c, c + 1, dtype=np.float64)
    probs = one_minus_a / (1.0 + a) * np.exp(-np.abs(k) / scale)
    tail = math.exp(-(c + 1) / scale) / (1.0 + a)  # P[X > c] = α^(c+1)/(1 + α)
    return Pmf(lo=-c, probs=probs, left=tail, right=tail)


def discrete_gaussian_pmf(sigma2: float) -> Pmf:
    """``P[X = k] ∝ e^(−k²/(2σ²))``, normalised over a window of ±(40σ + 10).

    Outside the window the mass is below ``e^-800``, zero in double precision, so the tails
    are reported as 0 and the normalising sum over the window is exact to rounding.
    """
    c = math.ceil(40.0 * math.sqrt(sigma2)) + 10
    k = np.arange(-c, c + 1, dtype=np.float64)
    w = np.exp(-(k * k) / (2.0 * sigma2))
    return Pmf(lo=-c, probs=w / w.sum(), left=0.0, right=0.0)


def uniform_pmf(high: int) -> Pmf:
    """The uniform pmf on ``{0, …, high − 1}`` (for small ``high``)."""
    return Pmf(lo=0, probs=np.full(high, 1.0 / high), left=0.0, right=0.0)


# ----------------------------------------------------------------------------- chi-square


@dataclass(frozen=True)
class Chi2Result:
    """A chi-square statistic with its degrees of freedom and the 1e-7 rejection threshold."""

    statistic: float
    df: int
    threshold: float
    expected: Floats
    observed: Floats
    edges: Ints | None = None
    """Inclusive upper edges of the bins (goodness-of-fit tests only)."""

    @property
    def rejected(self) -> bool:
        return self.statistic > self.threshold

    def __str__(self) -> str:
        return f"chi2 = {self.statistic:.1f} on {self.df} df (reject above {self.threshold:.1f})"


def bins_by_mass(pmf: Pmf, n: int, max_bins: int = 60) -> tuple[Ints, Floats]:
    """Group consecutive cells of ``pmf`` into bins of expected count ≥ ``MIN_EXPECTED``.

    Returns the inclusive upper edge of each bin (the last is ``int64`` max, so it takes the
    right tail; the first takes the left tail) and each bin's probability. Bins are also at
    least ``1/max_bins`` in mass, which keeps the degrees of freedom moderate and the power
    against changes of scale high.
    """
    target = max(MIN_EXPECTED / n, 1.0 / max_bins)
    cum = pmf.left + np.cumsum(pmf.probs)  # cum[i] = P[X ≤ lo + i]
    edges: list[int] = []
    masses: list[float] = []
    closed = 0.0  # mass of the bins closed so far
    while True:
        i = int(np.searchsorted(cum, closed + target, side="left"))
        if i >= len(cum):
            break
        edges.append(pmf.lo + i)
        masses.append(float(cum[i]) - closed)
        closed = float(cum[i])
    rest = 1.0 - closed  # what is left, right tail included, joins the last bin
    top = int(np.iinfo(np.int64).max)
    if masses:
        masses[-1] += rest
        edges[-1] = top
    else:
        edges, masses = [top], [rest]
    return np.array(edges, dtype=np.int64), np.array(masses, dtype=np.float64)


def chi2_gof(samples: npt.ArrayLike, pmf: Pmf, max_bins: int = 60) -> Chi2Result:
    """Pearson chi-square of integer ``samples`` against ``pmf``, bins merged by mass."""
    x = np.asarray(samples, dtype=np.int64)
    n = x.size
    edges, masses = bins_by_mass(pmf, n, max_bins)
    idx = np.searchsorted(edges, x, side="left")
    observed = np.bincount(idx, minlength=len(edges)).astype(np.float64)
    expected = masses / masses.sum() * n
    df = max(len(edges) - 1, 1)
    stat = float(((observed - expected) ** 2 / expected).sum())
    return Chi2Result(stat, df, float(stats.chi2.isf(ALPHA, df)), expected, observed, edges)


def control_power(result: Chi2Result, actual: Pmf) -> float:
    """Probability that the test behind ``result`` rejects when the samples follow ``actual``.

    With bin probabilities ``q`` under ``actual`` and ``p`` under the claimed pmf, the statistic
    is approximately non-central chi-square with non-centrality ``n·Σ (q − p)²/p``.
    """
    assert result.edges is not None
    true_probs = bin_probs(actual, result.edges)
    n = result.observed.sum()
    p = result.expected / n
    lam = float(n * ((true_probs - p) ** 2 / p).sum())
    return float(stats.ncx2.sf(result.threshold, result.df, lam))


def bin_probs(pmf: Pmf, edges: Ints) -> Floats:
    """Probabilities under ``pmf`` of the bins with inclusive upper edges ``edges``.

    Used to compute the power of negative controls; beyond ``pmf``'s window the tails are
    lumped together, which is accurate enough for that purpose.
    """
    cum = pmf.left + np.cumsum(pmf.probs)

    def cdf(e: int) -> float:
        if e < pmf.lo:
            return pmf.left
        if e >= pmf.hi:
            return 1.0
        return float(cum[e - pmf.lo])

    tops = np.array([cdf(int(e)) for e in edges])
    tops[-1] = 1.0
    return np.diff(np.concatenate([[0.0], tops]))


def chi2_gof_edges(samples: npt.ArrayLike, edges: Ints, probs: Floats) -> Chi2Result:
    """Pearson chi-square of integer ``samples`` over bins with inclusive upper ``edges`` (the
    last must be ``int64`` max) and exact bin probabilities ``probs`` (for laws too wide to
    tabulate). Every bin must have expected count ≥ ``MIN_EXPECTED``."""
    x = np.asarray(samples, dtype=np.int64)
    n = x.size
    expected = probs / probs.sum() * n
    assert expected.min() >= MIN_EXPECTED, "bins too small for the chi-square approximation"
    observed = np.bincount(np.searchsorted(edges, x, side="left"), minlength=len(edges))
    df = len(edges) - 1
    stat = float(((observed - expected) ** 2 / expected).sum())
    threshold = float(stats.chi2.isf(ALPHA, df))
    return Chi2Result(stat, df, threshold, expected, observed.astype(np.float64), edges)


def laplace_bins(scale: float, bins: int = 60) -> tuple[Ints, Floats]:
    """Integer bins of roughly equal mass for discrete Laplace with a large ``scale``, and their
    exact probabilities from the closed-form cdf: ``P[X ≤ k] = α^(−k)/(1+α)`` for ``k < 0`` and
    ``1 − α^(k+1)/(1+α)`` for ``k ≥ 0``."""
    q = np.linspace(0, 1, bins + 1)[1:-1]
    cont = np.where(q < 0.5, scale * np.log(2 * q), -scale * np.log(2 * (1 - q)))
    edges = np.unique(np.floor(cont).astype(np.int64))
    a = math.exp(-1.0 / scale)
    k = edges.astype(np.float64)
    cdf = np.where(k < 0, np.exp(k / scale) / (1 + a), 1 - np.exp(-(k + 1) / scale) / (1 + a))
    probs = np.diff(np.concatenate([[0.0], cdf, [1.0]]))
    return np.append(edges, np.iinfo(np.int64).max), probs


# ----------------------------------------------------------------------------- binomial


@dataclass(frozen=True)
class BinomialResult:
    """An exact two-sided binomial test of ``k`` successes in ``n`` against probability ``p``."""

    k: int
    n: int
    p: float
    pvalue: float

    @property
    def rejected(self) -> bool:
        return self.pvalue < ALPHA

    def __str__(self) -> str:
        return f"{self.k} of {self.n} (expected {self.n * self.p:.2f}); p-value {self.pvalue:.3g}"


def binomial_check(k: int, n: int, p: float) -> BinomialResult:
    """Exact two-sided binomial test; rejected when the p-value is below ``ALPHA``."""
    if p <= 0.0:
        return BinomialResult(k, n, p, 1.0 if k == 0 else 0.0)
    if p >= 1.0:
        return BinomialResult(k, n, p, 1.0 if k == n else 0.0)
    return BinomialResult(k, n, p, float(stats.binomtest(k, n, p).pvalue))


def tail_cutoff(pmf: Pmf, n: int, expected: float = 300.0) -> int:
    """The smallest ``c ≥ 0`` with ``n·P[|X| > c] ≤ expected`` (a cut far in the tail)."""
    lo, hi = 0, max(pmf.hi, -pmf.lo, 0)
    while lo < hi:  # two_sided_tail is non-increasing in c
        mid = (lo + hi) // 2
        if n * two_sided_tail(pmf, mid) > expected:
            lo = mid + 1
        else:
            hi = mid
    return lo


def two_sided_tail(pmf: Pmf, c: int) -> float:
    """``P[|X| > c]`` under ``pmf`` (``c ≥ 0``)."""
    return pmf.tail_above(c) + pmf.tail_below(-c)


def tail_check(samples: npt.ArrayLike, pmf: Pmf, c: int) -> BinomialResult:
    """Binomial test that the frequency of ``|X| > c`` matches ``pmf``."""
    x = np.asarray(samples)
    return binomial_check(int((np.abs(x) > c).sum()), x.size, two_sided_tail(pmf, c))


def check_distribution(samples: npt.ArrayLike, pmf: Pmf) -> list[str]:
    """Run the chi-square and a far-tail binomial test; return the failures (empty if none).

    Two checks at ``ALPHA`` each: false-failure probability below ``2e-7``.
    """
    x = np.asarray(samples, dtype=np.int64)
    failures = []
    gof = chi2_gof(x, pmf)
    if gof.rejected:
        failures.append(f"chi-square: {gof}")
    c = tail_cutoff(pmf, x.size)
    tail = tail_check(x, pmf, c)
    if tail.rejected:
        failures.append(f"tail P[|X| > {c}]: {tail}")
    return failures


# ----------------------------------------------------------------------------- two samples


def two_sample_chi2(a: npt.ArrayLike, b: npt.ArrayLike) -> Chi2Result:
    """Chi-square test that two samples of a discrete feature have the same distribution.

    Categories whose pooled count is small are merged into one, so that every expected cell
    count is at least ``MIN_EXPECTED / 4`` (50) — the contingency chi-square is then accurate
    far into its tail. When everything falls in a single category the samples agree and the
    statistic is 0.
    """
    xa = np.asarray(a, dtype=np.int64)
    xb = np.asarray(b, dtype=np.int64)
    cats, inv = np.unique(np.concatenate([xa, xb]), return_inverse=True)
    ca = np.bincount(inv[: xa.size], minlength=cats.size).astype(np.float64)
    cb = np.bincount(inv[xa.size :], minlength=cats.size).astype(np.float64)
    n_a, n_b = ca.sum(), cb.sum()
    share = min(n_a, n_b) / (n_a + n_b)
    small = (ca + cb) * share < MIN_EXPECTED / 4
    if small.any():
        ca = np.append(ca[~small], ca[small].sum())
        cb = np.append(cb[~small], cb[small].sum())
        keep = (ca + cb) > 0
        ca, cb = ca[keep], cb[keep]
    if ca.size < 2:
        return Chi2Result(0.0, 1, float(stats.chi2.isf(ALPHA, 1)), ca + cb, ca)
    pooled = (ca + cb) / (n_a + n_b)
    ea, eb = pooled * n_a, pooled * n_b
    stat = float(((ca - ea) ** 2 / ea).sum() + ((cb - eb) ** 2 / eb).sum())
    df = ca.size - 1
    return Chi2Result(stat, df, float(stats.chi2.isf(ALPHA, df)), ea, ca)


def low_bits(values: npt.ArrayLike, bits: int = 8) -> Ints:
    """The lowest ``bits`` bits of the IEEE-754 representation of each double."""
    v = np.ascontiguousarray(values, dtype=np.float64)
    mask = np.uint64((1 << bits) - 1)
    return (v.view(np.uint64) & mask).astype(np.int64)
