"""Accuracy before spending (issue 21 §3): the widths an answer will show, and their inverse."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from deniable.accounting.loss import Epsilon, Rho
from deniable.curator.session import Session
from deniable.errors import InvalidParameter
from deniable.query.accuracy import accuracy, budget_for

QUERY = (
    "SELECT k, COUNT(*) AS n, SUM(v) AS total, AVG(v) AS mean, MEDIAN(v) AS med FROM t GROUP BY k"
)


def _session(tmp_path: Path, *, rho: bool = False, rows_each: int = 1) -> Session:
    rng = np.random.default_rng(1)
    people = 3000
    frame = pd.DataFrame(
        {
            "uid": np.repeat(np.arange(people), rows_each),
            "k": rng.choice(["a", "b"], people * rows_each),
            "v": np.full(people * rows_each, 50.0),  # every value at the bounds' midpoint
        }
    )
    budget = Rho(rho=100) if rho else Epsilon(epsilon=100)
    s = Session(budget=budget, ledger=tmp_path / f"l-{rho}-{rows_each}.db")
    s.add_table(
        "t",
        frame,
        privacy_unit="uid",
        bounds={"v": (0, 100)},
        max_groups=1,
        max_rows=rows_each,
        public_keys={"k": ["a", "b"]},
    )
    return s


@pytest.mark.parametrize("rho", [False, True], ids=["epsilon", "rho"])
def test_count_and_sum_widths_are_the_answers_own(tmp_path: Path, rho: bool) -> None:
    s = _session(tmp_path, rho=rho)
    budget = {"rho": Fraction(1, 2)} if rho else {"epsilon": Fraction(1, 2)}
    report = accuracy(s.plan(QUERY, **budget))
    frame = s.sql(QUERY, **budget).to_pandas()
    for name in ("n", "total"):
        shown = (frame[f"{name}_high"] - frame[f"{name}_low"]) / 2
        assert shown.tolist() == pytest.approx([report.width(name)] * 2, rel=1e-6)
    assert report.level == 0.95


def test_avg_width_needs_a_size_and_matches_the_answer_at_that_size(tmp_path: Path) -> None:
    s = _session(tmp_path)
    plan = s.plan(QUERY, epsilon=20)
    unknown = {o.name: o for o in accuracy(plan).outputs}["mean"]
    assert unknown.half_width is None and "rows per group" in (unknown.depends_on or "")
    frame = s.sql(QUERY, epsilon=20).to_pandas()
    for _, row in frame.iterrows():  # ≈1,500 rows per group; at ε = 20 the count is close
        expected = accuracy(plan, rows=round(row["n"])).width("mean")
        assert expected is not None
        assert (row["mean_high"] - row["mean_low"]) / 2 == pytest.approx(expected, rel=0.02)


def test_quantiles_report_a_rank_error_in_rows(tmp_path: Path) -> None:
    s = _session(tmp_path)
    med = {o.name: o for o in accuracy(s.plan(QUERY, epsilon=1)).outputs}["med"]
    assert med.half_width is None and med.rank_error is not None and med.rank_error > 0


def test_accuracy_and_budget_for_never_touch_the_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = _session(tmp_path)
    from deniable.engines.duckdb import DuckDBEngine

    def refuse(*args: object, **kwargs: object) -> object:
        raise AssertionError("the engine was touched")

    monkeypatch.setattr(DuckDBEngine, "run", refuse)
    monkeypatch.setattr(DuckDBEngine, "check", refuse)
    before = s.budget.spent
    accuracy(s.plan(QUERY, epsilon=1), rows=100)
    budget_for(lambda e: s.plan(QUERY, epsilon=e), {"n": 10})
    assert s.budget.spent == before


@pytest.mark.parametrize("rho", [False, True], ids=["epsilon", "rho"])
def test_budget_for_is_the_least_budget_that_meets_the_targets(tmp_path: Path, rho: bool) -> None:
    s = _session(tmp_path, rho=rho)
    key = "rho" if rho else "epsilon"

    def plan_at(b: Fraction) -> object:
        return s.plan(QUERY, **{key: b})

    targets = {"n": 10.0, "total": 2000.0}
    found = budget_for(plan_at, targets)  # type: ignore[arg-type]
    at = accuracy(plan_at(found))  # type: ignore[arg-type]
    assert all((at.width(n) or 0) <= t for n, t in targets.items())
    below = accuracy(plan_at(found * Fraction(99, 100)))  # type: ignore[arg-type]
    assert any((below.width(n) or 0) > t for n, t in targets.items())


def test_bad_requests_are_refused(tmp_path: Path) -> None:
    s = _session(tmp_path)
    plan = s.plan(QUERY, epsilon=1)
    with pytest.raises(InvalidParameter, match="rows must be a positive integer"):
        accuracy(plan, rows=0)
    with pytest.raises(InvalidParameter, match="no output named 'count'"):
        accuracy(plan).width("count")
    with pytest.raises(InvalidParameter, match="no interval known in advance"):
        budget_for(lambda e: s.plan(QUERY, epsilon=e), {"med": 1.0})
    with pytest.raises(InvalidParameter, match="positive half-width"):
        budget_for(lambda e: s.plan(QUERY, epsilon=e), {"n": 0})
