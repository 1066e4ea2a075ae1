"""Value intervals for quantiles, MEDIAN, MIN and MAX (issue 21 §3): plan, scores, release.

The coverage argument of :class:`deniable.query.aggregates.Quantile` rests on one
deterministic fact, checked here on many histograms: every candidate on the wrong side of
the quantile's rank scores at most ``−(T − max(num, den − num))`` while the pinned outer
candidate scores 0. The statistical checks (coverage against DuckDB, empirical ε, widths)
are in ``tests/stats/test_query_quantile_intervals.py``.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from deniable.accounting.loss import Epsilon, Rho
from deniable.curator.session import Session
from deniable.noise.testing import SeededRandom
from deniable.query.accuracy import accuracy
from deniable.query.aggregates import (
    Max,
    Min,
    PlanContext,
    Quantile,
    interval_level,
    rank_error,
    rank_margin,
)
from deniable.query.catalog import Bounds, Column, ColumnKind
from deniable.query.measures import HistogramMeasure
from deniable.query.release import quantile_scores, release
from deniable.query.testing import exact_aggregates

QUERY = (
    "SELECT k, MEDIAN(x) AS med, QUANTILE_CONT(x, 0.9) AS p90, MIN(x) AS lo, MAX(x) AS hi "
    "FROM t GROUP BY k"
)


@pytest.fixture
def session(tmp_path: Path) -> Session:
    rng = np.random.default_rng(7)
    n = 4000
    frame = pd.DataFrame(
        {"uid": np.arange(n), "k": rng.choice(["a", "b"], n), "x": rng.uniform(10, 90, n)}
    )
    s = Session(budget=Epsilon(epsilon=100), ledger=tmp_path / "l.db")
    s.add_table(
        "t",
        frame,
        privacy_unit="uid",
        bounds={"x": (0, 100)},
        max_groups=1,
        max_rows=1,
        public_keys={"k": ["a", "b"]},
    )
    return s


def _hist(plan_measures: tuple[object, ...]) -> list[HistogramMeasure]:
    return [m for m in plan_measures if isinstance(m, HistogramMeasure)]


def test_budget_is_split_not_increased(session: Session) -> None:
    plan = session.plan(QUERY, epsilon=2)
    assert plan.loss == Epsilon(epsilon=2)  # the plan's post-condition held too
    for agg in plan.aggregates:
        ms = _hist(tuple(plan.measure(i) for i in agg.measures))
        assert sum(m.budget for m in ms) == agg.budget
        point, *ends = ms
        assert point.target == 0 and point.budget == agg.budget / 2
        assert all(m.sensitivity == point.sensitivity and m.grid == point.grid for m in ends)
        targets = sorted(int(np.sign(m.target)) for m in ends)
        if isinstance(agg.aggregate, Min):
            assert targets == [1]  # the lower endpoint is the bound itself: not spent on
        elif isinstance(agg.aggregate, Max):
            assert targets == [-1]
        else:
            assert targets == [-1, 1] and {m.budget for m in ends} == {agg.budget / 4}


def test_rho_budget_stays_within_the_request(tmp_path: Path) -> None:
    s = Session(budget=Rho(rho=10), ledger=tmp_path / "r.db")
    frame = pd.DataFrame({"uid": np.arange(50), "k": ["a", "b"] * 25, "x": np.arange(50.0)})
    s.add_table(
        "t",
        frame,
        privacy_unit="uid",
        bounds={"x": (0, 100)},
        max_groups=1,
        max_rows=1,
        public_keys={"k": ["a", "b"]},
    )
    plan = s.plan("SELECT k, COUNT(*) AS n, MEDIAN(x) AS m FROM t GROUP BY k", rho=Fraction(1, 2))
    assert isinstance(plan.loss, Rho) and plan.loss <= Rho(rho=Fraction(1, 2))
    assert plan.loss.rho > Fraction(1, 2) - Fraction(1, 10**9)  # split, nothing lost
    hist = _hist(plan.measures)
    assert len(hist) == 3
    # each choice's ε has ε²/2 within its ρ share (½, ¼, ¼ of the median's ¼)
    for m, share in zip(hist, (Fraction(1, 8), Fraction(1, 16), Fraction(1, 16)), strict=True):
        assert m.budget**2 / 2 <= share and share - m.budget**2 / 2 < Fraction(1, 10**9)


def test_one_engine_histogram_serves_the_three_choices(session: Session) -> None:
    plan, compiled, exact = exact_aggregates(
        session, QUERY, not_private=True, epsilon=1, quantile_grid=50
    )
    parts = compiled.histogram_parts
    assert len(parts) == len(plan.measures) == 10
    assert len(set(parts.values())) == 1  # one column, one grid: one GROUP BY in the engine
    first = exact.histograms[plan.measures[0].id]
    assert all(exact.histograms[m.id] is first for m in plan.measures)


def test_endpoint_scores_are_distances_to_each_cells_span() -> None:
    counts = np.array([3, 0, 2, 5, 0, 1])
    q = Fraction(1, 3)  # num = 1, den = 3
    n = int(counts.sum())
    below = np.concatenate([[0], np.cumsum(counts)[:-1]])
    lo = 3 * below - n
    hi = lo + 3 * counts
    assert (hi[:-1] == lo[1:]).all()  # the spans tile [−num·n, (den−num)·n]
    raw = 2 * below - (n - below - counts)
    assert (quantile_scores(counts, q) == -np.abs(raw)).all()  # the value's, unchanged
    for t in (1, 4, 9, 30):
        low = quantile_scores(counts, q, -t)
        want = -np.maximum(np.maximum(lo + t, -t - hi), 0)
        want[0] = -max(-t - hi[0], 0)  # open downwards
        assert (low == want).all()
        high = quantile_scores(counts, q, t)
        want = -np.maximum(np.maximum(lo - t, t - hi), 0)
        want[-1] = -max(lo[-1] - t, 0)  # open upwards
        assert (high == want).all()


@pytest.mark.parametrize("q", [Fraction(0), Fraction(1, 7), Fraction(1, 2), Fraction(9, 10), 1])
def test_wrong_side_candidates_score_below_the_margin(q: Fraction | int) -> None:
    """The lemma behind coverage, on random histograms with ties, gaps and few rows."""
    q = Fraction(q)
    num, den = q.numerator, q.denominator
    rng = np.random.default_rng(int(q * 1000))
    for trial in range(600):
        grid = int(rng.integers(2, 30))
        n = int(rng.integers(0, 60))
        shape = trial % 3
        if shape == 0:  # spread
            cells = rng.integers(0, grid + 1, n)
        elif shape == 1:  # heavy ties on few cells
            cells = rng.choice(rng.integers(0, grid + 1, 3), n)
        else:  # two far clusters with a gap
            cells = np.where(rng.random(n) < 0.5, 0, grid)
        counts = np.bincount(cells, minlength=grid + 1)
        t = int(rng.integers(1, 80)) + max(num, den - num)
        for target in (-t, t):
            assert quantile_scores(counts, q, target).max() == 0  # always a best of 0
        if n == 0:
            continue
        ordered = np.sort(cells)
        k_lo = math.floor((n - 1) * q) + 1
        k_hi = math.ceil((n - 1) * q) + 1
        assert k_lo <= max(1, math.ceil(n * q)) <= k_hi  # DuckDB's QUANTILE_DISC rank
        if q > 0:
            scores = quantile_scores(counts, q, -t)
            bad = np.arange(grid + 1) > ordered[k_lo - 1]
            assert (scores[bad] <= -(t + 1 - num)).all()
        if q < 1:
            scores = quantile_scores(counts, q, t)
            bad = np.arange(grid + 1) < ordered[k_hi - 1]
            assert (scores[bad] <= -(t + 1 - (den - num))).all()


def test_endpoint_scores_have_the_values_sensitivity() -> None:
    """Adding or removing ``r`` rows moves no endpoint score by more than ``r·max(num, den−num)``."""
    rng = np.random.default_rng(11)
    for q in (Fraction(0), Fraction(1, 3), Fraction(1, 2), Fraction(4, 5), Fraction(1)):
        per_row = max(q.numerator, q.denominator - q.numerator)
        for _ in range(300):
            grid = int(rng.integers(2, 20))
            counts = np.bincount(
                rng.integers(0, grid + 1, int(rng.integers(0, 40))), minlength=grid + 1
            )
            r = int(rng.integers(1, 4))
            moved = counts + np.bincount(rng.integers(0, grid + 1, r), minlength=grid + 1)
            t = int(rng.integers(1, 60))
            for target in (-t, 0, t):
                a = quantile_scores(counts, q, target)
                b = quantile_scores(moved, q, target)
                assert np.abs(a - b).max() <= r * per_row


def test_margin_exceeds_the_endpoint_rank_error_and_guarantees_the_level() -> None:
    col = Column("x", "DOUBLE", ColumnKind.REAL)
    for q in (Fraction(0), Fraction(1, 4), Fraction(1, 2), Fraction(1)):
        for eps in (Fraction(1, 10), Fraction(1), Fraction(7)):
            ctx = PlanContext(
                Epsilon, 2, 3, 200, {}, map("m{}".format, range(9)).__next__, level=0.9
            )
            agg = Quantile(col, Bounds(Fraction(-5), Fraction(5)), q)
            ends = _hist(agg.plan(eps, ctx))[1:]
            assert len(ends) == (1 if q in (0, 1) else 2)
            beta = 0.1 / len(ends)
            for m in ends:
                base = dataclasses.replace(m, target=0)
                assert abs(m.target) == rank_margin(base, beta)
                assert abs(m.target) / den_of(m) > rank_error(m, 1 - beta)
            assert 0.9 <= interval_level(tuple(ends)) < 1


def den_of(m: HistogramMeasure) -> int:
    return m.q.denominator


def test_answers_carry_intervals_that_hold_their_values(session: Session) -> None:
    frame = session.sql(QUERY, epsilon=4).to_pandas()
    for name in ("med", "p90", "lo", "hi"):
        low, high, value = frame[f"{name}_low"], frame[f"{name}_high"], frame[name]
        assert np.isfinite(low).all() and np.isfinite(high).all()
        assert ((low >= 0) & (low <= value) & (value <= high) & (high <= 100)).all()
    assert (frame["lo_low"] == 0).all() and (frame["hi_high"] == 100).all()
    # uniform on [10, 90], ~2000 rows a group: informative intervals, not the whole range
    assert ((frame["med_high"] - frame["med_low"]) < 20).all()
    assert ((frame["hi_high"] - frame["hi_low"]) < 20).all()


def test_interval_above_the_planned_level_is_the_clamping_range(session: Session) -> None:
    plan, _, exact = exact_aggregates(session, QUERY, not_private=True, epsilon=4)
    noisy = release(plan, exact, source=SeededRandom(3))
    med = noisy.released[0]
    assert med.interval is not None
    low, high = med.interval(0.95)
    assert (high - low < 100).all()
    low, high = med.interval(0.9999)
    assert (low == 0).all() and (high == 100).all()


def test_integer_grid_of_every_integer_needs_no_half_step(tmp_path: Path) -> None:
    frame = pd.DataFrame({"uid": np.arange(3000), "x": np.arange(3000) % 21})
    s = Session(budget=Epsilon(epsilon=100), ledger=tmp_path / "i.db")
    s.add_table("t", frame, privacy_unit="uid", bounds={"x": (0, 20)}, max_groups=1, max_rows=1)
    plan, _, exact = exact_aggregates(
        s, "SELECT MEDIAN(x) AS m FROM t", not_private=True, epsilon=8
    )
    assert _hist(plan.measures)[0].grid == 20
    for seed in range(5):
        noisy = release(plan, exact, source=SeededRandom(seed))
        assert noisy.columns[0].low is not None and noisy.columns[0].high is not None
        assert float(noisy.columns[0].low[0]).is_integer()
        assert float(noisy.columns[0].high[0]).is_integer()


def test_accuracy_reports_a_rank_margin_or_a_width(session: Session) -> None:
    plan = session.plan(QUERY, epsilon=1)
    report = accuracy(plan)
    for out in report.outputs:
        assert out.half_width is None and out.rank_error is not None
        assert out.depends_on is not None and "rows beyond the quantile's rank" in out.depends_on
    widths = []
    for eps in (Fraction(1, 2), Fraction(2), Fraction(8)):
        sized = accuracy(session.plan(QUERY, epsilon=eps), rows=2000)
        w = sized.width("med")
        assert w is not None and 0 < w < 50
        widths.append(w)
        lo = sized.width("lo")
        assert lo is not None and lo < 50
    assert widths[0] > widths[1] > widths[2]
    # a rows-assumed width is the interval the endpoints aim at: close to real answers' (mean
    # over seeded releases; the estimate uses the exponential mechanism's law, which
    # permute-and-flip beats a little)
    one = "SELECT MEDIAN(x) AS med FROM t"
    guess = accuracy(session.plan(one, epsilon=2), rows=4000).width("med")
    plan, _, exact = exact_aggregates(session, one, not_private=True, epsilon=2)
    real = []
    for seed in range(40):
        col = release(plan, exact, source=SeededRandom(seed)).columns[0]
        assert col.low is not None and col.high is not None
        real.append(float(col.high[0] - col.low[0]) / 2)
    assert guess is not None and 0.6 * guess <= float(np.mean(real)) <= 1.4 * guess
