"""Bounding diagnostics with an answer (issue 21 §2): people cut by each rule, released with DP."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import duckdb
import pytest

from deniable import ROW, Session
from deniable.accounting import Epsilon
from deniable.errors import InvalidParameter
from deniable.query.diagnostics import _clamps
from deniable.query.rewrite.compile import diagnostics_statement

# person p: 1 + p % 4 rows in group 'g' || (p % 3), and one more group when p % 5 == 0;
# cost 10·p (people 0..59: those above 500 are outside [0, 500])
DATA = """
SELECT p AS uid, 'g' || (p % 3) AS g, 10.0 * p AS cost FROM range(60) a(p), range(4) b(r)
WHERE r <= p % 4
UNION ALL SELECT p, 'x', 1.0 FROM range(60) a(p) WHERE p % 5 = 0
"""
QUERY = "SELECT g, COUNT(*) AS n, SUM(cost) AS total FROM t WHERE cost >= 0 GROUP BY g"


def _session(tmp_path: Path, extra: str = "") -> Session:
    con = duckdb.connect()
    con.execute(f"CREATE TABLE t AS {DATA}{extra}")
    s = Session(budget=Epsilon(epsilon=1000), ledger=tmp_path / f"l{len(extra)}.db")
    s.add_table("t", con, privacy_unit="uid", max_groups=1, max_rows=2,
                bounds={"cost": (0, 500)}, public_keys={"g": ["g0", "g1", "g2", "x"]})  # fmt: skip
    return s


def _exact(s: Session) -> list[int]:
    program = s.compile(QUERY, epsilon=1)
    sql = diagnostics_statement(
        program.plan, s._engines["t"].capabilities, s._bindings["t"].name, _clamps(program.plan)
    )
    row = s._engines["t"].run(s._bindings["t"], sql)
    return [int(row.column(c)[0].as_py()) for c in ("people", "max_groups", "max_rows", "clamp0")]


def test_exact_counts_equal_a_python_reference(tmp_path: Path) -> None:
    people = range(60)
    groups = {p: 1 + (p % 5 == 0) for p in people}
    top = {p: 1 + p % 4 for p in people}
    want = [
        60,
        sum(g > 1 for g in groups.values()),  # max_groups = 1
        sum(t > 2 for t in top.values()),  # max_rows = 2
        sum(10 * p > 500 for p in people),  # cost outside [0, 500]
    ]
    assert _exact(_session(tmp_path)) == want


def test_one_more_person_moves_each_count_by_at_most_one(tmp_path: Path) -> None:
    before = _exact(_session(tmp_path))
    extra = " UNION ALL SELECT 999, 'g' || (i % 4), 1e9 FROM range(40) r(i)"
    after = _exact(_session(tmp_path, extra))
    assert [a - b for a, b in zip(after, before, strict=True)] == [1, 1, 1, 1]


def test_diagnostics_are_charged_and_shown_with_the_answer(tmp_path: Path) -> None:
    s = _session(tmp_path)
    answer = s.sql(QUERY, epsilon=1, diagnostics=Fraction(100))
    assert s.budget.spent == Epsilon(epsilon=101)  # the answer, then the diagnostics
    d = answer.diagnostics
    assert d is not None and abs(d.people - 60) <= 2
    lines = d.lines()
    assert lines[1].endswith("had rows dropped by max_rows = 2")
    assert lines[2].endswith("had values clamped by cost clamped to [0, 500]")
    share = d.cuts[1]  # 30 of 60 people have more than 2 rows
    assert share.low <= 0.5 <= share.high and abs(share.share - 0.5) < 0.05
    assert "[bounding: ≈" in repr(answer)


def test_diagnostics_are_refused_before_anything_runs(tmp_path: Path) -> None:
    s = Session(budget=Epsilon(epsilon=10), ledger=tmp_path / "r.db")
    s.add_table("t", duckdb.connect().sql("SELECT 1 AS v"), privacy_unit=ROW)
    with pytest.raises(InvalidParameter, match="single rows"):
        s.sql("SELECT COUNT(*) AS n FROM t", epsilon=1, diagnostics=1)
    assert s.budget.spent == Epsilon(epsilon=0)
