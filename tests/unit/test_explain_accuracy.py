"""Accuracy against ε: exact half-widths for a mechanism and for a compiled query."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from deniable.accounting.loss import Epsilon
from deniable.errors import InvalidParameter
from deniable.explain.accuracy import accuracy_curve, program_accuracy_curve
from deniable.mechanisms import geometric, laplace
from deniable.mechanisms.release import laplace_half_width
from deniable.noise.testing import SeededRandom
from deniable.query.catalog import ROW, Column, ColumnKind, TableInfo, make_policy
from deniable.query.program import QueryOptions, QueryProgram, compile


def test_geometric_half_widths_are_the_release_s() -> None:
    eps = [Fraction(1, 10), Fraction(1, 2), 1, 2]
    c = accuracy_curve(eps, sensitivity=3, level=0.9)
    (widths,) = c.half_widths.values()
    for e, w in zip(eps, widths, strict=True):
        rel = geometric([5], sensitivity=3, epsilon=e, source=SeededRandom(0))
        assert w == rel.half_width(0.9) == laplace_half_width(3 / Fraction(e), 0.9)
    assert c.parameter == "ε" and c.level == 0.9
    assert np.all(np.diff(widths) <= 0)  # more budget, narrower


def test_known_value() -> None:
    # ε = 1, Δ = 1: P[|Z| > c] = 2e^-(c+1)/(1+e^-1) ≤ 5% first at c = 3 (0.0366; c = 2: 0.0996).
    c = accuracy_curve([1], sensitivity=1)
    assert c.half_widths["geometric, sensitivity 1"].tolist() == [3.0]


def test_laplace_on_a_grid_and_gaussian() -> None:
    c = accuracy_curve([0.5], sensitivity=2.5, mechanism="laplace")
    rel = laplace([0.0], sensitivity=2.5, epsilon=0.5, source=SeededRandom(0))
    assert next(iter(c.half_widths.values()))[0] == rel.half_width(0.95)
    g = accuracy_curve([0.5, 2], sensitivity=1, mechanism="discrete_gaussian")
    assert g.parameter == "ρ"


def test_bad_input() -> None:
    with pytest.raises(InvalidParameter):
        accuracy_curve([], sensitivity=1)
    with pytest.raises(InvalidParameter, match="> 0"):
        accuracy_curve([0], sensitivity=1)
    with pytest.raises(InvalidParameter, match="level"):
        accuracy_curve([1], sensitivity=1, level=1)


# ----------------------------------------------------------------- compiled programs


def _catalog(unit: bool) -> dict[str, TableInfo]:
    cols = (
        Column("uid", "BIGINT", ColumnKind.INTEGER),
        Column("x", "DOUBLE", ColumnKind.REAL),
    )
    policy = make_policy(
        "t",
        cols,
        privacy_unit="uid" if unit else ROW,
        bounds={"x": (0, 10)},
        max_groups=1 if unit else None,
        max_rows=5 if unit else None,
        public_keys=None,
    )
    return {"t": TableInfo("t", cols, policy, "v1")}


def _compile_at(sql: str, unit: bool = False):  # type: ignore[no-untyped-def]
    catalog = _catalog(unit)

    def at(e: Fraction) -> QueryProgram:
        return compile(sql, catalog, QueryOptions(budget_kind=Epsilon, epsilon=e))

    return at


def test_count_query_matches_the_mechanism() -> None:
    at = _compile_at("SELECT COUNT(*) AS n FROM t")
    eps = [Fraction(1, 4), Fraction(1), Fraction(4)]
    c = program_accuracy_curve(at, eps, description="count")
    (label,) = c.half_widths
    assert "rows" in label
    for e, w in zip(eps, c.half_widths[label], strict=True):
        (m,) = at(e).plan.measures
        assert m.sensitivity == 1 and m.shift == 0
        assert w == laplace_half_width(Fraction(1) / e, 0.95)
    assert c.level == 0.95


def test_five_rows_per_person_widen_the_interval_five_fold() -> None:
    one = program_accuracy_curve(_compile_at("SELECT COUNT(*) AS n FROM t"), [1])
    five = program_accuracy_curve(_compile_at("SELECT COUNT(*) AS n FROM t", unit=True), [1])
    (w1,) = one.half_widths.values()
    (w5,) = five.half_widths.values()
    assert w5[0] == laplace_half_width(Fraction(5), 0.95) > w1[0]


def test_sum_and_mean_report_their_measures() -> None:
    at = _compile_at("SELECT SUM(x) AS s, AVG(x) AS m FROM t")
    c = program_accuracy_curve(at, [Fraction(1, 2), 2])
    assert len(c.half_widths) == 3  # the sum, and the mean's sum and count
    assert all(np.all(w > 0) and w[0] > w[1] for w in c.half_widths.values())


def test_quantile_only_query_is_refused() -> None:
    at = _compile_at("SELECT MEDIAN(x) AS q FROM t")
    with pytest.raises(InvalidParameter, match="rank error"):
        program_accuracy_curve(at, [1])
