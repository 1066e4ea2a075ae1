"""Privacy-definitions lab: exact ε of DP, noiseless privacy and causal DP on finite settings.

Following the thesis' §3.1.2 (correlated data, δ = 0), a *setting* is a probability
distribution ``θ`` over datasets of ``n`` records (tuples), each optionally paired with the
attacker's background knowledge ``b``, and a *mechanism* ``M`` maps a dataset to a finite
output distribution. Probabilities are exact :class:`~fractions.Fraction` s; the ε returned is
``ln`` of an exact ratio (``math.inf`` when an output possible on one side is impossible on
the other). Over a finite output space, the largest ratio over events is attained on a
single output, so singletons suffice.

* **DP** (substitution neighbours, as in the thesis' section): the largest
  ``P[M(D) = o] / P[M(D') = o]`` over datasets ``D, D' ∈ T^n`` differing in one record and
  outputs ``o`` — the record domain ``T`` defaults to every value a record takes under ``θ``.
* **Noiseless privacy** (NPr, Definition 49): for every index ``i``, background ``b`` and
  records ``t, t'`` compatible with ``b`` (``P[D_i = t, B = b] > 0``), the ratio of
  ``P[M(D) = o | D_i = t, B = b]`` to ``P[M(D) = o | D_i = t', B = b]``, ``D ~ θ``.
* **Causal DP** (CausDP, Definition 51): ``D`` is drawn conditioned on ``D_i = t, B = b``
  and *then* record ``i`` is replaced by any ``t' ∈ T``: the ratio of ``P[M(D) = o]`` to
  ``P[M(D_{i→t'}) = o]`` (both directions; the dependencies in the data are not changed
  along with the record).
* **Distributional DP** (DistDP, Definition 50) is existential in its simulator;
  :func:`distributional_epsilon` gives the ε of one given simulator ``Sim(D_{−i})``.

The thesis' examples, reproduced in ``tests/unit/test_audit_definitions.py``: with duplicated
records the identity is ``0``-DistDP (its simulator copies the duplicate) but not NPr nor
CausDP (Example 2); the parity of a sum of duplicated records is ``0``-NPr (always even) but
not CausDP — changing one record without its duplicate makes the sum odd (Example 4); with
independent records NPr and CausDP coincide (Proposition 22).

Examples:
    Two bits, each duplicated (``D = (x, x)``), ``x`` uniform; the mechanism releases the
    parity of the sum:

    >>> from fractions import Fraction
    >>> prior = Setting.duplicated({0: Fraction(1, 2), 1: Fraction(1, 2)}, n=1)
    >>> parity = deterministic(lambda d: sum(d) % 2)
    >>> noiseless_epsilon(prior, parity).epsilon      # the sum is always even
    0.0
    >>> causal_epsilon(prior, parity).epsilon         # change one copy: odd
    inf
    >>> dp_epsilon(prior, parity).epsilon
    inf

    Randomized response on each record, two independent records: NPr = CausDP = DP = ln 3.

    >>> rr = randomize_each(Fraction(3, 4))
    >>> iid = Setting.independent({0: Fraction(1, 2), 1: Fraction(1, 2)}, n=2)
    >>> [str(f(iid, rr).ratio) for f in (dp_epsilon, noiseless_epsilon, causal_epsilon)]
    ['3', '3', '3']
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from deniable.errors import InvalidParameter

Record = Hashable
Dataset = tuple[Record, ...]
Output = Hashable
Law = Mapping[Output, Fraction]
Mechanism = Callable[[Dataset], Law]
"""``M(D)``: the exact output distribution of the mechanism on dataset ``D``."""

__all__ = [
    "Bound",
    "Setting",
    "causal_epsilon",
    "deterministic",
    "distributional_epsilon",
    "dp_epsilon",
    "noiseless_epsilon",
    "randomize_each",
]


@dataclass(frozen=True, slots=True)
class Bound:
    """An exact ε: ``ratio`` (``e^ε``, None for ∞) and the worst case that attains it.

    Attributes:
        ratio: the largest probability ratio, exact; None when infinite.
        witness: a description of where it is attained (index, records, output…).
    """

    ratio: Fraction | None
    witness: str

    @property
    def epsilon(self) -> float:
        """``ln(ratio)`` (``math.inf`` when the ratio is infinite)."""
        return math.inf if self.ratio is None else math.log(self.ratio)

    def __le__(self, other: Bound) -> bool:
        if other.ratio is None:
            return True
        return self.ratio is not None and self.ratio <= other.ratio


@dataclass(frozen=True)
class Setting:
    """A distribution over (dataset, background knowledge) pairs, and the record domain.

    Attributes:
        outcomes: ``(dataset, b) → probability`` (exact; positive; sums to 1; every dataset
            of the same length ``n``).
        domain: the record values ``T`` (for DP and for CausDP's replacements); default:
            every value a record takes.
    """

    outcomes: Mapping[tuple[Dataset, Hashable], Fraction]
    domain: tuple[Record, ...] = ()

    def __post_init__(self) -> None:
        if not self.outcomes:
            raise InvalidParameter("a setting needs at least one dataset")
        sizes = {len(d) for d, _ in self.outcomes}
        if len(sizes) != 1 or 0 in sizes:
            raise InvalidParameter("every dataset must hold the same number n ≥ 1 of records")
        probs = [Fraction(p) for p in self.outcomes.values()]
        if any(p <= 0 for p in probs) or sum(probs) != 1:
            raise InvalidParameter("probabilities must be positive fractions summing to 1")
        if not self.domain:
            values = {r for d, _ in self.outcomes for r in d}
            object.__setattr__(self, "domain", tuple(sorted(values, key=repr)))

    @property
    def n(self) -> int:
        """The number of records per dataset."""
        return len(next(iter(self.outcomes))[0])

    @classmethod
    def of_datasets(
        cls, datasets: Mapping[Dataset, Fraction], domain: Sequence[Record] = ()
    ) -> Setting:
        """A setting without background knowledge."""
        return cls({(tuple(d), None): Fraction(p) for d, p in datasets.items()}, tuple(domain))

    @classmethod
    def independent(cls, record: Mapping[Record, Fraction], *, n: int) -> Setting:
        """``n`` independent records, each drawn from ``record``."""
        out: dict[Dataset, Fraction] = defaultdict(Fraction)
        for combo in itertools.product(record.items(), repeat=n):
            out[tuple(r for r, _ in combo)] += math.prod((p for _, p in combo), start=Fraction(1))
        return cls.of_datasets(out)

    @classmethod
    def duplicated(cls, record: Mapping[Record, Fraction], *, n: int, copies: int = 2) -> Setting:
        """``x_1 … x_n`` independent from ``record``, the dataset ``(x_1…x_n)`` ``copies`` times.

        Record ``i + k·n`` duplicates record ``i`` (the thesis' Examples 2 and 4; Example 5
        has ``copies = 3``).
        """
        base = cls.independent(record, n=n)
        return cls.of_datasets({d * copies: p for (d, _), p in base.outcomes.items()})


def deterministic(f: Callable[[Dataset], Output]) -> Mechanism:
    """The mechanism that outputs ``f(D)`` with probability 1."""
    return lambda d: {f(d): Fraction(1)}


def randomize_each(p: Fraction) -> Mechanism:
    """Randomized response on each bit record: kept with probability ``p``, else flipped."""
    p = Fraction(p)
    if not 0 < p < 1:
        raise InvalidParameter("p must be in (0, 1)")

    def mechanism(d: Dataset) -> Law:
        out: dict[Output, Fraction] = defaultdict(Fraction)
        for flips in itertools.product((False, True), repeat=len(d)):
            y = tuple(int(r != 0) ^ int(f) for r, f in zip(d, flips, strict=True))
            out[y] += math.prod((1 - p if f else p for f in flips), start=Fraction(1))
        return out

    return mechanism


# ----------------------------------------------------------------------------- core


class _Worst:
    """The running maximum of ``P_num(o)/P_den(o)`` with its witness."""

    def __init__(self) -> None:
        self.ratio: Fraction | None = Fraction(1)
        self.witness = "every compared pair of output laws is equal"

    def compare(self, num: Law, den: Law, where: str) -> None:
        for o, p in num.items():
            if self.ratio is None:
                return
            if p <= 0:
                continue
            q = den.get(o, Fraction(0))
            if q == 0:
                self.ratio, self.witness = None, f"{where}, output {o!r}"
            elif Fraction(p) / Fraction(q) > self.ratio:
                self.ratio, self.witness = Fraction(p) / Fraction(q), f"{where}, output {o!r}"

    def both(self, a: Law, b: Law, where: str) -> None:
        self.compare(a, b, where)
        self.compare(b, a, where + " (reversed)")

    def bound(self) -> Bound:
        return Bound(self.ratio, self.witness)


def _law(mechanism: Mechanism, d: Dataset) -> dict[Output, Fraction]:
    law = {o: Fraction(p) for o, p in mechanism(d).items() if p != 0}
    if any(p < 0 for p in law.values()) or sum(law.values()) != 1:
        raise InvalidParameter("a mechanism must return exact probabilities summing to 1")
    return law


def _mix(parts: Iterable[tuple[Fraction, Law]]) -> dict[Output, Fraction]:
    out: dict[Output, Fraction] = defaultdict(Fraction)
    total = Fraction(0)
    for w, law in parts:
        total += w
        for o, p in law.items():
            out[o] += w * p
    return {o: p / total for o, p in out.items()}


def _replace(d: Dataset, i: int, t: Record) -> Dataset:
    return (*d[:i], t, *d[i + 1 :])


def _conditionals(
    setting: Setting,
) -> dict[tuple[int, Hashable, Record], list[tuple[Fraction, Dataset]]]:
    """``(i, b, t) → [(P, D)]``: the datasets with ``D_i = t`` and background ``b``."""
    out: dict[tuple[int, Hashable, Record], list[tuple[Fraction, Dataset]]] = defaultdict(list)
    for (d, b), p in setting.outcomes.items():
        for i, t in enumerate(d):
            out[(i, b, t)].append((Fraction(p), d))
    return out


def dp_epsilon(setting: Setting, mechanism: Mechanism) -> Bound:
    """ε of (substitution) DP over all datasets ``T^n`` — the distribution plays no role."""
    worst = _Worst()
    laws: dict[Dataset, dict[Output, Fraction]] = {}

    def law(d: Dataset) -> dict[Output, Fraction]:
        if d not in laws:
            laws[d] = _law(mechanism, d)
        return laws[d]

    for d in itertools.product(setting.domain, repeat=setting.n):
        for i in range(setting.n):
            for t in setting.domain:
                if t != d[i]:
                    worst.compare(law(d), law(_replace(d, i, t)), f"D = {d!r}, record {i} → {t!r}")
    return worst.bound()


def noiseless_epsilon(setting: Setting, mechanism: Mechanism) -> Bound:
    """ε of noiseless privacy (Definition 49) for this one distribution."""
    worst = _Worst()
    cond = _conditionals(setting)
    mixed = {key: _mix((p, _law(mechanism, d)) for p, d in rows) for key, rows in cond.items()}
    for (i, b, t), law_t in mixed.items():
        for (j, b2, t2), law_t2 in mixed.items():
            if j == i and b2 == b and t2 != t:
                worst.compare(law_t, law_t2, f"record {i}: {t!r} against {t2!r}, b = {b!r}")
    return worst.bound()


def causal_epsilon(setting: Setting, mechanism: Mechanism) -> Bound:
    """ε of causal DP (Definition 51): condition on ``D_i = t``, then change record ``i``."""
    worst = _Worst()
    for (i, b, t), rows in _conditionals(setting).items():
        law_t = _mix((p, _law(mechanism, d)) for p, d in rows)
        for t2 in setting.domain:
            if t2 == t:
                continue
            law_t2 = _mix((p, _law(mechanism, _replace(d, i, t2))) for p, d in rows)
            worst.both(law_t, law_t2, f"record {i} = {t!r} changed to {t2!r}, b = {b!r}")
    return worst.bound()


def distributional_epsilon(
    setting: Setting, mechanism: Mechanism, simulator: Callable[[Dataset, int], Law]
) -> Bound:
    """ε of DistDP (Definition 50) *achieved by the given simulator* ``Sim(D_{−i}, i)``.

    DistDP asks for some simulator; this measures one: the largest ratio, both ways, between
    ``M(D)`` and ``Sim(D without record i, i)`` given ``D_i = t, B = b``.
    """
    worst = _Worst()
    for (i, b, t), rows in _conditionals(setting).items():
        real = _mix((p, _law(mechanism, d)) for p, d in rows)
        sim = _mix((p, dict(simulator(d[:i] + d[i + 1 :], i))) for p, d in rows)
        worst.both(real, sim, f"record {i} = {t!r}, b = {b!r}")
    return worst.bound()
