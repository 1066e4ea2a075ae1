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
  with ``max_rows = r = 10`` each keeps a uniform r-subset. Through the quantile path
  (histogram on the integer grid) the same χ² holds with ``K = R`` and ``m = r``; through the
  fast path only the kept sum is seen: mean ``U·r·(R−1)/2``, variance
  ``U·r·σ²·(R−r)/(R−1)`` with ``σ² = (R²−1)/12``.

Thresholds: χ² above its ``1 − 1e-7`` quantile, or ``|z| > 5.33`` (two-sided 1e-7): with
four checks an honest implementation fails below once in a million runs. Negative control:
DuckDB's multi-argument ``hash(secret, unit, key)`` — the order the compiler used before —
must fail the partition check (it keeps some categories twice as often as others).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd
import pytest
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


def _chi2_uniform_subsets(counts: Sequence[int], units: int, k: int, m: int) -> float:
    """Σ (n − U·m/k)² / (U·a): χ² with k − 1 d.o.f. when each unit keeps a uniform m-subset."""
    n = np.asarray(counts, dtype=float)
    assert n.size == k and int(n.sum()) == units * m
    a = (m / k) * (1 - (m - 1) / (k - 1))
    return float(np.sum((n - units * m / k) ** 2) / (units * a))


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
    statistic = _chi2_uniform_subsets(_kept_per_category(partitions), U, K, M)
    assert statistic < stats.chi2.isf(ALPHA, K - 1), statistic


def test_control_multi_argument_hash_is_rejected(
    partitions: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    def engine_hash(self: object, key: int, args: Sequence[str]) -> str:
        return f"hash({key}, {', '.join(args)})"

    monkeypatch.setattr(compile_module._Sql, "keyed_hash", engine_hash)
    statistic = _chi2_uniform_subsets(_kept_per_category(partitions), U, K, M)
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
    (hist,) = exact.histograms.values()
    counts = hist[(0,)]
    assert counts.size == R  # one bin per value 0 … R−1
    statistic = _chi2_uniform_subsets(counts.tolist(), U, R, MAX_ROWS)
    assert statistic < stats.chi2.isf(ALPHA, R - 1), statistic


def test_rows_kept_by_the_fast_path_have_the_sum_of_a_uniform_subset(rows: Session) -> None:
    plan, exact = _exact(rows, "SELECT k, SUM(v) AS s FROM t GROUP BY k")
    (total,) = [m for m in plan.measures if m.kind == "sum"]
    assert total.exponent == 0 and total.centre == 0  # integer units are the values
    kept = int(exact.measures[total.id][0])
    sigma2 = (R * R - 1) / 12
    mean = U * MAX_ROWS * (R - 1) / 2
    sd = (U * MAX_ROWS * sigma2 * (R - MAX_ROWS) / (R - 1)) ** 0.5
    assert abs(kept - mean) / sd < Z, (kept - mean) / sd
