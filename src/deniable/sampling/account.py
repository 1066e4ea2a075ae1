"""What the mechanisms run on one Bernoulli sample have cost: the amplified total, charged in steps.

Li–Qardaji–Su Theorem 1: an ``(ε, δ)``-DP mechanism run on a Bernoulli(β) sample of the
privacy units is ``(ln(1 + β(e^ε − 1)), βδ)``-DP with respect to the whole table. Several
mechanisms on the *same* sample compose first (basic composition, ``S = Σ lossᵢ``) and are
amplified together, and amplification is not additive: charging each query its own amplified
loss would under-count. A :class:`SampleAccount` therefore charges each new mechanism the
increment ``amplify(S + loss) − amplify(S)``; the charges add up to exactly ``amplify(S)``,
an upper bound on the loss of everything run on the sample (the amplified ε is irrational and
is rounded up to a rational).

**Charges with δ > 0** (private partition selection on a sampled table) are amplified like
the others, on purpose: the theorem is stated for ``(ε, δ)``-DP algorithms
(Li–Qardaji–Su 2012, *On Sampling, Anonymization, and Differential Privacy*, Theorem 1:
``ε′ = ln(1 + β(e^ε − 1))``, ``δ′ = βδ``; Balle–Barthe–Gaboardi 2018, *Privacy Amplification
by Subsampling*, give the same bound for Poisson subsampling under add/remove neighbours,
deniable's neighbouring relation). The argument is short. Let ``D′ = D ∪ {t}``, ``T`` the
sample of ``D``'s units, and for an output set ``S`` let ``p = P[A(T) ∈ S]`` and
``q = P[A(T ∪ {t}) ∈ S]``, so ``q ≤ e^ε p + δ`` and ``p ≤ e^ε q + δ``. On ``D′`` the target
is kept with probability ``β``, independently of ``T``:

* ``(1 − β)p + βq ≤ (1 + β(e^ε − 1))p + βδ``;
* ``p ≤ e^ε′((1 − β)p + βq) + βδ``: with ``q ≥ e^−ε(p − δ)`` the right side is at least
  ``p·(1 + β(e^ε − 1))(1 − β(1 − e^−ε)) + βδ(1 − e^(ε′ − ε))``, and the product is
  ``1 + β(1 − β)(e^ε − 1)²e^−ε ≥ 1`` while ``ε′ ≤ ε``.

Both are linear in ``(p, q)``, so they survive averaging over ``T``. Everything run on one
sample composes first (basic composition, ``S = Σ lossᵢ``, δ's added) and the total is
amplified once, so the δ part of each charge is ``β·(S_δ + δᵢ) − β·S_δ = βδᵢ`` exactly, and
the ε part the increment of ``ln(1 + β(e^x − 1))`` (rounded up through
:func:`~deniable.accounting.amplification.amplified_epsilon_upper`);
``tests/unit/test_accounting_soundness_items.py`` checks both, through the ledger too.
These increments are a guarantee only added up, which is why the zCDP accountant refuses
them.

Used by :class:`deniable.sampling.bernoulli.SampledTable` and by the query session for tables
registered with ``sample_rate``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from fractions import Fraction

from deniable.accounting.amplification import amplify_bernoulli, sampling_rate
from deniable.accounting.conversions import convert
from deniable.accounting.loss import Epsilon, EpsilonDelta, Number, PrivacyLoss
from deniable.errors import InvalidParameter, UnsafeQuery

_ZERO = EpsilonDelta(epsilon=0, delta=0)


class SampleAccount:
    """The running amplified cost of the mechanisms run on one Bernoulli(β) sample.

    Args:
        rate: the sampling rate ``β ∈ (0, 1]`` the sample was drawn with (an upper bound on
            every unit's inclusion probability).
        identity: an opaque, random name of the sample (never derived from data), recorded
            with each charge made on it so that a ledger can tell which sample was used.

    Examples:
        >>> acc = SampleAccount(rate=Fraction(1, 10))
        >>> with acc.pending(Epsilon(epsilon=1)) as cost:
        ...     round(float(cost.epsilon), 4)
        0.1586
        >>> with acc.pending(Epsilon(epsilon=1)) as cost:  # the increment: not additive
        ...     round(float(cost.epsilon), 4)
        0.3355
        >>> round(float(acc.spent.epsilon), 4)  # = amplify(ε = 2) at β = 0.1
        0.494
    """

    __slots__ = ("_charged", "_exclusive", "_lock", "_on_sample", "identity", "rate")

    def __init__(self, *, rate: Number, identity: str | None = None) -> None:
        self.rate = sampling_rate(rate)
        self.identity = identity
        self._on_sample = _ZERO  # unamplified, composed
        self._charged = _ZERO  # amplified, what was charged
        self._exclusive = False
        self._lock = threading.Lock()

    @property
    def spent(self) -> EpsilonDelta:
        """The amplified loss charged so far for everything run on this sample."""
        return self._charged

    @property
    def spent_on_sample(self) -> EpsilonDelta:
        """The composed (unamplified) loss of everything run on this sample."""
        return self._on_sample

    def cost(self, loss: PrivacyLoss) -> EpsilonDelta:
        """What running a mechanism with ``loss`` on the sample would cost now (no change).

        ``amplify(S + loss) − amplify(S)`` component-wise, with ``S`` what already ran on the
        sample: for ``loss = (εᵢ, δᵢ)`` that is ``βδᵢ`` and
        ``ln(1 + β(e^(S_ε + εᵢ) − 1)) − ln(1 + β(e^S_ε − 1))`` (each total rounded up); the
        module docstring gives the argument for δᵢ > 0.

        Raises:
            InvalidParameter: a ρ-zCDP loss (amplification needs an ``(ε, δ)`` loss).
            UnsafeQuery: the sample was claimed by a sampling-based (DPS) algorithm.
        """
        if self._exclusive:
            raise UnsafeQuery(
                "this sample was used by an algorithm whose guarantee relies on sampling "
                "alone (e.g. safe k-anonymization); no other query may run on it: draw a "
                "fresh sample"
            )
        if not isinstance(loss, Epsilon | EpsilonDelta):
            raise InvalidParameter(
                "amplification by sampling needs an (ε, δ) loss; convert a ρ-zCDP loss first"
            )
        total = amplify_bernoulli(self._on_sample + convert(loss, EpsilonDelta), self.rate)
        return EpsilonDelta(
            epsilon=max(total.epsilon - self._charged.epsilon, Fraction(0)),
            delta=max(total.delta - self._charged.delta, Fraction(0)),
        )

    @contextmanager
    def pending(self, loss: PrivacyLoss) -> Iterator[EpsilonDelta]:
        """Hold the account while ``loss``'s cost is paid; record it if the block succeeds.

        Yields the cost (:meth:`cost`). The caller charges it to its budget inside the
        block; if the block raises (e.g. the budget refuses), nothing is recorded. The
        account is locked meanwhile, so concurrent callers are charged in turn.
        """
        with self._lock:
            cost = self.cost(loss)
            yield cost
            self._on_sample = self._on_sample + convert(loss, EpsilonDelta)
            self._charged = self._charged + cost

    def claim_exclusive(self) -> None:
        """Reserve the sample for one algorithm whose guarantee comes from sampling alone.

        Li–Qardaji–Su (§2.6): a (β, ε, δ)-DPS algorithm such as safe k-anonymization does
        not compose even with DP mechanisms on the *same* sample. After this call every
        :meth:`cost` is refused; the claim itself is refused if something already ran.

        Raises:
            UnsafeQuery: a mechanism was already charged on this sample.
        """
        with self._lock:
            if self._on_sample != _ZERO or self._exclusive:
                raise UnsafeQuery("this sample was already used; draw a fresh sample")
            self._exclusive = True
