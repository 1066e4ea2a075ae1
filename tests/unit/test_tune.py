"""DP contribution histograms and the policy they suggest (issue 21 §2)."""

from __future__ import annotations

from collections import Counter
from fractions import Fraction
from pathlib import Path

import duckdb
import numpy as np
import pytest

from deniable.accounting.loss import Epsilon
from deniable.curator.session import Session
from deniable.curator.tune import (
    BINS,
    EDGES,
    JOINT_BINS,
    JOINT_EDGES,
    KINDS,
    SIZES,
    bin_of,
    contribution_histograms,
    exact_histograms,
    propose,
    release_histograms,
)
from deniable.errors import BudgetExceeded

# person p has (p % 7) + 1 groups and 2^(p % 5) rows in the first of them, 1 in the others;
# person 0 exactly 2^20 rows in one group (the open last bin); some rows without a unit
DATA = """
SELECT p AS uid, 'g' || g AS k, 1 AS x
FROM range(40) a(p), range(7) b(g), range(16) c(r)
WHERE g <= p % 7 AND (r < CASE WHEN g = 0 THEN 2 ** (p % 5) ELSE 1 END)
UNION ALL SELECT 1000, 'g0', 1 FROM range(1048576)
UNION ALL SELECT NULL, 'g1', 1 FROM range(5)
"""


def _bin(v: int) -> int:
    return bin_of(v)


def _joint_bin(v: int) -> int:
    return max(i for i, low in enumerate(JOINT_EDGES) if low <= v)


def _session(tmp_path: Path, budget: Fraction = Fraction(10)) -> Session:
    con = duckdb.connect()
    con.execute(f"CREATE TABLE t AS {DATA}")
    s = Session(budget=Epsilon(epsilon=budget), ledger=tmp_path / "l.db")
    s.add_table("t", con, privacy_unit="uid", max_groups=1, max_rows=1)
    return s


def _parts(s: Session) -> tuple[object, object, object]:
    return s._engines["t"], s._bindings["t"], s._tables["t"].column("uid")


def test_exact_histograms_equal_a_python_reference(tmp_path: Path) -> None:
    s = _session(tmp_path)
    engine, binding, unit = _parts(s)
    got = exact_histograms(engine, binding, unit, ["k"])  # type: ignore[arg-type]
    rows = duckdb.connect().execute(f"SELECT uid, k FROM ({DATA}) WHERE uid IS NOT NULL").fetchall()
    per_pair = Counter(rows)
    per_person: dict[int, list[int]] = {}
    for (uid, _), n in per_pair.items():
        per_person.setdefault(uid, []).append(n)
    want = {kind: np.zeros(SIZES[kind], dtype=np.int64) for kind in KINDS}
    for counts in per_person.values():
        want["rows"][_bin(sum(counts))] += 1
        want["groups"][_bin(len(counts))] += 1
        want["rows_per_group"][_bin(max(counts))] += 1
        cell = _joint_bin(sum(counts)) * JOINT_BINS + _joint_bin(len(counts))
        want["rows_by_groups"][cell] += 1
    assert {k: v.tolist() for k, v in got.items()} == {k: v.tolist() for k, v in want.items()}
    assert got["rows"][BINS - 1] == 1  # 2^20 rows: the open last bin, by integer comparison
    assert got["rows_by_groups"][(JOINT_BINS - 1) * JOINT_BINS] == 1  # and the joint's
    assert [bin_of(v) for v in (1, 7, 8, 9, 10, 2**20 - 1)] == [0, 6, 7, 7, 8, BINS - 2]
    assert [_joint_bin(v) for v in (1, 7, 8, 11, 12, 2**20 - 1)] == [0, 6, 7, 7, 8, JOINT_BINS - 2]
    # the NULL unit's rows belong to no one
    assert [int(got[k].sum()) for k in KINDS] == [41, 41, 41, 41]


