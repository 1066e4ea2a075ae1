"""A hashed Bloom-filter encoder in the style of RAPPOR, for large or unknown domains.

After Erlingsson, Pihur, Korolova, "RAPPOR: Randomized Aggregatable Privacy-Preserving
Ordinal Response" (CCS 2014). Each client belongs to one of ``C`` cohorts. Its value (a
string) is hashed into a Bloom filter ``B`` of ``m`` bits with ``h`` hash functions specific
to the cohort (BLAKE2b keyed with a public ``hash_key``, salted with the cohort). Then:

1. *Permanent randomized response* (PRR): each bit becomes 1 w.p. ``f/2``, 0 w.p. ``f/2``,
   and stays ``B_i`` w.p. ``1 − f``. Memoise it per value to bound repeated reports
   (:class:`deniable.local.repeated.MemoizedRandomizer` does so).
2. *Instantaneous randomized response* (IRR), at every report: a bit is reported as 1 w.p.
   ``q`` if the PRR bit is 1 and w.p. ``p`` if it is 0.

Privacy (RAPPOR, Theorem 1 and §3.2): two values' filters differ in at most ``2h`` bits, so

* memoised PRR (any number of reports of one value): ``ε∞ = 2h·ln((1 − f/2)/(f/2))``;
* one report: ``ε₁ = h·ln(q*(1−p*)/(p*(1−q*)))`` with ``q* = f(p+q)/2 + (1−f)q`` and
  ``p* = f(p+q)/2 + (1−f)p`` (never more than ``ε∞``; the smaller is reported).

Both are rounded upwards. The bounds hold whatever the hash functions are, so the hash key
is public: the server needs it to decode.

Decoding (server side, free): per cohort ``j`` and bit ``i``, the reports give an unbiased
count ``t_ji`` of clients whose true filter has that bit set,
``t_ji = (c_ji − (p + (q−p)f/2)·N_j) / ((1−f)(q−p))``. For a *given candidate list* the
expected ``t`` is ``X·x/C`` with ``X`` the 0/1 design matrix (candidate ``s`` sets bit ``i``
in cohort ``j``) and ``x`` the candidates' true counts (cohorts are assigned uniformly at
random, independently of values). Ordinary least squares ``x̂ = C·(XᵀX)⁻¹Xᵀt`` is then
unbiased when the candidates include every value present. Its variance is the empirical
(sandwich) variance over clients, which treats clients as independent draws and is therefore
conservative for a fixed population; intervals are normal approximations. RAPPOR's Lasso
pre-selection of candidates is not done: pass a candidate list you care about.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

from deniable.accounting.loss import Epsilon
from deniable.errors import InvalidParameter
from deniable.local.estimators import FrequencyEstimate
from deniable.noise.bernoulli import bernoulli
from deniable.noise.exact import RationalLike, log_upper, to_fraction
from deniable.noise.source import RandomSource, resolve
from deniable.noise.uniform import random_bits, uniform_int

Bools = npt.NDArray[np.bool_]
Ints = npt.NDArray[np.int64]

_PERSON = b"deniable.bloom"


@dataclass(frozen=True, eq=False)
class BloomReports:
    """A batch of Bloom-filter reports: one row of ``m`` bits per client, and its cohort."""

    bits: Bools
    cohorts: Ints

    def __len__(self) -> int:
        return int(self.bits.shape[0])


@lru_cache(maxsize=1 << 16)
def _bloom_indices(value: bytes, cohort: int, m: int, h: int, key: bytes) -> tuple[int, ...]:
    digest = hashlib.blake2b(
        value, digest_size=4 * h, key=key, person=_PERSON, salt=cohort.to_bytes(16, "little")
    ).digest()
    return tuple(int.from_bytes(digest[4 * i : 4 * i + 4], "little") % m for i in range(h))


def _bernoulli(p: Fraction, size: int, source: RandomSource) -> Bools:
    """Exact Bernoulli(p) draws; fair bits (one random bit each, not a word) when p = 1/2."""
    if p == Fraction(1, 2):
        return random_bits(size, source=source)
    return bernoulli(p, size, source=source)


def _as_bytes(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytes):
        return value
    raise InvalidParameter("Bloom-filter values must be str or bytes")


class BloomEncoder:
    """RAPPOR-style encoder: Bloom filter, permanent then instantaneous randomized response.

    Args:
        num_bits: ``m``, the Bloom filter size.
        num_hashes: ``h`` (1 to 16), hash functions per cohort.
        num_cohorts: ``C``, the number of cohorts (hash-function families).
        f: permanent randomisation rate, in (0, 1).
        p: P[report 1 | permanent bit 0], and ``q``: P[report 1 | permanent bit 1], with
            ``0 ≤ p < q ≤ 1``.
        hash_key: public key of the hash functions (the server decodes with it).
        cohort: fix the cohort of every report (a client's cohort); None draws one uniformly
            per value, as for a batch of different clients.

    Examples:
        >>> enc = BloomEncoder(num_bits=16, num_hashes=2, num_cohorts=4, f=0.5, p=0.5, q=0.75)
        >>> round(float(enc.permanent_loss.epsilon), 4)  # 2h·ln 3
        4.3944
        >>> round(float(enc.loss.epsilon), 4)
        1.0743
    """

    name = "bloom_rappor"
    domain = None

    def __init__(
        self,
        *,
        num_bits: int,
        num_hashes: int,
        num_cohorts: int,
        f: RationalLike,
        p: RationalLike,
        q: RationalLike,
        hash_key: bytes = b"deniable",
        cohort: int | None = None,
    ) -> None:
        for name, v, hi in (
            ("num_bits", num_bits, 2**31),
            ("num_hashes", num_hashes, 16),
            ("num_cohorts", num_cohorts, 2**31),
        ):
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= hi:
                raise InvalidParameter(f"{name} must be an integer in [1, {hi}]")
        if not isinstance(hash_key, bytes) or len(hash_key) > 64:
            raise InvalidParameter("hash_key must be at most 64 bytes")
        self.num_bits, self.num_hashes, self.num_cohorts = num_bits, num_hashes, num_cohorts
        self.f, self.p, self.q = to_fraction(f, "f"), to_fraction(p, "p"), to_fraction(q, "q")
        if not 0 < self.f < 1:
            raise InvalidParameter("f must be in (0, 1)")
        if not 0 <= self.p < self.q <= 1:
            raise InvalidParameter("need 0 ≤ p < q ≤ 1")
        if cohort is not None and not 0 <= cohort < num_cohorts:
            raise InvalidParameter("cohort must be in [0, num_cohorts)")
        self.hash_key = hash_key
        self.cohort = cohort
        half = self.f / 2
        self._permanent_loss = Epsilon(epsilon=2 * num_hashes * log_upper((1 - half) / half))
        q_star = half * (self.p + self.q) + (1 - self.f) * self.q
        p_star = half * (self.p + self.q) + (1 - self.f) * self.p
        one = num_hashes * log_upper(q_star * (1 - p_star) / (p_star * (1 - q_star)))
        self._loss = Epsilon(epsilon=min(one, self._permanent_loss.epsilon))

    # -- privacy ---------------------------------------------------------------------------

    @property
    def loss(self) -> Epsilon:
        """``ε₁``: the loss of one report (PRR followed by IRR)."""
        return self._loss

    @property
    def permanent_loss(self) -> Epsilon:
        """``ε∞``: the loss of any number of reports built on one memoised PRR."""
        return self._permanent_loss

    # -- client side -----------------------------------------------------------------------

    def filter_indices(self, value: str | bytes, cohort: int) -> tuple[int, ...]:
        """The (up to ``h``) Bloom-filter bits of ``value`` in ``cohort``."""
        return _bloom_indices(
            _as_bytes(value), cohort, self.num_bits, self.num_hashes, self.hash_key
        )

    def bloom(self, values: Sequence[Any], cohorts: Ints) -> Bools:
        """The true Bloom filters (``n × m``) of ``values`` in ``cohorts`` (not private)."""
        n = len(values)
        out = np.zeros((n, self.num_bits), dtype=bool)
        if n == 0:
            return out
        # Hash each distinct (value, cohort) pair once.
        ids: dict[Any, int] = {}
        inv = np.fromiter((ids.setdefault(v, len(ids)) for v in values), dtype=np.int64, count=n)
        uniq = [_as_bytes(v) for v in ids]
        pairs = inv * self.num_cohorts + np.asarray(cohorts, dtype=np.int64)
        upairs, pinv = np.unique(pairs, return_inverse=True)
        table = np.array(
            [
                self.filter_indices(uniq[int(u) // self.num_cohorts], int(u) % self.num_cohorts)
                for u in upairs
            ],
            dtype=np.int64,
        ).reshape(len(upairs), self.num_hashes)
        out[np.repeat(np.arange(n), self.num_hashes), table[pinv.reshape(-1)].reshape(-1)] = True
        return out

    def for_client(self, source: RandomSource) -> BloomEncoder:
        """This encoder with the cohort fixed, drawn uniformly from ``source``."""
        cohort = int(uniform_int(self.num_cohorts, 1, source=source)[0])
        return BloomEncoder(
            num_bits=self.num_bits,
            num_hashes=self.num_hashes,
            num_cohorts=self.num_cohorts,
            f=self.f,
            p=self.p,
            q=self.q,
            hash_key=self.hash_key,
            cohort=cohort,
        )

    def permanent(
        self, values: Sequence[Any], *, source: RandomSource | None = None
    ) -> BloomReports:
        """Permanent randomized response of each value's Bloom filter (``ε∞``-LDP)."""
        if isinstance(values, str | bytes):
            raise InvalidParameter("pass a sequence of values, not a single string")
        src = resolve(source)
        n = len(values)
        if self.cohort is None:
            cohorts = uniform_int(self.num_cohorts, n, source=src)
        else:
            cohorts = np.full(n, self.cohort, dtype=np.int64)
        b = self.bloom(values, cohorts)
        size = n * self.num_bits
        replace = _bernoulli(self.f, size, src).reshape(b.shape)
        coin = random_bits(size, source=src).reshape(b.shape)
        return BloomReports(bits=np.where(replace, coin, b), cohorts=cohorts)

    def instantaneous(
        self, responses: BloomReports, *, source: RandomSource | None = None
    ) -> BloomReports:
        """Instantaneous randomized response: 1 w.p. ``q`` on a 1 bit, w.p. ``p`` on a 0."""
        src = resolve(source)
        bits = np.asarray(responses.bits, dtype=bool)
        ones = _bernoulli(self.q, bits.size, src).reshape(bits.shape)
        zeros = _bernoulli(self.p, bits.size, src).reshape(bits.shape)
        return BloomReports(bits=np.where(bits, ones, zeros), cohorts=responses.cohorts)

    def randomize(
        self, values: Sequence[Any], *, source: RandomSource | None = None
    ) -> BloomReports:
        """One report per value, with a fresh PRR and IRR: ``ε₁``-LDP each."""
        src = resolve(source)
        return self.instantaneous(self.permanent(values, source=src), source=src)

    # -- server side -----------------------------------------------------------------------

    def design_matrix(self, candidates: Sequence[Any]) -> npt.NDArray[np.float64]:
        """``X`` of shape ``(C·m, M)``: 1 where candidate ``s`` sets bit ``i`` in cohort ``j``."""
        m, c = self.num_bits, self.num_cohorts
        x = np.zeros((c * m, len(candidates)), dtype=np.float64)
        for s, cand in enumerate(candidates):
            for j in range(c):
                x[[j * m + i for i in self.filter_indices(cand, j)], s] = 1.0
        return x

    def estimate(
        self, reports: BloomReports, *, domain: Sequence[Any] | None = None
    ) -> FrequencyEstimate:
        """Estimate the frequency of each candidate in ``domain`` (required) from reports.

        Raises:
            InvalidParameter: no candidates, or candidates the Bloom parameters cannot tell
                apart (the design matrix is rank deficient: use more bits or cohorts).
        """
        if domain is None or len(domain) == 0:
            raise InvalidParameter("give the candidate values to estimate as domain=")
        cands = tuple(domain)
        bits = np.asarray(reports.bits, dtype=bool)
        cohorts = np.asarray(reports.cohorts, dtype=np.int64)
        n, m = bits.shape[0], self.num_bits
        if n < 1 or bits.shape[1] != m or cohorts.shape != (n,):
            raise InvalidParameter(f"reports must be n × {m} bits with one cohort each")
        if cohorts.min() < 0 or cohorts.max() >= self.num_cohorts:
            raise InvalidParameter("report cohorts out of range")
        x = self.design_matrix(cands)
        if np.linalg.matrix_rank(x) < len(cands):
            raise InvalidParameter(
                "these candidates cannot be told apart with these Bloom parameters; "
                "use more bits or cohorts, or fewer candidates"
            )
        f, p, q = float(self.f), float(self.p), float(self.q)
        base, scale = p + (q - p) * f / 2, (1 - f) * (q - p)
        lin = np.linalg.pinv(x)  # (XᵀX)⁻¹Xᵀ, shape (M, C·m)
        c = self.num_cohorts
        total = np.zeros(len(cands))
        second = np.zeros((len(cands), len(cands)))
        for j in range(c):
            zj = (bits[cohorts == j] - base) / scale  # E[z_i] = B_i, the client's true filter
            if zj.shape[0] == 0:
                continue
            lj = c * lin[:, j * m : (j + 1) * m]  # client i in cohort j contributes lj @ z_i
            g = zj @ lj.T
            total += g.sum(axis=0)
            second += g.T @ g
        cov = second - np.outer(total, total) / n
        freq = total / n
        var = np.clip(np.diag(cov), 0, None) / n**2
        return FrequencyEstimate(
            frequencies=freq,
            variance=var,
            n=n,
            mechanism=self.name,
            labels=cands,
            method="normal approximation (sandwich)",
        )

    def __repr__(self) -> str:
        return (
            f"BloomEncoder(num_bits={self.num_bits}, num_hashes={self.num_hashes}, "
            f"num_cohorts={self.num_cohorts}, f={self.f}, p={self.p}, q={self.q})"
        )
