"""Fresh-sample releases: a new sample per release, amplified losses composed sequentially."""

from __future__ import annotations

from fractions import Fraction

import duckdb
import pytest

from deniable.accounting import BudgetFilter, amplify_bernoulli
from deniable.accounting.loss import Epsilon, EpsilonDelta, Rho
from deniable.engines.duckdb import DuckDBRunner
from deniable.errors import BudgetExceeded, InvalidParameter, UnsafeQuery
from deniable.noise.testing import SeededRandom
from deniable.sampling import FreshSampleReleases, SampledTable


@pytest.fixture
def con() -> duckdb.DuckDBPyConnection:
    c = duckdb.connect()
    c.execute("CREATE TABLE t AS SELECT range AS id FROM range(5000)")
    return c


def _ids(s: SampledTable) -> frozenset[int]:
    return frozenset(r[0] for r in s.relation().fetchall())


def test_each_release_has_its_own_sample_and_is_charged_its_amplified_loss(
    con: duckdb.DuckDBPyConnection,
) -> None:
    rel = FreshSampleReleases(DuckDBRunner(con), "t", rate=Fraction(1, 5), source=SeededRandom(1))
    samples = [rel.release(_ids, loss=Epsilon(epsilon=1)) for _ in range(3)]
    assert len(set(samples)) == 3  # three different samples (P[equal] ≈ 0 for 5000 rows)
    one = amplify_bernoulli(Epsilon(epsilon=1), Fraction(1, 5))
    assert rel.charges == (one, one, one)
    assert rel.total == EpsilonDelta(epsilon=3 * one.epsilon, delta=0)
    # Every sample is dropped after its release.
    left = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE table_name LIKE 'deniable_sample_%'"
    ).fetchone()
    assert left == (0,)


def test_the_sample_serves_its_release_only(con: duckdb.DuckDBPyConnection) -> None:
    rel = FreshSampleReleases(DuckDBRunner(con), "t", rate=0.5, source=SeededRandom(2))

    def sneaky(s: SampledTable) -> None:
        s.charge(Epsilon(epsilon=1))  # a second mechanism on the same sample

    with pytest.raises(UnsafeQuery):
        rel.release(sneaky, loss=Epsilon(epsilon=1))
    assert rel.charges == ()  # a failed release costs nothing


def test_budget_checked_before_and_charged_after(con: duckdb.DuckDBPyConnection) -> None:
    budget = BudgetFilter(EpsilonDelta(epsilon=Fraction(1, 2), delta=Fraction(1, 10**6)))
    rel = FreshSampleReleases(
        DuckDBRunner(con), "t", rate=0.1, budget=budget, source=SeededRandom(3)
    )
    loss = EpsilonDelta(epsilon=1, delta=Fraction(1, 10**6))
    cost = amplify_bernoulli(loss, 0.1)  # ≈ (0.159, 1e-7)
    calls: list[int] = []
    for _ in range(3):
        rel.release(lambda s: calls.append(1), loss=loss)
    assert budget.spent == EpsilonDelta(epsilon=3 * cost.epsilon, delta=3 * cost.delta)
    with pytest.raises(BudgetExceeded):
        rel.release(lambda s: calls.append(1), loss=loss)  # 4 × 0.159 > 0.5
    assert len(calls) == 3  # refused before sampling: the mechanism never ran

    def boom(s: SampledTable) -> None:
        raise RuntimeError("mechanism failed")

    small = FreshSampleReleases(
        DuckDBRunner(con),
        "t",
        rate=0.1,
        budget=BudgetFilter(Epsilon(epsilon=1)),
        source=SeededRandom(4),
    )
    with pytest.raises(RuntimeError):
        small.release(boom, loss=Epsilon(epsilon=1))
    assert small.charges == () and small.budget is not None
    assert small.budget.spent == Epsilon(epsilon=0)


def test_rho_losses_are_refused(con: duckdb.DuckDBPyConnection) -> None:
    rel = FreshSampleReleases(DuckDBRunner(con), "t", rate=0.5)
    with pytest.raises(InvalidParameter):
        rel.release(lambda s: None, loss=Rho(rho=1))  # type: ignore[arg-type]
    with pytest.raises(InvalidParameter):
        FreshSampleReleases(DuckDBRunner(con), "t", rate=0)
