"""Contribution bounding keeps partitions and rows uniformly at random.

The bounds are enforced by pseudo-random orders keyed by per-query CSPRNG secrets
(``compile.py``, steps 3–4). Privacy does not depend on how uniform the orders are (they do
not look at the values), but accuracy and the meaning of the answer do: a category that
wins the ranking more often than others is over-counted. Two exact checks, each run on the
generated SQL with fresh CSPRNG secrets:

* **partitions**: ``U`` units each touch all ``K = 50`` categories once; with
  ``max_groups = m = 5`` each unit keeps a uniform m-subset. The kept count per category
  ``n_k`` then has mean ``U·m/K``, and the deviations (whose sum is 0) have covariance
  ``U·a·I`` on that subspace with ``a = (m/K)(1 − (m−1)/(K−1))``, so
  ``Σ (n_k − U·m/K)² / (U·a)`` is χ² with K − 1 degrees of freedom (U large).
* **rows**: ``U`` units each have ``R = 20`` rows with values ``0 … 19`` in one partition;
  with ``max_rows = r = 10`` each keeps a uniform r-subset for its histograms. Through the
  quantile path (histogram on the integer grid) the same χ² holds with ``K = R`` and
  ``m = r``. Additive measures take the expected value of such a subset instead (exact,
  deterministic: checked for equality, not statistically).

Thresholds: χ² above its ``1 − 1e-7`` quantile, or ``|z| > 5.33`` (two-sided 1e-7): with
three checks an honest implementation fails below once in a million runs. Negative control:
DuckDB's multi-argument ``hash(secret, unit, key)`` — the order the compiler used before —
must fail the partition check (it keeps some categories twice as often as others).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd
import pytest
from _uniform_support import chi2_uniform_subsets
from scipy import stats

from deniable.accounting.loss import Epsilon
from deniable.curator.session import Session
from deniable.query.plan import DPPlan
from deniable.query.release import ExactAggregates
from deniable.query.rewrite import compile as compile_module
from deniable.query.rewrite.compile import Secrets
from deniable.query.testing import exact_aggregates

pytestmark = pytest.mark.stats

ALPHA = 1e-7
Z = float(stats.norm.isf(ALPHA / 2))
U = 20_000
K, M = 50, 5
R, MAX_ROWS = 20, 10


def _exact(session: Session, query: str, **options: Any) -> tuple[DPPlan, ExactAggregates]:
    """The generated SQL's exact result under fresh CSPRNG secrets (no noise, no charge)."""
    fresh = Secrets(rows=secrets.randbits(63), partitions=secrets.randbits(63))
    plan, _, exact = exact_aggregates(
        session, query, not_private=True, epsilon=1, secrets=fresh, **options
    )
    return plan, exact


def _session(frame: pd.DataFrame, tmp: object, **policy: object) -> Session:
    s = Session(budget=Epsilon(epsilon=100), ledger=f"{tmp}/l.db")
    s.add_table("t", frame, privacy_unit="uid", **policy)  # type: ignore[arg-type]
    return s


@pytest.fixture(scope="module", params=["int", "str"])
def partitions(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Session]:
    uid = np.repeat(np.arange(U, dtype=np.int64), K)
    frame = pd.DataFrame(
        {
            "uid": uid if request.param == "int" else pd.Series(uid).map(lambda u: f"user-{u}"),
            "k": np.tile(np.arange(K, dtype=np.int64), U),
        }
    )
    s = _session(
        frame,
        tmp_path_factory.mktemp("p"),
        public_keys={"k": list(range(K))},
        max_groups=M,
        max_rows=1,
    )
    yield s
    s.close()


def _kept_per_category(session: Session) -> list[int]:
    plan, exact = _exact(session, "SELECT k, COUNT(*) AS n FROM t GROUP BY k")
    (rows,) = [m.id for m in plan.measures if m.kind == "rows"]
    by_key = dict(zip((k for (k,) in exact.keys), exact.measures[rows].tolist(), strict=True))
    return [int(by_key.get(k, 0)) for k in range(K)]


def test_each_unit_keeps_a_uniform_subset_of_its_partitions(partitions: Session) -> None:
    statistic = chi2_uniform_subsets(_kept_per_category(partitions), U, K, M)
    assert statistic < stats.chi2.isf(ALPHA, K - 1), statistic


def test_control_multi_argument_hash_is_rejected(
    partitions: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    def engine_hash(self: object, key: int, args: Sequence[str]) -> str:
        return f"hash({key}, {', '.join(args)})"

    monkeypatch.setattr(compile_module._Sql, "keyed_hash", engine_hash)
    statistic = chi2_uniform_subsets(_kept_per_category(partitions), U, K, M)
    assert statistic > stats.chi2.isf(ALPHA, K - 1), statistic


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    frame = pd.DataFrame(
        {
            "uid": np.repeat(np.arange(U, dtype=np.int64), R),
            "k": np.zeros(U * R, dtype=np.int64),
            "v": np.tile(np.arange(R, dtype=np.int64), U),
        }
    )
    s = _session(
        frame,
        tmp_path_factory.mktemp("r"),
        bounds={"v": (0, R - 1)},
        public_keys={"k": [0]},
        max_groups=1,
        max_rows=MAX_ROWS,
    )
    yield s
    s.close()


def test_rows_kept_by_the_quantile_path_are_a_uniform_subset(rows: Session) -> None:
    _, exact = _exact(rows, "SELECT k, MEDIAN(v) AS m FROM t GROUP BY k", quantile_grid=R - 1)
    # one engine histogram, shared by the median's value and its interval's endpoints
    (hist,) = {id(h): h for h in exact.histograms.values()}.values()
    counts = hist[(0,)]
    assert counts.size == R  # one bin per value 0 … R−1
    statistic = chi2_uniform_subsets(counts.tolist(), U, R, MAX_ROWS)
    assert statistic < stats.chi2.isf(ALPHA, R - 1), statistic


def test_fast_path_sums_the_expected_value_of_a_uniform_subset(rows: Session) -> None:
    """Additive measures need no random rows: a partition of ``n > r`` rows contributes
    ``round(S·r/n)`` (half away from zero), the expected sum of a uniform r-subset, and
    ``min(n, r)`` rows — the same under any secrets. Each unit holds the values 0 … R−1."""
    for kept in (range(R), range(1, 14), range(8), [*range(11), 19], [2, 3, 5, 7, 11, 13, 17]):
        values = list(kept)
        n, total = len(values), sum(values)
        x = Fraction(total * MAX_ROWS, n) if n > MAX_ROWS else Fraction(total)
        per_unit = int(x + Fraction(1, 2))  # x ≥ 0: half away from zero is half up
        query = f"SELECT k, SUM(v) AS s, COUNT(*) AS n FROM t WHERE v IN {tuple(values)} GROUP BY k"
        seen = set()
        for _ in range(2):  # two fresh secrets
            plan, exact = _exact(rows, query)
            (s_id,) = [m.id for m in plan.measures if m.kind == "sum"]
            (n_id,) = [m.id for m in plan.measures if m.kind == "rows"]
            seen.add((int(exact.measures[s_id][0]), int(exact.measures[n_id][0])))
        assert seen == {(U * per_unit, U * min(n, MAX_ROWS))}, values
