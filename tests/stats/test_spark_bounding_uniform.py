"""Contribution bounding on Spark keeps partitions and rows uniformly at random.

The same two exact checks as ``test_bounding_uniform.py`` (DuckDB), run on the generated Spark
SQL, where the keyed chain hash is built on Spark's ``xxhash64`` (``h₀ = key ⊕ H(a₀)``,
``hᵢ = H(hᵢ₋₁) ⊕ H(aᵢ)``, result ``H(hₙ)``, signed 64-bit), with fresh CSPRNG secrets:

* **partitions**: ``U`` integer units each touch all ``K = 50`` categories once; with
  ``max_groups = m = 5`` each keeps a uniform m-subset, so
  ``Σ (n_k − U·m/K)² / (U·a)`` with ``a = (m/K)(1 − (m−1)/(K−1))`` is χ² with K − 1 d.o.f.
* **rows**: ``U`` units each have ``R = 20`` rows (values ``0 … 19``) in one partition; with
  ``max_rows = r = 10`` the quantile path keeps a uniform r-subset: the same χ² with
  ``K = R``, ``m = r`` over the histogram bins.
* **fast path**: additive measures take the expected value of such a subset
  (``round(S·r/n)`` per unit, ``min(n, r)`` rows): checked for equality under two secrets.

Thresholds: χ² above its ``1 − 1e-7`` quantile (each check fails an honest implementation
with probability below 1e-7; two statistical checks: below 2e-7 for the module). Negative
control: the order a forgetful compiler could produce — ``xxhash64`` of the keys alone,
without the unit and the secret (every unit ranks its categories the same way) — must fail
the partition check. Text privacy units cannot be checked here: Spark has no Unicode NFC, so
they are refused, naming the engine's limitation (checked too).
"""

from __future__ import annotations

import secrets
import sys
from collections.abc import Iterator, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from deniable.accounting.loss import Epsilon
from deniable.curator.session import Session
from deniable.errors import UnsafeQuery
from deniable.query.plan import DPPlan
from deniable.query.release import ExactAggregates
from deniable.query.rewrite import compile as compile_module
from deniable.query.rewrite.compile import Secrets
from deniable.query.testing import exact_aggregates

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))
from _spark import local_spark
from _uniform_support import chi2_uniform_subsets

pytestmark = pytest.mark.stats

ALPHA = 1e-7
U = 5_000  # 500 expected per cell: the χ² approximation holds; the control fails by far
K, M = 50, 5
R, MAX_ROWS = 20, 10


def _engine() -> Any:
    from deniable.engines.spark import SparkEngine

    return SparkEngine(local_spark())


def _session(frame: pd.DataFrame, tmp: Path, **policy: Any) -> Session:
    s = Session(budget=Epsilon(epsilon=100), ledger=tmp / "l.db", engine=_engine())
    s.add_table("t", frame, privacy_unit="uid", **policy)
    return s


def _exact(session: Session, query: str, **options: Any) -> tuple[DPPlan, ExactAggregates]:
    """The generated SQL's exact result on Spark under fresh CSPRNG secrets."""
    fresh = Secrets(rows=secrets.randbits(63), partitions=secrets.randbits(63))
    plan, _, exact = exact_aggregates(
        session, query, not_private=True, epsilon=1, secrets=fresh, **options
    )
    return plan, exact


@pytest.fixture(scope="module")
def partitions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    frame = pd.DataFrame(
        {
            "uid": np.repeat(np.arange(U, dtype=np.int64), K),
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


def test_control_an_order_without_unit_and_secret_is_rejected(
    partitions: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    def keys_only(self: object, key: int, args: Sequence[str]) -> str:
        del key
        return f"xxhash64({', '.join(args[1:])})"

    monkeypatch.setattr(compile_module._Sql, "keyed_hash", keys_only)
    statistic = chi2_uniform_subsets(_kept_per_category(partitions), U, K, M)
    assert statistic > stats.chi2.isf(ALPHA, K - 1), statistic


def test_text_units_are_refused_naming_the_engine(tmp_path: Path) -> None:
    frame = pd.DataFrame({"uid": ["ann", "bob"], "k": [0, 1]})
    s = _session(frame, tmp_path, public_keys={"k": [0, 1]}, max_groups=1, max_rows=1)
    with pytest.raises(UnsafeQuery, match=r"spark.*NFC"):
        _exact(s, "SELECT k, COUNT(*) AS n FROM t GROUP BY k")
    s.close()


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
    assert counts.size == R
    statistic = chi2_uniform_subsets(counts.tolist(), U, R, MAX_ROWS)
    assert statistic < stats.chi2.isf(ALPHA, R - 1), statistic


def test_fast_path_sums_the_expected_value_of_a_uniform_subset(rows: Session) -> None:
    """``round(S·r/n)`` per unit and ``min(n, r)`` rows, the same under any secrets."""
    for kept in (range(1, 14), [2, 3, 5, 7, 11, 13, 17]):
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
