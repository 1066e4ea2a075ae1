"""A newcomer's flow (issue 21): no unit → an error; tune → bounds → query, stated everywhere."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

from deniable.accounting.loss import Epsilon, EpsilonDelta
from deniable.curator.session import Session
from deniable.curator.tune import CANDIDATES
from deniable.errors import InvalidParameter


def _visits() -> pd.DataFrame:
    """3,000 patients, 1 to 23 visits each over 5 departments (heavy patients in one)."""
    rng = np.random.default_rng(7)
    rows = []
    for p in range(3000):
        visits = 1 + int(rng.integers(0, 23)) if p % 10 == 0 else 1 + int(rng.integers(0, 3))
        home = int(rng.integers(0, 5))
        for _ in range(visits):
            dept = home if rng.random() < 0.8 else int(rng.integers(0, 5))
            rows.append((p, f"d{dept}"))
    return pd.DataFrame(rows, columns=["patient_id", "dept"])


def test_tune_then_query_states_the_policy(tmp_path: Path) -> None:
    frame = _visits()
    s = Session(
        budget=EpsilonDelta(epsilon=100, delta=Fraction(1, 10**6)), ledger=tmp_path / "l.db"
    )
    with pytest.raises(InvalidParameter, match="privacy unit"):
        s.add_table("visits", frame)
    s.add_table(
        "visits", frame, privacy_unit="patient_id", max_groups=1, max_rows=1,
        public_keys={"dept": [f"d{i}" for i in range(5)]},
    )  # fmt: skip
    # ε = 60 for the measurement: ε/3 = 20 per histogram, so an empty bin's noise reaches 1
    # with probability ~2·10⁻⁹ and the proposal below is the noise-free one (no flake)
    report = s.tune(
        "visits", epsilon=60, group_by=["dept"], workload_epsilon=1, groups=5, apply=True
    )
    assert s.budget.spent == EpsilonDelta(epsilon=60, delta=0)  # the measurement is charged
    best = report.best
    assert best.max_rows > 1  # visits, not patients: max_rows = 1 would count patients
    # at most 23 visits a patient, over 5 departments: not driven by noise in the top bins
    assert best.max_rows <= 32 and best.max_groups <= 5
    assert s.tables["visits"].policy.max_rows == best.max_rows
    table = report.to_pandas()
    assert list(table.columns)[:2] == ["max_groups", "max_rows"] and len(table) == 10
    assert report.plot() is not None
    answer = s.sql("SELECT dept, COUNT(*) AS n FROM visits GROUP BY dept", epsilon=5)
    text = repr(answer)
    assert f"{best.max_rows} rows per group" in text  # the row policy, in one line
    assert "covers the value after bounding" in text
    truth = frame.groupby("dept").size()
    got = answer.to_pandas().set_index("dept")["n"]
    kept = s.utility_analysis("visits", group_by=["dept"]).share(best.max_groups, best.max_rows)
    # the answer estimates the bounded count (≈ kept × truth), not the truth; at ε = 5 the
    # five counts' noise has sd ≤ √5·√2·(5·32)/5 ≈ 101 rows, against a tolerance of 447
    assert abs(got.sum() - kept * truth.sum()) < 0.05 * truth.sum()


def test_utility_analysis_is_exact_where_bounding_is(tmp_path: Path) -> None:
    """With max_groups ≥ every person's groups the kept rows are deterministic: compare them
    with the engine's own bounded counts."""
    con = duckdb.connect()
    con.execute(  # 30 people, 20 rows each, 10 in each of two groups
        "CREATE TABLE t AS SELECT i % 30 AS uid, 'g' || ((i // 30) % 2) AS k FROM range(600) r(i)"
    )
    s = Session(budget=Epsilon(epsilon=10), ledger=tmp_path / "l.db")
    s.add_table(
        "t", con, privacy_unit="uid", max_groups=2, max_rows=4, public_keys={"k": ["g0", "g1"]}
    )
    from deniable.query.testing import exact_aggregates

    analysis = s.utility_analysis("t", group_by=["k"])
    assert analysis.non_private and analysis.rows == 600
    for r in (1, 4, 10, 16):
        s.set_bounds("t", max_groups=2, max_rows=r)
        plan, _, exact = exact_aggregates(
            s, "SELECT k, COUNT(*) AS n FROM t GROUP BY k", not_private=True, epsilon=1
        )
        bounded = int(exact.measures[plan.measures[0].id].sum())
        assert analysis.kept[CANDIDATES.index(2), CANDIDATES.index(r)] == bounded
        assert bounded == 30 * 2 * min(10, r)
    # one group kept of two: half of each person's groups, in expectation
    assert analysis.share(1, 16) == pytest.approx(0.5)
    assert s.budget.spent == Epsilon(epsilon=0)  # nothing charged


def test_accuracy_and_budget_for_through_the_session(tmp_path: Path) -> None:
    s = Session(budget=Epsilon(epsilon=10), ledger=tmp_path / "l.db")
    s.add_table(
        "visits", _visits(), privacy_unit="patient_id", max_groups=2, max_rows=5,
        public_keys={"dept": [f"d{i}" for i in range(5)]},
    )  # fmt: skip
    q = "SELECT dept, COUNT(*) AS n FROM visits GROUP BY dept"
    width = s.accuracy(q, epsilon=1).width("n")
    loss = s.budget_for(q, {"n": 20})
    assert isinstance(loss, Epsilon) and s.accuracy(q, epsilon=loss.epsilon).width("n") <= 20
    assert width is not None and width > 20 and loss.epsilon > 1
    assert s.budget.spent == Epsilon(epsilon=0)
    with pytest.raises(InvalidParameter, match="leave them out"):
        s.budget_for(q, {"n": 20}, epsilon=1)
