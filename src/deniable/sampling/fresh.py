"""Fresh-sample releases: a new Bernoulli sample for every release that relies on sampling.

Li–Qardaji–Su (§2.7): the uncertainty a sample creates is spent by the first answer computed
from it, but it is "easy to gain": draw a *fresh* sample for each release, publish the result,
discard the sample. Each release is then, on its own, an algorithm on the full table whose
loss is the amplified loss of its mechanism, ``(ln(1 + β(e^εᵢ − 1)), βδᵢ)``, and — since every
release uses independent coins — the releases compose sequentially: the total is the **sum of
the amplified losses**. That is smaller than amplifying the sum, which is what several
releases on *one* sample cost (``ln(1 + β(e^x − 1))`` is convex and 0 at 0, hence
superadditive), so fresh sampling buys more releases from the same budget. For example, 50
releases at ε = 1 with β = 0.1 cost about 50 × 0.159 ≈ 7.9 instead of ≈ 47.7.

The mechanism's loss is declared by the caller (it is the loss of what ``compute`` does with
the sample); ``compute`` must read nothing but the sample it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import TypeVar

from deniable.accounting.amplification import amplify_bernoulli, sampling_rate
from deniable.accounting.filter import BudgetFilter
from deniable.accounting.loss import Epsilon, EpsilonDelta, Number
from deniable.errors import InvalidParameter
from deniable.noise.source import RandomSource, resolve
from deniable.sampling.bernoulli import SampledTable, sample_table
from deniable.sqlrunner import SQLRunner, require_runner

T = TypeVar("T")


class FreshSampleReleases:
    """Releases from ``table``, each computed on its own fresh Bernoulli(``rate``) sample.

    Each :meth:`release` draws a new sample (a new secret key), runs ``compute`` on it,
    drops it, and charges ``amplify_bernoulli(loss, rate)``: check, compute, then charge, so a
    refused or failed release costs nothing and nothing is returned uncharged.

    Args:
        runner: the engine holding ``table`` (e.g. a
            :class:`deniable.engines.duckdb.DuckDBRunner` around your connection).
        table: the table or view to sample.
        rate: ``β ∈ (0, 1]``.
        by: columns identifying the privacy unit (None: rows).
        budget: a budget filter to charge (optional; :attr:`total` is kept either way).
        source: randomness for the sampling keys (the CSPRNG by default).

    Examples:
        >>> import duckdb
        >>> from deniable.engines.duckdb import DuckDBRunner
        >>> con = duckdb.connect()
        >>> _ = con.execute("CREATE TABLE t AS SELECT range AS x FROM range(100)")
        >>> releases = FreshSampleReleases(DuckDBRunner(con), "t", rate=0.1)
        >>> for _ in range(3):
        ...     _ = releases.release(lambda s: None, loss=Epsilon(epsilon=1))
        >>> round(float(releases.total.epsilon), 4)  # 3 × ln(1 + 0.1(e − 1))
        0.4757
    """

    def __init__(
        self,
        runner: SQLRunner,
        table: str,
        *,
        rate: Number,
        by: Sequence[str] | None = None,
        budget: BudgetFilter | None = None,
        source: RandomSource | None = None,
    ) -> None:
        self._runner = require_runner(runner)
        self.table = table
        self.rate = sampling_rate(rate)
        self.by = None if by is None else ((by,) if isinstance(by, str) else tuple(by))
        self.budget = budget
        self._source = resolve(source)
        self._charges: list[EpsilonDelta] = []

    def release(self, compute: Callable[[SampledTable], T], *, loss: Epsilon | EpsilonDelta) -> T:
        """Run ``compute`` on a fresh sample; its mechanism's loss on the sample is ``loss``.

        Charges ``amplify_bernoulli(loss, rate)`` after ``compute`` returns and before its
        value is handed back.

        Raises:
            InvalidParameter: a ρ-zCDP loss (convert first).
            BudgetExceeded: the budget cannot pay (checked before sampling, charged after).
        """
        if not isinstance(loss, Epsilon | EpsilonDelta):
            raise InvalidParameter(
                "amplification by sampling needs an (ε, δ) loss; convert a ρ-zCDP loss first"
            )
        cost = amplify_bernoulli(loss, self.rate)
        if self.budget is not None and not self.budget.can_charge(cost):
            self.budget.charge(cost)  # raises BudgetExceeded naming what is left
        with sample_table(
            self._runner, self.table, rate=self.rate, by=self.by, source=self._source
        ) as sample:
            sample.claim_exclusive()  # the sample serves this release only
            value = compute(sample)
        if self.budget is not None:
            self.budget.charge(cost)
        self._charges.append(cost)
        return value

    @property
    def charges(self) -> tuple[EpsilonDelta, ...]:
        """The amplified loss of each release so far."""
        return tuple(self._charges)

    @property
    def total(self) -> EpsilonDelta:
        """Sequential composition of the releases' amplified losses."""
        eps = sum((c.epsilon for c in self._charges), Fraction(0))
        delta = sum((c.delta for c in self._charges), Fraction(0))
        return EpsilonDelta(epsilon=eps, delta=delta)


def fresh_total(loss: Epsilon | EpsilonDelta, rate: Number, releases: int) -> EpsilonDelta:
    """What ``releases`` releases of ``loss`` cost, each on its own fresh ``rate``-sample.

    Examples:
        >>> round(float(fresh_total(Epsilon(epsilon=1), 0.1, 50).epsilon), 2)
        7.93
    """
    if isinstance(releases, bool) or not isinstance(releases, int) or releases < 0:
        raise InvalidParameter("releases must be an integer ≥ 0")
    one = amplify_bernoulli(loss, rate)
    return EpsilonDelta(epsilon=one.epsilon * releases, delta=one.delta * releases)


def shared_total(loss: Epsilon | EpsilonDelta, rate: Number, releases: int) -> EpsilonDelta:
    """What the same ``releases`` cost when all run on *one* sample: amplify the sum.

    Examples:
        >>> round(float(shared_total(Epsilon(epsilon=1), 0.1, 50).epsilon), 2)
        47.7
    """
    if isinstance(releases, bool) or not isinstance(releases, int) or releases < 0:
        raise InvalidParameter("releases must be an integer ≥ 0")
    per = loss if isinstance(loss, EpsilonDelta) else EpsilonDelta(epsilon=loss.epsilon, delta=0)
    summed = EpsilonDelta(epsilon=per.epsilon * releases, delta=per.delta * releases)
    return amplify_bernoulli(summed, rate)
