"""Engine conformance of the newer query paths: noise-free exact aggregates against Python.

Run on every engine of ``conftest.ENGINES``. The exact bounded aggregates that
:func:`deniable.query.testing.exact_aggregates` reads from the engine (what the noise is
added to; secrets fixed) are compared with a reference computed here in Python/pandas from
the documented row-level meaning of each construct — never in the engine under test:

* row expressions in aggregates (``SUM(price * qty)``, ``AVG(price - discount)``,
  ``SUM(CASE WHEN … THEN price ELSE 0 END)``, ``COUNT(*) FILTER (WHERE …)``,
  ``SUM(CAST(paid AS INT))``, an integer expression, bounds given by output name): each
  column in a value position clamped to its declared bounds (NULL and NaN stay missing,
  ±inf clamp), conditions read raw, then the fixed-point grid of the measure;
* GROUP BY expressions: a CASE of literals, ``age // 10`` over the bounded integer ``age``
  (clamped inside the key, public domain 0–9), ``lower(region)`` over declared public keys,
  and ``substr(item, 1, 2)`` (private keys: every non-empty partition is in the exact
  result, selection happens at release);
* joins with a public table (INNER and LEFT, keys from the public table) and with a private
  table on the privacy unit (INNER and LEFT, bounding after the join);
* ``COUNT(DISTINCT item)`` of a non-unit column;
* WITH tables and FROM subqueries that filter and project (flattened).

The data keep every row through contribution bounding (each customer has at most two orders
and two visits: at most 4 joined rows and 2 partitions, with ``max_rows = 4`` and
``max_groups = 2``), so the reference needs no bounding; values include NULL, NaN, ±inf,
huge and out-of-bounds numbers, rows without a privacy unit, and states missing from the
public table. A case needing a capability the engine lacks (TRY, for arithmetic and casts in
derived expressions) must be refused with :class:`~deniable.errors.UnsafeQuery` naming the
engine — never answered differently. Negative control: the comparison catches one measure
off by one unit, and a reference that ignores clamping.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from deniable.accounting.loss import EpsilonDelta
from deniable.curator.session import Session
from deniable.engines.base import Capabilities, Engine
from deniable.errors import UnsafeQuery
from deniable.query.aggregates import Count, CountDistinct, DistinctCount, Mean, Sum
from deniable.query.measures import Measure, round_half_away
from deniable.query.plan import DPPlan
from deniable.query.release import ExactAggregates
from deniable.query.rewrite.compile import Secrets
from deniable.query.testing import exact_aggregates

M, R = 2, 4
REGIONS = ["n", "s", "e", "w"]
STATES = [f"st{i}" for i in range(8)]
STATE_REGION = {st: REGIONS[i % 4] for i, st in enumerate(STATES)}
SECRETS = Secrets(rows=5, partitions=6)
NAN = float("nan")
PRICE = (0.0, 100.0)
QTY = (0, 10)
DISCOUNT = (0.0, 20.0)
AGE = (0, 99)
MINUTES = (0, 60)

Row = dict[str, Any]
Key = tuple[object, ...]
EngineMaker = Callable[[], Engine]


# --- data ------------------------------------------------------------------------------------


def _orders() -> list[Row]:
    rng = np.random.default_rng(20250101)  # test data only, never a release
    regions: list[str | None] = [*REGIONS, "x", None, "N"]
    states: list[str | None] = [*STATES, "zz", None]
    prices: list[float | None] = [NAN, None, math.inf, -math.inf, 1e300, -5.0, 150.0, 100.0]
    items: list[str | None] = ["apple", "apricot", "banana", "berry", "cherry", None]
    rows: list[Row] = []
    for uid in range(70):
        for j in range(int(rng.integers(1, 3))):
            i = len(rows)
            price: float | None = float(np.round(rng.uniform(-10, 110), 2))
            if i % 6 == 2:
                price = prices[(i // 6) % len(prices)]
            qty: int | None = None if i % 9 == 4 else int(rng.integers(-3, 15))
            age: int | None = None if i % 13 == 7 else int(rng.integers(-10, 130))
            rows.append(
                {
                    "uid": uid,
                    "region": regions[int(rng.integers(0, len(regions)))],
                    "state": states[int(rng.integers(0, len(states)))],
                    "age": age,
                    "price": price,
                    "qty": qty,
                    "discount": None if i % 11 == 3 else float(np.round(rng.uniform(-2, 25), 2)),
                    "item": items[int(rng.integers(0, len(items)))],
                    "paid": None if i % 8 == 5 else bool(j % 2 == 0 and i % 3 != 0),
                }
            )
            del j
    for i in range(4):  # no privacy unit: dropped
        rows.append(dict(rows[i], uid=None))
    return rows


def _visits() -> list[Row]:
    rng = np.random.default_rng(20250102)
    rows: list[Row] = []
    for uid in range(0, 80, 1):
        if uid % 5 == 4:
            continue  # some customers have no visit (LEFT JOIN keeps their orders)
        for _ in range(int(rng.integers(1, 3))):
            minutes = None if len(rows) % 10 == 6 else int(rng.integers(-5, 75))
            rows.append({"uid": uid, "minutes": minutes})
    rows.append({"uid": None, "minutes": 30})
    return rows


ORDERS = _orders()
VISITS = _visits()
_TYPES = {
    "uid": pa.int64(),
    "region": pa.string(),
    "state": pa.string(),
    "age": pa.int64(),
    "price": pa.float64(),
    "qty": pa.int64(),
    "discount": pa.float64(),
    "item": pa.string(),
    "paid": pa.bool_(),
    "minutes": pa.int64(),
    "sregion": pa.string(),
}


def _frame(rows: Sequence[Row]) -> pd.DataFrame:
    """An Arrow-backed pandas frame: NaN and NULL stay apart (see conftest's docstring)."""
    names = list(rows[0])
    table = pa.table(
        {c: pa.array([r[c] for r in rows], type=_TYPES[c], from_pandas=False) for c in names}
    )
    frame: pd.DataFrame = table.to_pandas(types_mapper=pd.ArrowDtype)
    return frame


def _register(session: Session) -> None:
    session.add_table(
        "orders",
        _frame(ORDERS),
        privacy_unit="uid",
        bounds={"price": PRICE, "qty": QTY, "discount": DISCOUNT, "age": AGE},
        max_groups=M,
        max_rows=R,
        public_keys={"region": REGIONS},
    )
    session.add_table(
        "visits",
        _frame(VISITS),
        privacy_unit="uid",
        bounds={"minutes": MINUTES},
        max_groups=1,
        max_rows=1,
    )
    public = [{"state": st, "sregion": STATE_REGION[st]} for st in STATES]
    session.add_public_table("states", _frame(public), unique_key="state")


@pytest.fixture(scope="module")
def session(
    engine_factory: EngineMaker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Session]:
    """One session per engine holding the tables of this module."""
    s = Session(
        budget=EpsilonDelta(epsilon=10, delta=1e-3),
        ledger=tmp_path_factory.mktemp("paths") / "ledger.db",
        engine=engine_factory(),
    )
    _register(s)
    yield s
    s.close()


def test_data_keeps_every_row_through_bounding() -> None:
    """Precondition: ≤ R (joined) rows and ≤ M partitions per customer under any grouping."""
    orders: dict[object, int] = defaultdict(int)
    visits: dict[object, int] = defaultdict(int)
    for r in ORDERS:
        orders[r["uid"]] += 1
    for r in VISITS:
        visits[r["uid"]] += 1
    assert max(orders[u] for u in orders if u is not None) <= M
    assert max(orders[u] * max(visits[u], 1) for u in orders if u is not None) <= R
    prices = [r["price"] for r in ORDERS]
    assert any(p is not None and math.isnan(p) for p in prices) and math.inf in prices
    assert any(r["state"] not in STATE_REGION for r in ORDERS)


# --- SQL semantics for the reference -------------------------------------------------------------


def _missing(x: object) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _clampf(x: object, bounds: tuple[float, float]) -> float | None:
    """A REAL column clamped as the engine does: NULL/NaN stay missing, ±inf clamp."""
    if _missing(x):
        return None
    assert isinstance(x, int | float)
    return min(max(float(x), bounds[0]), bounds[1])


def _clampi(x: object, bounds: tuple[int, int]) -> int | None:
    if x is None:
        return None
    assert isinstance(x, int)
    return min(max(x, bounds[0]), bounds[1])


def _lt(x: object, y: float) -> bool | None:
    """``x < y`` in SQL: NULL is unknown, NaN is above everything."""
    if x is None:
        return None
    assert isinstance(x, int | float)
    return False if isinstance(x, float) and math.isnan(x) else x < y


def _binop(a: float | int | None, b: float | int | None, f: Callable[[Any, Any], Any]) -> Any:
    return None if a is None or b is None else f(a, b)


def _raw_mul(a: object, b: object) -> float | None:
    """``price * qty`` without clamping (the bounds are the output's): NaN is missing."""
    if _missing(a) or b is None:
        return None
    assert isinstance(a, float) and isinstance(b, int)
    v = a * float(b)
    return None if math.isnan(v) else v


def _band(r: Row) -> str:
    age = r["age"]
    if _lt(age, 30):
        return "young"
    if _lt(age, 60):
        return "mid"
    return "old"  # ELSE: NULL ages too


def _decade(r: Row) -> int | None:
    age = _clampi(r["age"], AGE)
    return None if age is None else age // 10


def _lower_region(r: Row) -> str | None:
    return None if r["region"] is None else str(r["region"]).lower()


def _prefix(r: Row) -> str | None:
    return None if r["item"] is None else str(r["item"])[:2]


def _joined_states(*, left: bool) -> list[Row]:
    out: list[Row] = []
    for r in ORDERS:
        region = STATE_REGION.get(r["state"]) if r["state"] is not None else None
        if region is None and not left:
            continue
        out.append(dict(r, sregion=region))
    return out


def _joined_visits(*, left: bool) -> list[Row]:
    by_uid: dict[object, list[Row]] = defaultdict(list)
    for v in VISITS:
        if v["uid"] is not None:
            by_uid[v["uid"]].append(v)
    out: list[Row] = []
    for r in ORDERS:
        matches = by_uid.get(r["uid"], []) if r["uid"] is not None else []
        if not matches and left:
            out.append(dict(r, minutes=None))
        out += [dict(r, minutes=v["minutes"]) for v in matches]
    return out


# --- cases ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One query and its reference.

    Attributes:
        id: the test id.
        sql: the query.
        rows: the source rows (joined, before WHERE) as dicts.
        key: a row's key tuple (None drops the row: outside a public domain).
        values: per output name, the per-row value of the aggregated expression (before the
            measure's final clamp; None for missing).
        where: the row filter (SQL truth: only True keeps the row).
        options: options of the query (``delta`` for private keys, ``bounds``).
        needs: capabilities the engine must have (else refused naming the engine).
    """

    id: str
    sql: str
    rows: Callable[[], list[Row]]
    key: Callable[[Row], Key | None]
    values: dict[str, Callable[[Row], object]] = field(default_factory=dict)
    where: Callable[[Row], bool | None] | None = None
    options: dict[str, Any] = field(default_factory=dict)
    needs: frozenset[str] = frozenset()


def _in_domain(value: object, domain: Sequence[object]) -> Key | None:
    return (value,) if value in domain else None


TRY = frozenset({"try"})

CASES: list[Case] = [
    Case(
        "rowexpr-arith",
        "SELECT region, SUM(price * qty) AS rev, AVG(price - discount) AS net, "
        "SUM(CAST(paid AS INT)) AS npaid, AVG(qty * 2 - 1) AS q2 FROM orders GROUP BY region",
        lambda: ORDERS,
        lambda r: _in_domain(r["region"], REGIONS),
        {
            "rev": lambda r: _binop(
                _clampf(r["price"], PRICE), _clampi(r["qty"], QTY), lambda a, b: a * b
            ),
            "net": lambda r: _binop(
                _clampf(r["price"], PRICE), _clampf(r["discount"], DISCOUNT), lambda a, b: a - b
            ),
            "npaid": lambda r: None if r["paid"] is None else int(r["paid"]),
            "q2": lambda r: _binop(_clampi(r["qty"], QTY), 1, lambda a, _: a * 2 - 1),
        },
        needs=TRY,
    ),
    Case(
        "rowexpr-case-filter",
        "SELECT region, SUM(CASE WHEN qty < 5 THEN qty ELSE 0 END) AS low, "
        "COUNT(*) FILTER (WHERE qty > 5) AS big, SUM(qty) FILTER (WHERE paid) AS paidq, "
        "COUNT(*) AS n FROM orders GROUP BY region",
        lambda: ORDERS,
        lambda r: _in_domain(r["region"], REGIONS),
        {
            "low": lambda r: _clampi(r["qty"], QTY) if _lt(r["qty"], 5) else 0,
            "big": lambda r: 1 if r["qty"] is not None and r["qty"] > 5 else None,
            "paidq": lambda r: _clampi(r["qty"], QTY) if r["paid"] is True else None,
        },
    ),
    # A REAL column in a derived expression is clamped through deniable's own CAST to
    # DOUBLE, which cannot fail: answered on engines without TRY too.
    Case(
        "rowexpr-case-real",
        "SELECT region, SUM(CASE WHEN price < 50 THEN price ELSE 0 END) AS cheap "
        "FROM orders GROUP BY region",
        lambda: ORDERS,
        lambda r: _in_domain(r["region"], REGIONS),
        {"cheap": lambda r: _clampf(r["price"], PRICE) if _lt(r["price"], 50) else 0},
    ),
    Case(
        "output-bounds",
        "SELECT SUM(price * qty) AS rev FROM orders",
        lambda: ORDERS,
        lambda r: (),
        {"rev": lambda r: _raw_mul(r["price"], r["qty"])},
        options={"bounds": {"rev": (0, 500)}},
        needs=TRY,
    ),
    Case(
        "group-case",
        "SELECT CASE WHEN age < 30 THEN 'young' WHEN age < 60 THEN 'mid' ELSE 'old' END AS band, "
        "COUNT(*) AS n, SUM(price) AS s FROM orders GROUP BY band",
        lambda: ORDERS,
        lambda r: (_band(r),),
        {"s": lambda r: r["price"]},
    ),
    Case(
        "group-decade",
        "SELECT age // 10 AS decade, COUNT(*) AS n, AVG(price) AS a FROM orders GROUP BY age // 10",
        lambda: ORDERS,
        lambda r: None if _decade(r) is None else (_decade(r),),
        {"a": lambda r: r["price"]},
        needs=TRY,
    ),
    Case(
        "group-lower-public",
        "SELECT lower(region) AS r, COUNT(*) AS n FROM orders GROUP BY lower(region)",
        lambda: ORDERS,
        lambda r: _in_domain(_lower_region(r), REGIONS),
    ),
    Case(
        "group-private-expression",
        "SELECT substr(item, 1, 2) AS p, COUNT(*) AS n, SUM(qty) AS sq FROM orders "
        "GROUP BY substr(item, 1, 2)",
        lambda: ORDERS,
        lambda r: (_prefix(r),),
        {"sq": lambda r: r["qty"]},
        options={"delta": 1e-6},
    ),
    Case(
        "public-join",
        "SELECT s.sregion, COUNT(*) AS n, SUM(o.price) AS sp FROM orders o "
        "JOIN states s ON o.state = s.state GROUP BY s.sregion",
        lambda: _joined_states(left=False),
        lambda r: _in_domain(r["sregion"], REGIONS),
        {"sp": lambda r: r["price"]},
    ),
    Case(
        "public-left-join",
        "SELECT s.sregion, COUNT(*) AS n FROM orders o LEFT JOIN states s ON o.state = s.state "
        "GROUP BY s.sregion",
        lambda: _joined_states(left=True),
        # the unmatched orders form the NULL group, as in DuckDB (issue 20)
        lambda r: _in_domain(r["sregion"], [*REGIONS, None]),
    ),
    Case(
        "public-left-join-total",
        "SELECT COUNT(*) AS n, COUNT(s.sregion) AS c FROM orders o "
        "LEFT JOIN states s ON o.state = s.state",
        lambda: _joined_states(left=True),
        lambda r: (),
        {"c": lambda r: r["sregion"]},
    ),
    Case(
        "private-join",
        "SELECT o.region, COUNT(*) AS n, SUM(v.minutes) AS m, COUNT(DISTINCT o.uid) AS u "
        "FROM orders o JOIN visits v ON o.uid = v.uid GROUP BY o.region",
        lambda: _joined_visits(left=False),
        lambda r: _in_domain(r["region"], REGIONS),
        {"m": lambda r: r["minutes"]},
    ),
    Case(
        "private-left-join",
        "SELECT COUNT(*) AS n, COUNT(v.minutes) AS c, AVG(v.minutes) AS a FROM orders o "
        "LEFT JOIN visits v ON o.uid = v.uid",
        lambda: _joined_visits(left=True),
        lambda r: (),
        {"c": lambda r: r["minutes"], "a": lambda r: r["minutes"]},
    ),
    Case(
        "distinct",
        "SELECT region, COUNT(DISTINCT item) AS d, COUNT(DISTINCT uid) AS u FROM orders "
        "GROUP BY region",
        lambda: ORDERS,
        lambda r: _in_domain(r["region"], REGIONS),
        {"d": lambda r: r["item"]},
    ),
    Case(
        "distinct-where",
        "SELECT COUNT(DISTINCT item) AS d FROM orders WHERE qty >= 3",
        lambda: ORDERS,
        lambda r: (),
        {"d": lambda r: r["item"]},
        where=lambda r: None if r["qty"] is None else r["qty"] >= 3,
    ),
    Case(
        "with-filter",
        "WITH w AS (SELECT * FROM orders WHERE price > 20) "
        "SELECT region, COUNT(*) AS n, SUM(qty) AS sq FROM w GROUP BY region",
        lambda: ORDERS,
        lambda r: _in_domain(r["region"], REGIONS),
        {"sq": lambda r: r["qty"]},
        where=lambda r: (
            None
            if _missing(r["price"]) and r["price"] is None
            else (
                True
                if isinstance(r["price"], float) and math.isnan(r["price"])
                else r["price"] > 20
            )
        ),
    ),
    Case(
        "subquery-join",
        "SELECT s.sregion, COUNT(*) AS n FROM (SELECT uid, state FROM orders WHERE qty > 2) o "
        "JOIN states s ON o.state = s.state GROUP BY s.sregion",
        lambda: _joined_states(left=False),
        lambda r: _in_domain(r["sregion"], REGIONS),
        where=lambda r: None if r["qty"] is None else r["qty"] > 2,
    ),
]


def missing(needs: frozenset[str], caps: Capabilities) -> list[str]:
    """The capabilities among ``needs`` that the engine lacks."""
    have = {"try": caps.try_expression or caps.try_arithmetic}
    return sorted(n for n in needs if not have[n])


# --- the reference ---------------------------------------------------------------------------------


def _contribution(x: object, m: Measure) -> int | None:
    """One row's contribution to a sum measure from its documented meaning."""
    if _missing(x):
        return None
    assert isinstance(x, int | float)
    if m.integer_column and m.exponent == 0:
        assert isinstance(x, int) or float(x).is_integer()
        return min(max(int(x), int(m.lower_f)), int(m.upper_f)) - m.centre
    c = min(max(float(x), m.lower_f), m.upper_f)
    return round_half_away(Fraction(c * 2.0**-m.exponent)) - m.centre


@dataclass
class Reference:
    """Per partition: units and every measure, computed in Python."""

    units: dict[Key, int]
    measures: dict[str, dict[Key, int]]


def reference(plan: DPPlan, case: Case, *, clamp: bool = True) -> Reference:
    """What the bounded aggregation must compute when bounding keeps every row.

    ``clamp=False`` skips the measures' final clamp (a deliberately wrong reference).
    """
    groups: dict[Key, list[Row]] = defaultdict(list)
    for row in case.rows():
        if row["uid"] is None:
            continue
        if case.where is not None and case.where(row) is not True:
            continue
        key = case.key(row)
        if key is not None:
            groups[key].append(row)
    units = {k: len({r["uid"] for r in rows}) for k, rows in groups.items()}
    measures: dict[str, dict[Key, int]] = {}
    for agg in plan.aggregates:
        a, ms = agg.aggregate, [plan.measure(i) for i in agg.measures]
        value = case.values.get(agg.name)
        for m in ms:
            per: dict[Key, int] = {}
            for k, rows in groups.items():
                if m.kind == "rows":
                    per[k] = len(rows)
                elif m.kind == "units":
                    per[k] = units[k]
                elif m.kind == "values":
                    assert value is not None, agg.name
                    per[k] = sum(not _missing(value(r)) for r in rows)
                elif m.kind == "distinct":
                    assert value is not None and isinstance(a, DistinctCount), agg.name
                    per[k] = len({value(r) for r in rows if not _missing(value(r))})
                else:
                    assert m.kind == "sum" and value is not None, (agg.name, m.kind)
                    mm = m if clamp else _unclamped(m)
                    per[k] = sum(c for r in rows if (c := _contribution(value(r), mm)) is not None)
            measures[m.id] = per
        del a
    return Reference(units, measures)


def _unclamped(m: Measure) -> Measure:
    return dataclasses.replace(m, lower_f=-1e12, upper_f=1e12)


def by_key(exact: ExactAggregates, values: np.ndarray) -> dict[Key, int]:
    """A per-partition array of exact aggregates as a dict by key tuple."""
    return {k: int(v) for k, v in zip(exact.keys, values.tolist(), strict=True)}


def compare(plan: DPPlan, exact: ExactAggregates, ref: Reference) -> None:
    """Every exact integer the engine computed equals the reference's."""
    assert by_key(exact, exact.units) == ref.units
    for m in plan.measures:
        assert by_key(exact, exact.measures[m.id]) == ref.measures[m.id], (m.id, m.kind)


def _exact(session: Session, case: Case) -> tuple[DPPlan, ExactAggregates]:
    options: dict[str, Any] = {"epsilon": 1, **case.options}
    plan, _, exact = exact_aggregates(
        session, case.sql, not_private=True, secrets=SECRETS, **options
    )
    return plan, exact


# --- tests ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_exact_aggregates_equal_the_reference(session: Session, case: Case) -> None:
    caps = session._engine.capabilities
    lacking = missing(case.needs, caps)
    if lacking:
        # never a different answer: refused, naming the engine, before any row is read
        before = session.budget.spent
        with pytest.raises(UnsafeQuery, match=caps.dialect) as info:
            _exact(session, case)
        assert type(info.value) is UnsafeQuery
        assert session.budget.spent == before
        return
    plan, exact = _exact(session, case)
    ref = reference(plan, case)
    assert ref.units, "a case must select some rows"
    compare(plan, exact, ref)


def test_plans_of_the_new_paths(session: Session) -> None:
    """The cases exercise the paths they name (derived bounds, domains, kinds)."""
    plans = {c.id: session.plan(c.sql, epsilon=1, **c.options) for c in CASES}
    rev = next(a for a in plans["rowexpr-arith"].aggregates if a.name == "rev").aggregate
    assert rev.bounds is not None and rev.bounds.as_floats() == (0.0, 1000.0)
    assert plans["group-decade"].public_domain == tuple((d,) for d in range(10))
    assert plans["group-case"].public_domain == (("young",), ("mid",), ("old",))
    assert plans["group-lower-public"].public_domain == tuple((r,) for r in REGIONS)
    assert plans["group-private-expression"].selection is not None
    assert plans["public-join"].public_domain == tuple((r,) for r in sorted(REGIONS))
    kinds = {a.name: type(a.aggregate) for a in plans["distinct"].aggregates}
    assert kinds == {"d": DistinctCount, "u": CountDistinct}
    assert isinstance(plans["output-bounds"].aggregates[0].aggregate, Sum)
    assert isinstance(plans["private-left-join"].aggregates[2].aggregate, Mean)
    assert isinstance(plans["rowexpr-case-filter"].aggregates[1].aggregate, Count)


def test_reference_rejects_a_wrong_measure(session: Session) -> None:
    """Negative control: one measure off by one unit, and a reference without clamping."""
    case = next(c for c in CASES if c.id == "rowexpr-case-filter")
    plan, exact = _exact(session, case)
    ref = reference(plan, case)
    compare(plan, exact, ref)
    mid = next(m.id for m in plan.measures if m.kind == "sum")
    exact.measures[mid] = exact.measures[mid].copy()
    exact.measures[mid][0] += 1
    with pytest.raises(AssertionError):
        compare(plan, exact, ref)
    _, fresh = _exact(session, case)
    raw = {"paidq": lambda r: r["qty"] if r["paid"] is True else None}
    wrong = dataclasses.replace(case, values={**case.values, **raw})
    with pytest.raises(AssertionError):  # clamping matters on this data
        compare(plan, fresh, reference(plan, wrong, clamp=False))
