"""Empirical ε of SQL answers on the compiler's newer bounding paths.

Five queries, each on two neighbouring datasets ``D`` and ``D'`` (``D'`` adds one intruder
whose rows are chosen to move the answer as far as the bounds allow, with values outside
the declared bounds so that clamping must act):

* ``rowexpr``: ``SUM(a * b)`` with ``a ∈ [0, 10]``, ``b ∈ [0, 5]`` (derived bound
  ``[0, 50]``); the intruder's rows hold ``a`` up to 10⁶ and ``b`` up to 10³ in all three
  categories (``max_groups = 2``, ``max_rows = 3``).
* ``private_join``: ``a JOIN b ON a.uid = b.uid``; the intruder has 8 rows per category in
  ``a`` and 6 rows in ``b`` — 144 joined rows, bounded after the join to 2 partitions × 3
  rows; ``SUM(y)`` of ``b``'s column with ``y`` = 500 clamped to 20.
* ``public_join``: counts per region of a public ``states`` table (every private row
  matches exactly one public row); the intruder has 10 rows in each of the 12 states.
* ``distinct``: ``COUNT(DISTINCT item)`` of a non-unit column; the intruder brings 10 new
  items to each category, of which ``max_rows = 4`` survive in each of 2 partitions.
* ``decade``: ``GROUP BY age // 10`` with ``age ∈ [0, 99]`` (an enumerated public domain
  of 10 keys); the intruder's ages are all outside the bounds (−10⁶ … 10⁶) and land,
  clamped, in the edge buckets 0 and 9; ``SUM(x)`` with ``x`` = 10⁹ clamped to 10.

For each, the exact bounded aggregates of both datasets come from the engine (test-only
hook, same secrets) and the plan's own mechanisms are sampled ``N`` times; each release is
reduced to the log-likelihood-ratio statistic (``_paths_support``).
:func:`deniable.audit.estimate_epsilon` gives a lower confidence bound at ``α = 1e-7``; the
test fails when it exceeds the charged ε = 1, which happens for an honest pipeline with
probability below 1e-7 per estimate — five honest estimates: below 5e-7 for the module. A
deterministic precondition checks that the intruder moves the answer by the plan's
sensitivity (exactly, or within the rounding slack of a coarsened sum), and never by more. Measured honest lower bounds
(N = 200 000): 0.94 (rowexpr), 0.86 (private join), 0.93 (public join), 0.94 (distinct),
0.87 (decade); asserted above 0.5 (the test has power).

Negative controls, each fed to the same estimator and required to be refuted (lower bound
above 1):

* ``rowexpr``: (a) clamping removed (the plan's SQL run on ``D'`` with the columns of
  ``a * b`` unclamped and the product's clamp widened to ±10¹²); (b) noise calibrated for
  the derived bound halved (the sensitivity :func:`~deniable.query.measures.sum_measure`
  gives the same column with bounds ``[0, 25]``) while the engine clamps to ``[0, 50]``.
* ``private_join``, ``public_join``, ``decade``: contribution bounding switched off (the
  same plan's SQL with ``max_groups``/``max_rows`` raised to the intruder's real
  contribution, same measures and grids, noise calibrated for the real bounds).
* ``distinct``: noise calibrated for a partition sensitivity of 1 instead of
  ``min(max_rows, |domain|) = 4``.

Measured control lower bounds: rowexpr 2.24 (clamping removed) and 1.90 (halved bound);
private join 7.2, public join 5.0, decade 4.4 (bounding off); distinct 3.8 (sensitivity 1).

Deterministic tests record privacy defects found while writing this module.
``COUNT(DISTINCT c)`` of a column whose declared public keys are fewer than ``max_rows``
counts values outside that domain (sensitivity 1, shift 5): a strict ``xfail`` (it starts
failing — XPASS — once fixed, so the marker can be removed). A row-level table joined with
a public table whose text key is compared with an integer column matched several public
rows per private row (``'1'``, ``'01'``, ``' 1'`` all equal 1: sensitivity 1, shift 3): now
refused, which the test checks, with the cast spelling staying within its sensitivity.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from _paths_support import Pair, exact_pair, l1_shift, llr_samples, references

from deniable import ROW
from deniable.accounting.loss import Epsilon
from deniable.audit import EmpiricalLoss, estimate_epsilon
from deniable.curator.session import Session
from deniable.errors import UnsafeQuery
from deniable.query.catalog import Bounds
from deniable.query.measures import Measure, SumMeasure, sum_measure
from deniable.query.plan import DPPlan
from deniable.query.rowexpr import Clamp
from deniable.query.testing import exact_aggregates

pytestmark = pytest.mark.stats

N = 200_000
EPS = 1.0
ALPHA = 1e-7
BUDGET = Epsilon(epsilon=10)
CATS = ["p", "q", "r"]
M, R = 2, 3
INTRUDER = 10_000


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)  # test data only, never a release


def _estimate(
    plan: DPPlan,
    pair: Pair,
    seed: int,
    *,
    d2: str | None = None,
    noise: tuple[Measure, ...] | None = None,
) -> EmpiricalLoss:
    """Lower confidence bound on ε from ``D`` against ``D'`` (or an altered ``D'`` run)."""
    ref = references(plan, pair)
    second = pair.d2 if d2 is None else pair.altered[d2]
    a = llr_samples(plan, pair.d, ref, 2 * seed, N, noise=noise)
    b = llr_samples(plan, second, ref, 2 * seed + 1, N, noise=noise)
    return estimate_epsilon(a, b, alpha=ALPHA)


def _unbounded(groups: int, rows: int) -> Callable[[DPPlan], DPPlan]:
    def alter(plan: DPPlan) -> DPPlan:
        return dataclasses.replace(plan, max_groups=groups, max_rows=rows)

    return alter


def _assert_sharp(pair: Pair) -> None:
    """The intruder moves every measure by its sensitivity (never more).

    Exactly, or within the rounding slack the sensitivity of a coarsened measure includes
    (one coarse unit in each of the ``max_groups`` partitions).
    """
    for m in pair.plan.measures:
        got = l1_shift(pair.plan, pair.d, pair.d2, m)
        slack = pair.plan.max_groups if m.shift else 0
        assert m.sensitivity - slack <= got <= m.sensitivity, (m.id, got, m.sensitivity)


# --- rowexpr: SUM(a * b) ------------------------------------------------------------------

ROWEXPR = "SELECT k, SUM(a * b) AS s FROM t GROUP BY k"


def _rowexpr_register(s: Session, intruder: bool) -> None:
    rng = _rng(11)
    rows = [
        (u, CATS[int(rng.integers(0, 3))], int(rng.integers(0, 11)), int(rng.integers(0, 6)))
        for u in range(100)
        for _ in range(int(rng.integers(1, 4)))
    ]
    if intruder:  # every row clamps to 10·5 = 50; raw products up to 10⁹
        extreme = [(10**6, 10**3), (11, 6), (10**4, 5), (10, 10**3), (7_000, 9)]
        rows += [(INTRUDER, k, a, b) for k in CATS for j in range(10) for a, b in [extreme[j % 5]]]
    s.add_table(
        "t",
        pd.DataFrame(rows, columns=["uid", "k", "a", "b"]),
        privacy_unit="uid",
        bounds={"a": (0, 10), "b": (0, 5)},
        max_groups=M,
        max_rows=R,
        public_keys={"k": CATS},
    )


def _unclamped(plan: DPPlan) -> DPPlan:
    """The sum of ``a * b`` without clamping (columns bare, the product's clamp ±10¹², and
    so the per-partition bound that the compiler also enforces, ``max_rows`` × ±10¹²)."""
    (m,) = plan.measures
    assert m.column is not None and m.column.expr is not None
    assert isinstance(m, SumMeasure)
    bare = m.column.expr.transform(lambda n: n.this.copy() if isinstance(n, Clamp) else n)
    column = dataclasses.replace(m.column, expr=bare)
    loose = dataclasses.replace(
        m, column=column, lower_f=-1e12, upper_f=1e12, row_low=-(10**12), row_high=10**12
    )
    return dataclasses.replace(plan, measures=(loose,))


@pytest.fixture(scope="module")
def rowexpr(tmp_path_factory: pytest.TempPathFactory) -> tuple[Pair, Measure]:
    pair = exact_pair(
        tmp_path_factory.mktemp("rowexpr"),
        BUDGET,
        _rowexpr_register,
        ROWEXPR,
        alter={"unclamped": _unclamped},
        epsilon=EPS,
    )
    # the measure the planner makes for this column with the derived bound halved
    (m,) = pair.plan.measures
    assert m.column is not None
    half = sum_measure(
        m.id, m.column, Bounds(Fraction(0), Fraction(25)), m.budget, Epsilon, M, R, centred=False
    )
    return pair, half


def test_rowexpr_derived_bound_and_sharp_intruder(rowexpr: tuple[Pair, Measure]) -> None:
    pair, half = rowexpr
    (m,) = pair.plan.measures
    (agg,) = pair.plan.aggregates
    assert agg.aggregate.bounds is not None
    assert agg.aggregate.bounds.as_floats() == (0.0, 50.0)  # interval arithmetic
    assert m.sensitivity == M * R * 50 and half.sensitivity == m.sensitivity / 2
    _assert_sharp(pair)
    # without the clamps the intruder's rows weigh far more
    assert l1_shift(pair.plan, pair.d, pair.altered["unclamped"], m) > 100 * m.sensitivity


def test_rowexpr_empirical_epsilon_within_the_charged_loss(
    rowexpr: tuple[Pair, Measure],
) -> None:
    pair, _ = rowexpr
    est = _estimate(pair.plan, pair, 1)
    assert est.passes(EPS), est
    assert est.lower > 0.5 * EPS, est  # the test has power


def test_rowexpr_control_without_clamping_is_refuted(rowexpr: tuple[Pair, Measure]) -> None:
    pair, _ = rowexpr
    assert _estimate(pair.plan, pair, 2, d2="unclamped").refutes(EPS)


def test_rowexpr_control_halved_bound_is_refuted(rowexpr: tuple[Pair, Measure]) -> None:
    pair, half = rowexpr
    (m,) = pair.plan.measures
    noise = (dataclasses.replace(m, sensitivity=half.sensitivity),)
    est = _estimate(pair.plan, pair, 3, noise=noise)
    assert est.refutes(EPS), est


# --- private join on the unit ---------------------------------------------------------------

PRIVATE_JOIN = "SELECT k, COUNT(*) AS n, SUM(y) AS s FROM a JOIN b ON a.uid = b.uid GROUP BY k"
INTRUDER_A, INTRUDER_B = 8, 6  # rows per category in a, rows in b


def _join_register(s: Session, intruder: bool) -> None:
    rng = _rng(12)
    a_rows = [
        (u, CATS[int(rng.integers(0, 3))])
        for u in range(80)
        for _ in range(int(rng.integers(1, 4)))
    ]
    b_rows = [
        (u, int(rng.integers(0, 21))) for u in range(80) for _ in range(int(rng.integers(1, 3)))
    ]
    if intruder:
        a_rows += [(INTRUDER, k) for k in CATS for _ in range(INTRUDER_A)]
        b_rows += [(INTRUDER, 500) for _ in range(INTRUDER_B)]
    s.add_table(
        "a",
        pd.DataFrame(a_rows, columns=["uid", "k"]),
        privacy_unit="uid",
        max_groups=M,
        max_rows=R,
        public_keys={"k": CATS},
    )
    s.add_table(
        "b",
        pd.DataFrame(b_rows, columns=["uid", "y"]),
        privacy_unit="uid",
        bounds={"y": (0, 20)},
        max_groups=1,
        max_rows=1,
    )


@pytest.fixture(scope="module")
def private_join(tmp_path_factory: pytest.TempPathFactory) -> Pair:
    unbounded = _unbounded(len(CATS), INTRUDER_A * INTRUDER_B)
    return exact_pair(
        tmp_path_factory.mktemp("pjoin"),
        BUDGET,
        _join_register,
        PRIVATE_JOIN,
        alter={"unbounded": unbounded},
        epsilon=EPS,
    )


def test_private_join_bounds_after_the_join(private_join: Pair) -> None:
    plan = private_join.plan
    assert (plan.max_groups, plan.max_rows) == (M, R)  # the main table's policy
    _assert_sharp(private_join)
    count = plan.measures[0]
    # bounding off: the intruder's 3 × 8 × 6 joined rows all count (and others' too)
    got = l1_shift(plan, private_join.d, private_join.altered["unbounded"], count)
    assert got >= len(CATS) * INTRUDER_A * INTRUDER_B


def test_private_join_empirical_epsilon_within_the_charged_loss(private_join: Pair) -> None:
    est = _estimate(private_join.plan, private_join, 4)
    assert est.passes(EPS), est
    assert est.lower > 0.5 * EPS, est


def test_private_join_control_without_bounding_is_refuted(private_join: Pair) -> None:
    assert _estimate(private_join.plan, private_join, 5, d2="unbounded").refutes(EPS)


# --- public join ------------------------------------------------------------------------------

PUBLIC_JOIN = (
    "SELECT s.region, COUNT(*) AS n FROM t JOIN states s ON t.state = s.state GROUP BY s.region"
)
STATES = [f"st{i:02d}" for i in range(12)]
REGIONS = ["north", "south", "east", "west"]


def _public_register(s: Session, intruder: bool) -> None:
    rng = _rng(13)
    rows = [
        (u, STATES[int(rng.integers(0, 12))])
        for u in range(120)
        for _ in range(int(rng.integers(1, 4)))
    ]
    if intruder:
        rows += [(INTRUDER, st) for st in STATES for _ in range(10)]
    s.add_table(
        "t",
        pd.DataFrame(rows, columns=["uid", "state"]),
        privacy_unit="uid",
        max_groups=M,
        max_rows=R,
    )
    states = pd.DataFrame({"state": STATES, "region": [REGIONS[i % 4] for i in range(12)]})
    s.add_public_table("states", states, unique_key="state")


@pytest.fixture(scope="module")
def public_join(tmp_path_factory: pytest.TempPathFactory) -> Pair:
    return exact_pair(
        tmp_path_factory.mktemp("pubjoin"),
        BUDGET,
        _public_register,
        PUBLIC_JOIN,
        alter={"unbounded": _unbounded(len(REGIONS), 30)},
        epsilon=EPS,
    )


def test_public_join_keys_and_sharp_intruder(public_join: Pair) -> None:
    plan = public_join.plan
    assert plan.public_domain == tuple((r,) for r in sorted(REGIONS))  # from the public table
    _assert_sharp(public_join)
    (count,) = plan.measures
    # each private row matched exactly one public row: D's total is its row count
    assert int(public_join.d.measures[count.id].sum()) <= 120 * 3
    got = l1_shift(plan, public_join.d, public_join.altered["unbounded"], count)
    assert got >= len(STATES) * 10


def test_public_join_empirical_epsilon_within_the_charged_loss(public_join: Pair) -> None:
    est = _estimate(public_join.plan, public_join, 6)
    assert est.passes(EPS), est
    assert est.lower > 0.5 * EPS, est


def test_public_join_control_without_bounding_is_refuted(public_join: Pair) -> None:
    assert _estimate(public_join.plan, public_join, 7, d2="unbounded").refutes(EPS)


# --- COUNT(DISTINCT item) ------------------------------------------------------------------

DISTINCT = "SELECT k, COUNT(DISTINCT item) AS d FROM t GROUP BY k"
R_DISTINCT = 4


def _distinct_register(s: Session, intruder: bool) -> None:
    rng = _rng(14)
    rows = [
        (u, CATS[int(rng.integers(0, 3))], f"i{int(rng.integers(0, 30))}")
        for u in range(100)
        for _ in range(int(rng.integers(1, 5)))
    ]
    if intruder:  # every intruder row brings a new item
        rows += [(INTRUDER, k, f"new-{k}-{j}") for k in CATS for j in range(10)]
    s.add_table(
        "t",
        pd.DataFrame(rows, columns=["uid", "k", "item"]),
        privacy_unit="uid",
        max_groups=M,
        max_rows=R_DISTINCT,
        public_keys={"k": CATS},
    )


@pytest.fixture(scope="module")
def distinct(tmp_path_factory: pytest.TempPathFactory) -> Pair:
    return exact_pair(
        tmp_path_factory.mktemp("distinct"), BUDGET, _distinct_register, DISTINCT, epsilon=EPS
    )


def test_distinct_sensitivity_is_max_rows_per_partition(distinct: Pair) -> None:
    (m,) = distinct.plan.measures
    assert m.kind == "distinct" and m.partition_sensitivity == R_DISTINCT
    assert m.sensitivity == M * R_DISTINCT
    _assert_sharp(distinct)


def test_distinct_empirical_epsilon_within_the_charged_loss(distinct: Pair) -> None:
    est = _estimate(distinct.plan, distinct, 8)
    assert est.passes(EPS), est
    assert est.lower > 0.5 * EPS, est


def test_distinct_control_sensitivity_one_is_refuted(distinct: Pair) -> None:
    (m,) = distinct.plan.measures
    noise = (dataclasses.replace(m, sensitivity=Fraction(M)),)
    est = _estimate(distinct.plan, distinct, 9, noise=noise)
    assert est.refutes(EPS), est


# --- GROUP BY age // 10 (enumerated public domain) -------------------------------------------

DECADE = "SELECT age // 10 AS decade, COUNT(*) AS n, SUM(x) AS s FROM t GROUP BY age // 10"
OUTSIDE_AGES = [-(10**6), -20, -1, 100, 150, 10**6]


def _decade_register(s: Session, intruder: bool) -> None:
    rng = _rng(15)
    rows = [
        (u, int(rng.integers(0, 100)), float(rng.uniform(0, 10)))
        for u in range(150)
        for _ in range(int(rng.integers(1, 4)))
    ]
    if intruder:  # ages outside [0, 99] only: clamped into decades 0 and 9
        rows += [(INTRUDER, age, 1e9) for age in OUTSIDE_AGES for _ in range(5)]
    s.add_table(
        "t",
        pd.DataFrame(rows, columns=["uid", "age", "x"]),
        privacy_unit="uid",
        bounds={"age": (0, 99), "x": (0, 10)},
        max_groups=M,
        max_rows=R,
    )


@pytest.fixture(scope="module")
def decade(tmp_path_factory: pytest.TempPathFactory) -> Pair:
    return exact_pair(
        tmp_path_factory.mktemp("decade"),
        BUDGET,
        _decade_register,
        DECADE,
        alter={"unbounded": _unbounded(M, 15)},
        epsilon=EPS,
    )


def test_decade_domain_and_edge_buckets(decade: Pair) -> None:
    plan = decade.plan
    assert plan.public_domain == tuple((d,) for d in range(10))
    _assert_sharp(decade)
    count = plan.measures[0]
    index = {k: i for i, k in enumerate(plan.public_domain)}
    d1, d2 = (
        np.array(
            [dict(zip(e.keys, e.measures[count.id].tolist(), strict=True)).get(k, 0) for k in index]
        )
        for e in (decade.d, decade.d2)
    )
    moved = {k[0] for k, i in index.items() if d1[i] != d2[i]}
    assert moved == {0, 9}  # out-of-range ages are clamped into the edge buckets


def test_decade_empirical_epsilon_within_the_charged_loss(decade: Pair) -> None:
    est = _estimate(decade.plan, decade, 10)
    assert est.passes(EPS), est
    assert est.lower > 0.5 * EPS, est


def test_decade_control_without_bounding_is_refuted(decade: Pair) -> None:
    assert _estimate(decade.plan, decade, 11, d2="unbounded").refutes(EPS)


# --- defects found (deterministic; strict xfail until fixed) ------------------------------


def _shift_within_sensitivity(
    tmp: Path, register: Callable[[Session, bool], None], query: str
) -> None:
    pair = exact_pair(tmp, BUDGET, register, query, epsilon=EPS)
    for m in pair.plan.measures:
        assert l1_shift(pair.plan, pair.d, pair.d2, m) <= m.sensitivity, (m.id, m.sensitivity)


def test_distinct_of_a_column_with_public_keys_stays_within_its_sensitivity(tmp_path: Path) -> None:
    def register(s: Session, intruder: bool) -> None:
        rows = [(u, "p", "i0") for u in range(10)]
        if intruder:
            rows += [(INTRUDER, "p", f"z{j}") for j in range(5)]
        s.add_table(
            "t",
            pd.DataFrame(rows, columns=["uid", "k", "item"]),
            privacy_unit="uid",
            max_rows=5,
            public_keys={"k": ["p"], "item": ["i0"]},
            max_groups=1,
        )

    _shift_within_sensitivity(
        tmp_path, register, "SELECT k, COUNT(DISTINCT item) AS d FROM t GROUP BY k"
    )


def _cast_key_register(s: Session, intruder: bool) -> None:
    s.add_table("t", pd.DataFrame({"sid": [2, 3] + ([1] if intruder else [])}), privacy_unit=ROW)
    public = pd.DataFrame({"id": ["1", "01", " 1", "2", "3"], "region": ["a", "b", "c", "a", "b"]})
    s.add_public_table("p", public, unique_key="id")


def test_row_level_public_join_on_a_key_of_another_type_is_refused(tmp_path: Path) -> None:
    """A text key compared with an integer would match '1', '01' and ' 1' to one row.

    (Found while writing this module: such a join used to be answered, with one private row
    counted in three partitions at sensitivity 1.) Now refused; with the private side cast
    to the key's type, each private row matches one public row.
    """
    query = "SELECT p.region, COUNT(*) AS n FROM t JOIN p ON p.id = t.sid GROUP BY p.region"
    s = Session(budget=BUDGET, ledger=tmp_path / "r.db")
    _cast_key_register(s, True)
    with pytest.raises(UnsafeQuery, match="same type"):
        s.plan(query, epsilon=EPS)
    s.close()
    cast = query.replace("t.sid", "CAST(t.sid AS VARCHAR)")
    (tmp_path / "cast").mkdir()
    _shift_within_sensitivity(tmp_path / "cast", _cast_key_register, cast)


def test_row_level_public_join_with_a_matching_key_type_stays_within_its_sensitivity(
    tmp_path: Path,
) -> None:
    """The same join with the key's own type: each private row matches one public row."""

    def register(s: Session, intruder: bool) -> None:
        s.add_table(
            "t", pd.DataFrame({"sid": ["2", "3"] + (["1"] if intruder else [])}), privacy_unit=ROW
        )
        public = pd.DataFrame(
            {"id": ["1", "01", " 1", "2", "3"], "region": ["a", "b", "c", "a", "b"]}
        )
        s.add_public_table("p", public, unique_key="id")

    query = "SELECT p.region, COUNT(*) AS n FROM t JOIN p ON p.id = t.sid GROUP BY p.region"
    _shift_within_sensitivity(tmp_path, register, query)
    # and the check has teeth: the exact answer does move (by one row)
    s = Session(budget=BUDGET, ledger=tmp_path / "x.db")
    register(s, True)
    _, _, exact = exact_aggregates(s, query, not_private=True, epsilon=EPS)
    s.close()
    assert int(sum(v.sum() for v in exact.measures.values())) == 3