def test_the_engine_bins_every_value_as_the_grid_says(tmp_path: Path) -> None:
    """The balanced CASE trees against bin_of, at every edge below 5,000 and either side."""
    edges = set(EDGES) | set(JOINT_EDGES)
    values = sorted({v for low in edges for v in (low - 1, low, low + 1) if 1 <= v <= 5000})
    con = duckdb.connect()
    # person i has values[i] rows, all in one group
    con.execute(
        "CREATE TABLE r AS SELECT i AS uid, 'g' AS k "
        "FROM (SELECT unnest($1::BIGINT[]) AS v, unnest(range(len($1))) AS i) s, range(s.v) x(n)",
        [values],
    )
    s = Session(budget=Epsilon(epsilon=10), ledger=tmp_path / "b.db")
    s.add_table("r", con, privacy_unit="uid", max_groups=1, max_rows=1)
    got = exact_histograms(s._engines["r"], s._bindings["r"], s._tables["r"].column("uid"), ["k"])
    want = np.zeros(BINS, dtype=np.int64)
    joint = np.zeros(JOINT_BINS**2, dtype=np.int64)
    for v in values:
        want[bin_of(v)] += 1
        joint[_joint_bin(v) * JOINT_BINS] += 1
    assert got["rows"].tolist() == want.tolist()
    assert got["rows_per_group"].tolist() == want.tolist()
    assert got["rows_by_groups"].tolist() == joint.tolist()


def test_one_more_person_moves_each_histogram_by_one_in_one_bin(tmp_path: Path) -> None:
    """The sensitivity the noise is calibrated to: 1 per histogram (L1)."""
    s = _session(tmp_path)
    engine, binding, unit = _parts(s)
    before = exact_histograms(engine, binding, unit, ["k"])  # type: ignore[arg-type]
    con = duckdb.connect()
    con.execute(
        f"CREATE TABLE t AS {DATA} UNION ALL SELECT 5000, 'g' || (i % 3), 1 FROM range(900) r(i)"
    )
    s2 = Session(budget=Epsilon(epsilon=10), ledger=tmp_path / "l2.db")
    s2.add_table("t", con, privacy_unit="uid", max_groups=1, max_rows=1)
    after = exact_histograms(*_parts(s2), ["k"])  # type: ignore[arg-type]
    assert [int(np.abs(after[k] - before[k]).sum()) for k in KINDS] == [1, 1, 1, 1]


def test_the_measurement_is_charged_and_the_noise_is_the_plans(tmp_path: Path) -> None:
    s = _session(tmp_path)
    engine, binding, unit = _parts(s)
    h = contribution_histograms(
        engine, binding, unit, ["k"],  # type: ignore[arg-type]
        ledger=s._ledger, dataset=s._dataset, analyst="curator", epsilon=Fraction(3, 2),
    )  # fmt: skip
    assert s.budget.spent == Epsilon(epsilon=Fraction(3, 2))
    for kind in KINDS:
        assert h.releases[kind].loss == Epsilon(epsilon=Fraction(3, 8))
        assert h.counts[kind].shape == (SIZES[kind],)
    assert abs(h.people() - 41) < 300  # ε/4 = 3/8 per bin, 76 bins


def test_a_refused_measurement_never_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = _session(tmp_path, budget=Fraction(1))
    engine, binding, unit = _parts(s)

    def refuse(*args: object, **kwargs: object) -> object:
        raise AssertionError("the engine ran before the budget check")

    monkeypatch.setattr(type(engine), "run", refuse)
    with pytest.raises(BudgetExceeded, match="nothing was spent"):
        contribution_histograms(
            engine, binding, unit, ["k"],  # type: ignore[arg-type]
            ledger=s._ledger, dataset=s._dataset, analyst="curator", epsilon=2,
        )  # fmt: skip


def test_the_proposal_trades_bias_for_noise(tmp_path: Path) -> None:
    s = _session(tmp_path)
    exact = exact_histograms(*_parts(s), ["k"])  # type: ignore[arg-type]
    releases = release_histograms(exact, Fraction(10**6))  # nearly noise-free histograms
    from deniable.curator.tune import ContributionHistograms

    h = ContributionHistograms(
        {k: np.asarray(r.value, dtype=np.int64) for k, r in releases.items()},
        releases, Fraction(10**6), ("k",), 0,
    )  # fmt: skip
    loose = propose(h, epsilon=100, groups=7)[0]
    tight = propose(h, epsilon=Fraction(1, 100), groups=7)[0]
    # a large budget affords larger bounds (less bias); a small one wants small bounds
    assert loose.max_groups * loose.max_rows > tight.max_groups * tight.max_rows
    assert loose.kept > tight.kept
    for choice in propose(h, epsilon=1, groups=7):
        assert 0 <= choice.kept <= 1 and choice.error >= max(choice.bias, choice.noise)
