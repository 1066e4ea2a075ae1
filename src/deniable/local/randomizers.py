"""Client-side randomisers of local differential privacy, each knowing its ε.

A randomiser maps each respondent's true value to a randomised report on the respondent's
side; the server only ever sees reports. Each one here is ε-locally differentially private
per report: for any two values ``v, v'`` and any report ``r``,
``P[r | v] ≤ e^ε · P[r | v']``.

============================  ==================================  ============================
class                         report                              ε per report
============================  ==================================  ============================
BinaryRandomizedResponse(p)   the bit w.p. ``p``, flipped else    ``ln(p/(1−p))``
CoinRandomizedResponse(q)     the bit w.p. ``q``, else a coin     ``ln((1+q)/(1−q))``
KRandomizedResponse(k, ε)     the value w.p. ``p``, else uniform  ``ε``
                              over the other ``k−1``
OptimizedUnaryEncoding(k, ε)  ``k`` bits: own bit w.p. 1/2,       ``ε``
                              every other bit w.p. ``1/(e^ε+1)``
BloomEncoder (RAPPOR-style)   see :mod:`deniable.local.bloom`     ``ε₁`` (one report)
============================  ==================================  ============================

The binary, coin and k-ary randomisers are the ones of :mod:`deniable.mechanisms` (one
concept, one module); this module wraps them in the common :class:`LocalRandomizer` shape
that the estimators, the repeated-collection wrappers and the survey simulator use, and adds
optimised unary encoding (Wang, Blocki, Li, Jha: "Locally Differentially Private Protocols
for Frequency Estimation", USENIX Security 2017).

Every probability is an exact rational and every draw comes from :mod:`deniable.noise`.
Where the textbook probability is irrational (``e^ε/(e^ε+k−1)``, ``1/(e^ε+1)``) a rational
is used on the safe side of it, so the real loss is at most the stated ε; ε stated as
``ln`` of a rational is rounded upwards (:func:`deniable.noise.exact.log_upper`).

A randomiser is split into a *permanent* and an *instantaneous* step so that memoisation
(:mod:`deniable.local.repeated`) can keep the first and refresh the second; for every
randomiser but the Bloom encoder the instantaneous step is the identity.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np
import numpy.typing as npt

from deniable.accounting.loss import Epsilon
from deniable.errors import InvalidParameter
from deniable.local.estimators import (
    BinaryEstimate,
    FrequencyEstimate,
    estimate_binary,
    estimate_coin,
    estimate_k_rr,
    estimate_unary,
)
from deniable.mechanisms.randomized_response import (
    coin_randomized_response,
    coin_rr_loss,
    k_randomized_response,
    k_rr_keep_probability,
    randomized_response,
    rr_loss,
)
from deniable.noise.bernoulli import bernoulli
from deniable.noise.exact import RationalLike, exp_lower, positive_fraction, to_fraction
from deniable.noise.source import RandomSource, resolve
from deniable.noise.uniform import random_bits

Bools = npt.NDArray[np.bool_]
Ints = npt.NDArray[np.int64]
R = TypeVar("R")


@runtime_checkable
class LocalRandomizer(Protocol[R]):
    """What every local randomiser offers (``R`` is the type of a batch of reports)."""

    @property
    def name(self) -> str:
        """A short name of the mechanism."""
        ...

    @property
    def loss(self) -> Epsilon:
        """ε-LDP of one report."""
        ...

    @property
    def permanent_loss(self) -> Epsilon:
        """ε-LDP of any number of reports sharing one memoised permanent response."""
        ...

    @property
    def domain(self) -> tuple[Any, ...] | None:
        """The finite set of possible values, or None for an open domain (Bloom encoder)."""
        ...

    def permanent(self, values: Any, *, source: RandomSource | None = None) -> R:
        """The randomised step that memoisation keeps fixed per value."""
        ...

    def instantaneous(self, responses: R, *, source: RandomSource | None = None) -> R:
        """The step redone at every report (the identity for most randomisers)."""
        ...

    def randomize(self, values: Any, *, source: RandomSource | None = None) -> R:
        """One independent report per value; each report is ``loss``-LDP."""
        ...

    def for_client(self, source: RandomSource) -> LocalRandomizer[R]:
        """This randomiser as used by one client (fixes per-client state such as a cohort)."""
        ...

    def estimate(self, reports: R, *, domain: Sequence[Any] | None = None) -> FrequencyEstimate:
        """Server side: unbiased frequency estimates from a batch of reports (free)."""
        ...


def _value_indices(values: Any, k: int) -> Ints:
    v = np.asarray(values)
    if v.ndim != 1 or v.dtype.kind not in "biu" or (v.size and (v.min() < 0 or v.max() >= k)):
        raise InvalidParameter(f"values must be a 1-D array of integers in [0, {k})")
    return v.astype(np.int64)


def _labels(domain: Sequence[Any] | None, default: tuple[Any, ...]) -> tuple[Any, ...]:
    if domain is None:
        return default
    labels = tuple(domain)
    if len(labels) != len(default):
        raise InvalidParameter(f"domain must have {len(default)} labels")
    return labels


class _Memoryless:
    """Shared behaviour of randomisers without an instantaneous step."""

    _loss: Epsilon

    @property
    def loss(self) -> Epsilon:
        """ε-LDP of one report."""
        return self._loss

    @property
    def permanent_loss(self) -> Epsilon:
        """The same as :attr:`loss`: the whole report is the permanent response."""
        return self._loss

    def instantaneous(self, responses: R, *, source: RandomSource | None = None) -> R:
        return responses

    def for_client(self, source: RandomSource) -> Any:
        return self


class BinaryRandomizedResponse(_Memoryless):
    """Report the true bit with probability ``p`` in (1/2, 1), its negation otherwise.

    ε = ``ln(p/(1−p))`` per report (rounded up).

    Examples:
        >>> from deniable.noise.testing import SeededRandom
        >>> rr = BinaryRandomizedResponse(p=Fraction(3, 4))
        >>> round(float(rr.loss.epsilon), 6)  # ln 3
        1.098612
        >>> rr.randomize([0, 1, 1], source=SeededRandom(1)).dtype
        dtype('bool')
    """

    name = "randomized_response"
    domain = (0, 1)

    def __init__(self, *, p: RationalLike) -> None:
        self.p = to_fraction(p, "p")
        self._loss = rr_loss(self.p)  # validates p ∈ (1/2, 1)

    def permanent(self, values: Any, *, source: RandomSource | None = None) -> Bools:
        """One randomised report per value (each ``loss``-LDP)."""
        out: Bools = randomized_response(values, p=self.p, source=source).value.astype(bool)
        return out

    def randomize(self, values: Any, *, source: RandomSource | None = None) -> Bools:
        """One independent report per value; each is ``loss``-LDP."""
        return self.permanent(values, source=source)

    def estimate(self, reports: Bools, *, domain: Sequence[Any] | None = None) -> BinaryEstimate:
        """Unbiased frequency estimates from reports (post-processing: free)."""
        r = np.asarray(reports, dtype=bool)
        est = estimate_binary(int(r.sum()), r.size, p=self.p, mechanism=self.name)
        _labels(domain, (0, 1))
        return est

    def __repr__(self) -> str:
        return f"BinaryRandomizedResponse(p={self.p})"


class CoinRandomizedResponse(_Memoryless):
    """The thesis' survey: answer truthfully w.p. ``q`` in (0, 1), else report a fair coin.

    A report equals the truth w.p. ``(1+q)/2``; ε = ``ln((1+q)/(1−q))`` (``q = 1/2``: ln 3).

    Examples:
        >>> round(float(CoinRandomizedResponse(q=0.5).loss.epsilon), 6)
        1.098612
    """

    name = "coin_randomized_response"
    domain = (0, 1)

    def __init__(self, *, q: RationalLike) -> None:
        self.q = to_fraction(q, "q")
        self._loss = coin_rr_loss(self.q)  # validates q ∈ (0, 1)

    def permanent(self, values: Any, *, source: RandomSource | None = None) -> Bools:
        """One randomised report per value (each ``loss``-LDP)."""
        out: Bools = coin_randomized_response(values, q=self.q, source=source).value.astype(bool)
        return out

    def randomize(self, values: Any, *, source: RandomSource | None = None) -> Bools:
        """One independent report per value; each is ``loss``-LDP."""
        return self.permanent(values, source=source)

    def estimate(self, reports: Bools, *, domain: Sequence[Any] | None = None) -> BinaryEstimate:
        """Unbiased frequency estimates from reports (post-processing: free)."""
        r = np.asarray(reports, dtype=bool)
        _labels(domain, (0, 1))
        return estimate_coin(int(r.sum()), r.size, q=self.q)

    def __repr__(self) -> str:
        return f"CoinRandomizedResponse(q={self.q})"


class KRandomizedResponse(_Memoryless):
    """k-ary (generalised) randomized response over ``{0, …, k−1}``; ε-LDP per report.

    Keeps the value w.p. ``keep_probability`` (a rational just below ``e^ε/(e^ε+k−1)``),
    otherwise reports one of the other ``k − 1`` values uniformly.

    Examples:
        >>> grr = KRandomizedResponse(k=4, epsilon=1)
        >>> float(grr.loss.epsilon)
        1.0
    """

    name = "k_randomized_response"

    def __init__(self, *, k: int, epsilon: RationalLike) -> None:
        if isinstance(k, bool) or not isinstance(k, int) or k < 2:
            raise InvalidParameter("k must be an integer ≥ 2")
        self.k = k
        self.epsilon = positive_fraction(epsilon, "epsilon")
        self.keep_probability = k_rr_keep_probability(k, self.epsilon)
        self._loss = Epsilon(epsilon=self.epsilon)

    @property
    def domain(self) -> tuple[Any, ...]:
        """The values ``0, …, k−1``."""
        return tuple(range(self.k))

    def permanent(self, values: Any, *, source: RandomSource | None = None) -> Ints:
        """One randomised report per value (each ``loss``-LDP)."""
        v = _value_indices(values, self.k)
        out: Ints = k_randomized_response(
            v, k=self.k, epsilon=self.epsilon, source=source
        ).value.astype(np.int64)
        return out

    def randomize(self, values: Any, *, source: RandomSource | None = None) -> Ints:
        """One independent report per value; each is ``loss``-LDP."""
        return self.permanent(values, source=source)

    def estimate(self, reports: Ints, *, domain: Sequence[Any] | None = None) -> FrequencyEstimate:
        """Unbiased frequency estimates from reports (post-processing: free)."""
        r = _value_indices(reports, self.k)
        return estimate_k_rr(
            np.bincount(r, minlength=self.k),
            keep_probability=self.keep_probability,
            labels=_labels(domain, self.domain),
        )

    def __repr__(self) -> str:
        return f"KRandomizedResponse(k={self.k}, epsilon={float(self.epsilon)!r})"


class OptimizedUnaryEncoding(_Memoryless):
    """Optimised unary encoding (OUE, Wang et al. 2017) over ``{0, …, k−1}``; ε-LDP.

    The value ``v`` is one-hot encoded in ``k`` bits; bit ``v`` is reported as 1 w.p.
    ``p = 1/2`` (a fair bit) and every other bit w.p. ``q``, a rational at least
    ``1/(e^ε+1)``, so that ``p(1−q)/((1−p)q) ≤ e^ε``. Reports are ``n × k`` boolean
    arrays; among unary encodings this ``(p, q)`` minimises the estimator's variance.

    Examples:
        >>> from deniable.noise.testing import SeededRandom
        >>> oue = OptimizedUnaryEncoding(k=5, epsilon=1)
        >>> oue.randomize([0, 4], source=SeededRandom(2)).shape
        (2, 5)
    """

    name = "optimized_unary_encoding"
    p = Fraction(1, 2)

    def __init__(self, *, k: int, epsilon: RationalLike) -> None:
        if isinstance(k, bool) or not isinstance(k, int) or k < 2:
            raise InvalidParameter("k must be an integer ≥ 2")
        self.k = k
        self.epsilon = positive_fraction(epsilon, "epsilon")
        # q = 1/(e_lo + 1) ≥ 1/(e^ε + 1) because e_lo ≤ e^ε: rounding can only lower the loss.
        self.q = 1 / (exp_lower(self.epsilon) + 1)
        self._loss = Epsilon(epsilon=self.epsilon)

    @property
    def domain(self) -> tuple[Any, ...]:
        """The values ``0, …, k−1``."""
        return tuple(range(self.k))

    def permanent(self, values: Any, *, source: RandomSource | None = None) -> Bools:
        """One randomised report per value (each ``loss``-LDP)."""
        v = _value_indices(values, self.k)
        src = resolve(source)
        n = v.size
        # Every bit is drawn (no branch on the value), then the own bit gets its fair coin.
        out = bernoulli(self.q, n * self.k, source=src).reshape(n, self.k)
        out[np.arange(n), v] = random_bits(n, source=src)
        return out

    def randomize(self, values: Any, *, source: RandomSource | None = None) -> Bools:
        """One independent report per value; each is ``loss``-LDP."""
        return self.permanent(values, source=source)

    def estimate(self, reports: Bools, *, domain: Sequence[Any] | None = None) -> FrequencyEstimate:
        """Unbiased frequency estimates from reports (post-processing: free)."""
        r = np.asarray(reports, dtype=bool)
        if r.ndim != 2 or r.shape[1] != self.k:
            raise InvalidParameter(f"OUE reports must be an n × {self.k} boolean array")
        return estimate_unary(
            r.sum(axis=0), r.shape[0], p=self.p, q=self.q, labels=_labels(domain, self.domain)
        )

    def __repr__(self) -> str:
        return f"OptimizedUnaryEncoding(k={self.k}, epsilon={float(self.epsilon)!r})"
