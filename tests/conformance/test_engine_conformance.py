"""Engine conformance: the noise-free oracle tests, run on every engine of ``conftest.ENGINES``.

What every engine must do with deniable's generated statement (noise switched off through
:func:`deniable.query.testing.exact_aggregates`, secrets fixed):

(a) ``TestExactAggregates``: on data where contribution bounding keeps every row (each
    privacy unit has at most ``R`` rows in all and at most ``M`` partitions under every
    grouping used), every exact measure equals a reference computed here in Python/numpy
    from the measure's documented row-level definition (clamp, fixed-point grid, centre,
    histogram grid), and the values an aggregate derives from its measures (SUM, AVG,
    VARIANCE, MEDIAN, counts) equal numpy's on the clamped data up to the documented
    rounding. Cases cover keys (none, public, private, both), WHERE predicates (comparisons,
    IN, BETWEEN, LIKE, IS NULL, NOT/OR, arithmetic), NULL/NaN/±inf/huge values, and integer
    and text (NFC/NFD spellings of one person) privacy units (a floating-point unit column is
    refused at registration, on every engine).
    A case needing a capability the engine lacks (TRY for arithmetic in WHERE, NFC for text
    units) must be refused with :class:`~deniable.errors.UnsafeQuery` naming the engine —
    never answered differently.
``TestBoundingInvariants``: on data where bounding bites, facts that hold whichever rows
    the engine's keyed hash keeps: exact totals (each unit keeps ``min(M, partitions)``
    partitions; without GROUP BY ``min(R, rows)`` rows), per-unit contributions (one query
    per unit, ``WHERE uid = k``: at most ``M`` partitions of its own, ``min(R, rows)`` rows
    in each), additivity (the full query is the sum of the per-unit queries: a unit's kept
    rows do not depend on other units), sums within ``[c·low, c·high]``, and the two
    bounding forms (fast, and the plain one used with quantiles) keeping the same rows.
(b) ``TestRefusals``: the same exception class (exactly) and a message naming the construct.
(c) ``TestDeterminism``: the same plan and secrets give identical exact aggregates, twice and
    on a fresh engine; other secrets change which rows are kept (the secrets are used).
(d) ``TestCrossEngine``: two engines give identical exact aggregates on the bounded data
    (any hash) and, when they implement the same keyed hash, on the heavy data too. It
    skips while only one engine is listed (a structural placeholder).
"""

from __future__ import annotations

import itertools
import math
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from deniable import ROW
from deniable.accounting.loss import EpsilonDelta
from deniable.curator.session import Session
from deniable.engines.base import Capabilities, Engine
from deniable.errors import InvalidParameter, SQLError, UnsafeQuery
from deniable.query.aggregates import Count, CountDistinct, Mean, Median, Sum, Variance
from deniable.query.measures import Measure, round_half_away
from deniable.query.plan import DPPlan
from deniable.query.release import ExactAggregates
from deniable.query.rewrite.compile import Secrets
from deniable.query.testing import exact_aggregates, exact_for_plan

M, R = 2, 4  # max_groups, max_rows of every table with a privacy unit
LO, HI = -5.0, 50.0  # bounds of v
QLO, QHI = 0, 10  # bounds of q
REGIONS = ["n", "s", "e"]  # public keys of region ("x" and NULL rows are outside the domain)
SECRETS = Secrets(rows=1, partitions=2)
NAN = float("nan")

Row = dict[str, Any]
Key = tuple[object, ...]
EngineMaker = Callable[[], Engine]
"""The ``engine_factory`` fixture of conftest.py: each call makes a fresh engine."""


# --- data ------------------------------------------------------------------------------------


def _spellings(uid: int) -> tuple[str, str]:
    """Two spellings (NFC, NFD) of one person's name; some names differ only in case/space."""
    base = (f"Zoé {uid}", f"ñandú{uid}", f"u{uid} ", f"Ångström-{uid}")[uid % 4]
    return unicodedata.normalize("NFC", base), unicodedata.normalize("NFD", base)


def _bounded_rows() -> list[Row]:
    """Rows where bounding keeps everything: ≤ R rows and ≤ M (cat, region) profiles per unit."""
    rng = np.random.default_rng(20240611)  # test data only, never a release
    cats: list[str | None] = ["a", "b", "c", None]
    regions: list[str | None] = ["n", "s", "e", "x", None]
    specials: list[float | None] = [NAN, None, math.inf, -math.inf, 1e300, -1e300, -0.0, LO, HI]
    texts: list[str | None] = ["alpha", "beta", "al%pha", "gamma", None, "Alpha"]
    profiles = list(itertools.product(cats, regions))
    rows: list[Row] = []
    for uid in range(90):
        n_rows = int(rng.integers(1, R + 1))
        picked = rng.choice(
            len(profiles), size=min(n_rows, int(rng.integers(1, M + 1))), replace=False
        )
        nfc, nfd = _spellings(uid)
        for j in range(n_rows):
            cat, region = profiles[int(picked[j % len(picked)])]
            i = len(rows)
            v: float | None = float(np.round(rng.normal(20, 30), 3))
            if i % 7 == 3:
                v = specials[(i // 7) % len(specials)]
            q: int | None = None if i % 11 == 5 else int(rng.integers(-3, 15))
            f = float(uid) if uid else (0.0 if j % 2 == 0 else -0.0)  # -0.0 is unit 0.0
            rows.append(
                {
                    "uid": uid,
                    "who": nfc if j % 2 == 0 else nfd,
                    "f": f,
                    "cat": cat,
                    "region": region,
                    "v": v,
                    "q": q,
                    "s": texts[int(rng.integers(0, len(texts)))],
                }
            )
    # rows without a privacy unit (NULL, or NaN for the real unit): dropped by unit tables
    for i in range(6):
        rows.append(
            {
                "uid": None,
                "who": None,
                "f": NAN if i % 2 else None,
                "cat": cats[i % 4],
                "region": regions[i % 5],
                "v": 1.0 + i,
                "q": i,
                "s": "alpha",
            }
        )
    return rows


HEAVY_UNITS = 40
HEAVY_CATS = [f"c{i}" for i in range(6)]
HEAVY_REGIONS = ["n", "s", "e", "w"]


def _heavy_rows() -> list[Row]:
    """Rows where bounding bites: up to 5 partitions and 7 rows per partition per unit."""
    rng = np.random.default_rng(7)
    specials: list[float | None] = [NAN, math.inf, -math.inf, None, 1e300, -7.0, 80.0]
    rows: list[Row] = []
    for uid in range(HEAVY_UNITS):
        for j in range(1 + uid % 5):
            cat = HEAVY_CATS[(uid + j) % len(HEAVY_CATS)]
            for _ in range(1 + (uid + 3 * j) % 7):
                i = len(rows)
                v = specials[i % 7] if i % 5 == 0 else float(np.round(rng.normal(20, 30), 2))
                rows.append(
                    {
                        "uid": uid,
                        "cat": cat,
                        "region": HEAVY_REGIONS[int(rng.integers(0, 4))],
                        "v": v,
                        "q": None if i % 13 == 0 else int(rng.integers(-3, 15)),
                    }
                )
    rows += [{"uid": None, "cat": "c0", "region": "n", "v": 1.0, "q": 1} for _ in range(5)]
    return rows


_TYPES = {
    "uid": pa.int64(),
    "who": pa.string(),
    "f": pa.float64(),
    "cat": pa.string(),
    "region": pa.string(),
    "v": pa.float64(),
    "q": pa.int64(),
    "s": pa.string(),
}


def _frame(rows: Sequence[Row]) -> pd.DataFrame:
    """An Arrow-backed pandas frame: NaN and NULL stay apart (see conftest's docstring)."""
    names = list(rows[0])
    table = pa.table(
        {c: pa.array([r[c] for r in rows], type=_TYPES[c], from_pandas=False) for c in names}
    )
    frame: pd.DataFrame = table.to_pandas(types_mapper=pd.ArrowDtype)
    return frame


BOUNDED = _bounded_rows()
HEAVY = _heavy_rows()
CANON_TEXT = ["café", "cafe\u0301", "Café", "cafe\u0301", "cafe", "café "]  # 4 people


@dataclass(frozen=True)
class TableSpec:
    """A registered table: its unit column and how the reference identifies a unit."""

    name: str
    unit: str | None
    canonical: Callable[[object], object] | None
    needs: frozenset[str] = frozenset()


def _nfc(x: object) -> object:
    return None if x is None else unicodedata.normalize("NFC", str(x))


TABLES = (
    TableSpec("ev_int", "uid", lambda x: x),
    TableSpec("ev_text", "who", _nfc, frozenset({"nfc"})),
    TableSpec("ev_rows", None, None),
)


def _register(session: Session) -> None:
    bounds = {"v": (LO, HI), "q": (QLO, QHI)}
    frame = _frame(BOUNDED)
    for t in TABLES:
        session.add_table(
            t.name,
            frame,
            privacy_unit=ROW if t.unit is None else t.unit,
            bounds=bounds,
            max_groups=None if t.unit is None else M,
            max_rows=None if t.unit is None else R,
            public_keys={"region": REGIONS},
        )
    session.add_table(
        "heavy",
        _frame(HEAVY),
        privacy_unit="uid",
        bounds=bounds,
        max_groups=M,
        max_rows=R,
        public_keys={"region": HEAVY_REGIONS},
    )
    for name, unit, values, kind in (("canon_text", "who", CANON_TEXT, pa.string()),):
        table = pa.table(
            {
                unit: pa.array(values, type=kind, from_pandas=False),
                "k": pa.array(["a"] * len(values)),
                "v": pa.array([float(i) for i in range(len(values))]),
            }
        )
        session.add_table(
            name,
            table.to_pandas(types_mapper=pd.ArrowDtype),
            privacy_unit=unit,
            bounds={"v": (0, 10)},
            public_keys={"k": ["a"]},
            max_groups=1,
            max_rows=1,
        )


def _session(maker: EngineMaker, ledger: Path) -> Session:
    session = Session(budget=EpsilonDelta(epsilon=10, delta=1e-3), ledger=ledger, engine=maker())
    _register(session)
    return session


@pytest.fixture(scope="module")
def session(
    engine_factory: EngineMaker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Session]:
    """One session per engine holding every table of the suite."""
    s = _session(engine_factory, tmp_path_factory.mktemp("ledger") / "ledger.db")
    yield s
    s.close()


# --- SQL semantics of the predicates, for the reference ---------------------------------------

Truth = bool | None  # SQL's three-valued logic: None is UNKNOWN


def _and3(*xs: Truth) -> Truth:
    if any(x is False for x in xs):
        return False
    return None if any(x is None for x in xs) else True


def _or3(*xs: Truth) -> Truth:
    if any(x is True for x in xs):
        return True
    return None if any(x is None for x in xs) else False


def _not3(x: Truth) -> Truth:
    return None if x is None else not x


def _cmp(x: object, op: str, y: float) -> Truth:
    """``x op y`` as the engines order doubles: NULL is unknown, NaN is above everything."""
    if x is None:
        return None
    assert isinstance(x, int | float)
    if isinstance(x, float) and math.isnan(x):
        return op in (">", ">=", "<>")
    return {
        ">": x > y,
        ">=": x >= y,
        "<": x < y,
        "<=": x <= y,
        "=": x == y,
        "<>": x != y,
    }[op]


def _in(x: object, values: Sequence[object]) -> Truth:
    return None if x is None else x in values


def _like_prefix(x: object, prefix: str) -> Truth:
    return None if x is None else str(x).startswith(prefix)


def _like_suffix(x: object, suffix: str) -> Truth:
    return None if x is None else str(x).endswith(suffix)


def _mul_add(x: object) -> object:
    return None if x is None else 2 * int(x) + 1  # type: ignore[call-overload]


@dataclass(frozen=True)
class Case:
    """One query of the bounded corpus: SQL (``{t}`` the table, ``{distinct}`` a units count)
    and the reference's predicate and keys."""

    id: str
    sql: str
    keys: tuple[str, ...] = ()
    where: Callable[[Row], Truth] | None = None
    needs: frozenset[str] = frozenset()


_COUNTS = "COUNT(*) AS n, COUNT(v) AS c, COUNT(q) AS cq{distinct}"
_SUMS = "SUM(v) AS s, AVG(v) AS a, SUM(q) AS sq, AVG(q) AS aq"
_SPREAD = "VARIANCE(v) AS var, VAR_POP(q) AS vq, COUNT(*) AS n"
_QUANTILES = "MEDIAN(v) AS med, MEDIAN(q) AS mq, SUM(v) AS s{distinct}"


def _cases() -> list[Case]:
    out: list[Case] = []
    for keys in [(), ("cat",), ("region",), ("cat", "region")]:
        sel = "".join(f"{k}, " for k in keys)
        group = f" GROUP BY {', '.join(keys)}" if keys else ""
        for label, aggs in (
            ("counts", _COUNTS),
            ("sums", _SUMS),
            ("spread", _SPREAD),
            ("quantiles", _QUANTILES),
        ):
            out.append(
                Case(
                    f"{label}-by-{'-'.join(keys) or 'none'}",
                    f"SELECT {sel}{aggs} FROM {{t}}{group}",
                    keys,
                )
            )
    wheres: list[tuple[str, str, Callable[[Row], Truth], frozenset[str]]] = [
        ("ge", "q >= 2", lambda r: _cmp(r["q"], ">=", 2), frozenset()),
        ("in", "q IN (1, 3, 5, 14)", lambda r: _in(r["q"], (1, 3, 5, 14)), frozenset()),
        (
            "between",
            "v BETWEEN 0 AND 30",
            lambda r: _and3(_cmp(r["v"], ">=", 0), _cmp(r["v"], "<=", 30)),
            frozenset(),
        ),
        ("like", "s LIKE 'al%'", lambda r: _like_prefix(r["s"], "al"), frozenset()),
        (
            "not-like-or-null",
            "s NOT LIKE '%a' OR s IS NULL",
            lambda r: _or3(_not3(_like_suffix(r["s"], "a")), r["s"] is None),
            frozenset(),
        ),
        ("is-null", "v IS NULL", lambda r: r["v"] is None, frozenset()),  # NaN is not NULL
        ("nan-above", "v > 40", lambda r: _cmp(r["v"], ">", 40), frozenset()),
        (
            "in-text-not",
            "cat IN ('a', 'c') AND NOT (region = 'n')",
            lambda r: _and3(_in(r["cat"], ("a", "c")), _not3(_in(r["region"], ("n",)))),
            frozenset(),
        ),
        ("arith", "q * 2 + 1 > 7", lambda r: _cmp(_mul_add(r["q"]), ">", 7), frozenset({"try"})),
        (
            "arith-or",
            "v - 10 < 0 OR q - 1 = 4",
            lambda r: _or3(
                _cmp(None if r["v"] is None else r["v"] - 10, "<", 0),
                _cmp(None if r["q"] is None else r["q"] - 1, "=", 4),
            ),
            frozenset({"try"}),
        ),
    ]
    for wid, cond, pred, needs in wheres:
        out.append(
            Case(
                f"where-{wid}",
                f"SELECT {_COUNTS}, {_SUMS} FROM {{t}} WHERE {cond}",
                (),
                pred,
                needs,
            )
        )
        out.append(
            Case(
                f"where-{wid}-by-cat",
                f"SELECT cat, {_COUNTS}, SUM(v) AS s, MEDIAN(v) AS med FROM {{t}} WHERE {cond} GROUP BY cat",
                ("cat",),
                pred,
                needs,
            )
        )
    return out


CASES = _cases()


def _matrix() -> list[tuple[Case, TableSpec]]:
    """Grouping/aggregate cases on every table; each WHERE case on two tables in turn.

    Predicates do not interact with the unit's type, so the WHERE cases are spread over
    the tables (every table still sees every kind of predicate) to keep the suite fast.
    """
    out: list[tuple[Case, TableSpec]] = []
    turn = itertools.cycle(TABLES)
    for case in CASES:
        if case.where is None:
            out += [(case, t) for t in TABLES]
        else:
            out += [(case, next(turn)), (case, next(turn))]
    return out


MATRIX = _matrix()


def _sql(case: Case, table: TableSpec) -> str:
    distinct = "" if table.unit is None else f", COUNT(DISTINCT {table.unit}) AS u"
    return case.sql.format(t=table.name, distinct=distinct)


PUBLIC_KEYS = ("region", "k")  # columns with declared public keys in every table


def _options(keys: Sequence[str]) -> dict[str, object]:
    private = any(k not in PUBLIC_KEYS for k in keys)
    return {"epsilon": 1, "delta": 1e-6} if private else {"epsilon": 1}


def missing(needs: frozenset[str], caps: Capabilities) -> list[str]:
    """The capabilities among ``needs`` that the engine lacks."""
    have = {
        "try": caps.try_expression or caps.try_arithmetic,
        "nfc": caps.unicode_nfc is not None,
    }
    return sorted(n for n in needs if not have[n])


# --- the reference --------------------------------------------------------------------------


def _is_missing(x: object) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _clamped(x: object, m: Measure) -> float | None:
    """The double the engine clamps: NULL and NaN stay missing, ±inf clamp to the bounds."""
    if _is_missing(x):
        return None
    assert isinstance(x, int | float)
    return min(max(float(x), m.lower_f), m.upper_f)


def _row_value(row: Row, m: Measure) -> int | None:
    """One row's contribution to measure ``m`` (integer units), from its documented meaning."""
    assert m.column is not None
    x = row[m.column.name]
    if m.kind == "values":
        return None if _is_missing(x) else 1
    c = _clamped(x, m)
    if c is None:
        return None
    if m.kind == "sum":
        if m.integer_column and m.exponent == 0:
            assert isinstance(x, int)
            return min(max(x, int(m.lower_f)), int(m.upper_f)) - m.centre
        return round_half_away(Fraction(c * 2.0**-m.exponent)) - m.centre
    if m.kind == "squares":
        d = c - m.midpoint_f
        return round_half_away(Fraction(d * d * 2.0**-m.exponent))
    if m.kind == "histogram":
        raw = round_half_away(Fraction((c - m.lower_f) * (m.grid / (m.upper_f - m.lower_f))))
        return min(max(raw, 0), m.grid)
    raise AssertionError(m.kind)


@dataclass
class Reference:
    """Per partition: rows, units, measures and histograms, computed in Python."""

    rows: dict[Key, list[Row]] = field(default_factory=dict)
    units: dict[Key, int] = field(default_factory=dict)
    measures: dict[str, dict[Key, int]] = field(default_factory=dict)
    histograms: dict[str, dict[Key, dict[int, int]]] = field(default_factory=dict)


def reference(plan: DPPlan, table: TableSpec, rows: Sequence[Row], case: Case) -> Reference:
    """What the bounded aggregation must compute when bounding keeps every row."""
    public = {k: REGIONS for k in case.keys if k == "region"}
    groups: dict[Key, list[Row]] = defaultdict(list)
    for row in rows:
        canonical, unit = table.canonical, table.unit
        if canonical is not None and unit is not None and canonical(row[unit]) is None:
            continue  # no privacy unit: dropped
        if case.where is not None and case.where(row) is not True:
            continue
        if any(row[k] not in domain for k, domain in public.items()):
            continue
        groups[tuple(row[k] for k in case.keys)].append(row)
    ref = Reference(rows=dict(groups))
    for key, members in groups.items():
        if table.canonical is None:
            ref.units[key] = len(members)
        else:
            ref.units[key] = len({table.canonical(r[table.unit]) for r in members})  # type: ignore[index]
    for m in plan.measures:
        per: dict[Key, int] = {}
        hist: dict[Key, dict[int, int]] = {}
        for key, members in groups.items():
            if m.kind == "rows":
                per[key] = len(members)
            elif m.kind == "units":
                per[key] = ref.units[key]
            else:
                contributions = [c for r in members if (c := _row_value(r, m)) is not None]
                if m.kind == "histogram":
                    if contributions:
                        hist[key] = dict(Counter(contributions))
                else:
                    per[key] = sum(contributions)
        if m.kind == "histogram":
            ref.histograms[m.id] = hist
        else:
            ref.measures[m.id] = per
    return ref


def by_key(exact: ExactAggregates, values: np.ndarray) -> dict[Key, int]:
    """A per-partition array of exact aggregates as a dict by key tuple."""
    return {k: int(v) for k, v in zip(exact.keys, values.tolist(), strict=True)}


def sparse(hist: dict[Key, np.ndarray]) -> dict[Key, dict[int, int]]:
    """Histograms as ``{key: {bin: count}}`` without empty bins."""
    return {
        k: {int(b): int(c) for b, c in enumerate(h.tolist()) if c}
        for k, h in hist.items()
        if h.any()
    }


def _float_column(members: Sequence[Row], column: str, lo: float, hi: float) -> np.ndarray:
    """The column's non-missing values clamped with numpy (NaN and NULL dropped)."""
    xs = np.array([np.nan if _is_missing(r[column]) else float(r[column]) for r in members])
    clamped: np.ndarray = np.clip(xs[~np.isnan(xs)], lo, hi)
    return clamped


def _off_grid(xs: np.ndarray, g: float) -> int:
    """How many values are not multiples of the grid (each may round by up to g/2)."""
    return int(np.count_nonzero(xs / g != np.round(xs / g)))


def check_values(plan: DPPlan, exact: ExactAggregates, ref: Reference) -> None:
    """Each aggregate's value from its exact measures equals numpy's on the clamped data.

    Tolerances are the documented rounding: each row's value is rounded to the grid ``g``
    (half a grid step per row), a quantile to half a candidate step.
    """
    index = {k: i for i, k in enumerate(exact.keys)}
    for agg in plan.aggregates:
        a = agg.aggregate
        ms = [plan.measure(i) for i in agg.measures]
        for key, members in ref.rows.items():
            i = index[key]

            def val(m: Measure, i: int = i) -> int:
                return int(exact.measures[m.id][i])

            if isinstance(a, Count):  # COUNT(*), COUNT(col), COUNT(DISTINCT unit)
                if isinstance(a, CountDistinct):
                    want = ref.units[key]
                elif a.column is None:
                    want = len(members)
                else:
                    want = sum(not _is_missing(r[a.column.name]) for r in members)
                assert val(ms[0]) == want, (agg.name, key)
                continue
            assert a.column is not None and a.bounds is not None
            lo, hi = a.bounds.as_floats()
            xs = _float_column(members, a.column.name, lo, hi)
            n = xs.size
            if isinstance(a, Sum):
                g = float(ms[0].row_granularity)
                got = val(ms[0]) * g
                tol = _off_grid(xs, g) * g / 2 + 1e-12 * (1 + float(np.abs(xs).sum()))
                assert abs(got - xs.sum()) <= tol, (agg.name, key)
            elif isinstance(a, Mean) and n:
                count, total = ms
                g = float(total.row_granularity)
                assert val(count) == n
                got = g * (total.centre + val(total) / n)
                tol = _off_grid(xs, g) * g / 2 / n + 1e-12 * (1 + float(np.abs(xs).mean()))
                assert abs(got - xs.mean()) <= tol, (agg.name, key)
            elif isinstance(a, Variance) and n >= 2:
                count, total, squares = ms
                g, g2 = float(total.row_granularity), float(squares.row_granularity)
                s, q = val(total) * g, val(squares) * g2
                ddof = 0 if a.population else 1
                got = (q - s * s / n) / (n - ddof)
                want_var = float(np.var(xs, ddof=ddof))
                sd = abs(s) + n * g
                tol = (n * g2 / 2 + sd * g + n * g * g) / (n - ddof) + 1e-9 * (1 + want_var)
                assert abs(got - want_var) <= tol, (agg.name, key, got, want_var)
            elif isinstance(a, Median) and n:
                h, *_ = ms  # the value's histogram (the endpoints read the same)
                counts = exact.histograms[h.id][key]
                assert int(counts.sum()) == n
                j = int(np.searchsorted(np.cumsum(counts), (n + 1) // 2))  # lower median's bin
                step = (h.upper_f - h.lower_f) / h.grid
                lower_median = float(np.sort(xs)[(n - 1) // 2])
                assert abs(h.lower_f + j * step - lower_median) <= step / 2 + 1e-9, (agg.name, key)


def compare_with_reference(plan: DPPlan, exact: ExactAggregates, ref: Reference) -> None:
    """Every exact integer the engine computed equals the reference's."""
    assert sorted(exact.keys, key=repr) == sorted(ref.rows, key=repr)
    assert by_key(exact, exact.units) == ref.units
    for m in plan.measures:
        if m.kind == "histogram":
            assert sparse(exact.histograms.get(m.id, {})) == ref.histograms[m.id], m.id
        else:
            assert by_key(exact, exact.measures[m.id]) == ref.measures[m.id], (m.id, m.kind)


def assert_exact_equal(a: ExactAggregates, b: ExactAggregates) -> None:
    """Two exact results are the same partitions with the same integers (any row order).

    The cross-engine helper: used across engines (``TestCrossEngine``) and, on one engine,
    for determinism.
    """
    assert sorted(a.keys, key=repr) == sorted(b.keys, key=repr)
    assert by_key(a, a.units) == by_key(b, b.units)
    assert a.measures.keys() == b.measures.keys()
    for mid in a.measures:
        assert by_key(a, a.measures[mid]) == by_key(b, b.measures[mid]), mid
    assert a.histograms.keys() == b.histograms.keys()
    for mid in a.histograms:
        assert sparse(a.histograms[mid]) == sparse(b.histograms[mid]), mid


def same_keyed_hash(a: Capabilities, b: Capabilities) -> bool:
    """Whether two engines order rows and partitions identically for the same secrets."""
    return (a.hash_function, a.xor_function, a.unsigned_hash) == (
        b.hash_function,
        b.xor_function,
        b.unsigned_hash,
    )


def _exact(session: Session, sql: str, keys: Sequence[str] = ()) -> tuple[DPPlan, ExactAggregates]:
    plan, _compiled, exact = exact_aggregates(
        session, sql, not_private=True, secrets=SECRETS, **_options(keys)
    )
    return plan, exact


# --- (a) exact aggregates against the reference ----------------------------------------------


def test_bounded_data_is_within_the_bounds() -> None:
    """Precondition of (a): bounding keeps every row of the bounded data."""
    per_unit: dict[object, list[Row]] = defaultdict(list)
    for r in BOUNDED:
        if r["uid"] is not None:
            per_unit[r["uid"]].append(r)
    for rows in per_unit.values():
        assert len(rows) <= R
        for keys in (("cat",), ("region",), ("cat", "region")):
            assert len({tuple(r[k] for k in keys) for r in rows}) <= M
    # and it has what the cases need
    vs = [r["v"] for r in BOUNDED]
    assert any(v is None for v in vs) and any(isinstance(v, float) and math.isnan(v) for v in vs)
    assert math.inf in vs and -math.inf in vs and any(v is not None and v > HI for v in vs)
    assert {r["who"] for r in BOUNDED if r["uid"] == 0} == set(_spellings(0))
    assert {math.copysign(1, r["f"]) for r in BOUNDED if r["uid"] == 0} == {1.0, -1.0}


class TestExactAggregates:
    """(a) Exact bounded aggregates equal the Python reference, on every engine."""

    @pytest.mark.parametrize(("case", "table"), MATRIX, ids=[f"{c.id}-{t.name}" for c, t in MATRIX])
    def test_equals_reference(self, session: Session, case: Case, table: TableSpec) -> None:
        caps = session._engine.capabilities
        sql = _sql(case, table)
        lacking = missing(case.needs | table.needs, caps)
        if lacking:
            # never a different answer: refused, naming the engine and before any row is read
            with pytest.raises(UnsafeQuery, match=caps.dialect) as info:
                _exact(session, sql, case.keys)
            assert type(info.value) is UnsafeQuery
            return
        plan, exact = _exact(session, sql, case.keys)
        ref = reference(plan, table, BOUNDED, case)
        assert ref.rows, "a case must select some rows"
        compare_with_reference(plan, exact, ref)
        check_values(plan, exact, ref)

    def test_reference_rejects_a_wrong_measure(self, session: Session) -> None:
        """Negative control: the comparison catches one measure off by one grid unit."""
        case = next(c for c in CASES if c.id == "sums-by-cat")
        plan, exact = _exact(session, _sql(case, TABLES[0]), case.keys)
        ref = reference(plan, TABLES[0], BOUNDED, case)
        mid = next(m.id for m in plan.measures if m.kind == "sum")
        exact.measures[mid] = exact.measures[mid].copy()
        exact.measures[mid][0] += 1
        with pytest.raises(AssertionError):
            compare_with_reference(plan, exact, ref)
        # and the reference reads the data: one value of q changed, it no longer matches
        i = next(i for i, r in enumerate(BOUNDED) if r["q"] == 5 and r["uid"] is not None)
        changed = [dict(r, q=6) if j == i else r for j, r in enumerate(BOUNDED)]
        _, fresh = _exact(session, _sql(case, TABLES[0]), case.keys)
        compare_with_reference(plan, fresh, ref)
        wrong = reference(plan, TABLES[0], changed, case)
        with pytest.raises(AssertionError):
            compare_with_reference(plan, fresh, wrong)
        check_values(plan, fresh, ref)
        with pytest.raises(AssertionError):  # SUM(q) on grid 1 is exact: off by one fails
            check_values(plan, fresh, wrong)

    @pytest.mark.parametrize(("table", "units"), [("canon_text", 4)], ids=["nfc-text"])
    def test_canonical_units_share_their_bounds(
        self, session: Session, table: str, units: int
    ) -> None:
        """With max_rows = 1, one person spelled two ways keeps one row, and counts once."""
        caps = session._engine.capabilities
        unit = "who" if table == "canon_text" else "f"
        needs = frozenset({"nfc"}) if table == "canon_text" else frozenset()
        queries = [
            f"SELECT k, COUNT(*) AS n, COUNT(DISTINCT {unit}) AS u FROM {table} GROUP BY k",
            f"SELECT k, SUM(v) AS s, COUNT(*) AS n FROM {table} GROUP BY k",  # rows re-read
            f"SELECT k, MEDIAN(v) AS med, COUNT(*) AS n FROM {table} GROUP BY k",  # plain form
        ]
        for sql in queries:
            if missing(needs, caps):
                with pytest.raises(UnsafeQuery, match=caps.dialect):
                    _exact(session, sql, ("k",))
                continue
            plan, exact = _exact(session, sql, ("k",))
            assert exact.keys == [("a",)]
            assert int(exact.units[0]) == units
            rows = next(m.id for m in plan.measures if m.kind == "rows")
            assert int(exact.measures[rows][0]) == units  # one row per person
            for hist in exact.histograms.values():
                assert int(hist[("a",)].sum()) == units


# --- bounding invariants where bounding bites ----------------------------------------------


def _heavy_facts() -> tuple[dict[int, dict[str, int]], dict[int, int], dict[int, set[str]]]:
    per_cat: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    total: dict[int, int] = defaultdict(int)
    regions: dict[int, set[str]] = defaultdict(set)
    for r in HEAVY:
        if r["uid"] is None:
            continue
        per_cat[r["uid"]][r["cat"]] += 1
        total[r["uid"]] += 1
        regions[r["uid"]].add(r["region"])
    return per_cat, total, regions


HEAVY_PER_CAT, HEAVY_TOTAL, HEAVY_REGIONS_OF = _heavy_facts()
FAST = (
    "SELECT cat, COUNT(*) AS n, COUNT(v) AS c, SUM(v) AS s, SUM(q) AS sq, "
    "COUNT(DISTINCT uid) AS u FROM heavy{where} GROUP BY cat"
)
PLAIN = (
    "SELECT cat, COUNT(*) AS n, COUNT(v) AS c, MEDIAN(v) AS med, COUNT(DISTINCT uid) AS u "
    "FROM heavy GROUP BY cat"
)


def _named(plan: DPPlan, exact: ExactAggregates) -> dict[str, dict[Key, int]]:
    """Exact measures by output name (single-measure aggregates) plus ``__units``."""
    out = {"__units": by_key(exact, exact.units)}
    for agg in plan.aggregates:
        if len(agg.measures) == 1 and agg.measures[0] in exact.measures:
            out[agg.name] = by_key(exact, exact.measures[agg.measures[0]])
    return out


class TestBoundingInvariants:
    """Facts about bounded aggregates that hold whichever rows the keyed hash keeps."""

    def test_data_makes_bounding_bite(self) -> None:
        assert max(len(c) for c in HEAVY_PER_CAT.values()) > M
        assert max(n for c in HEAVY_PER_CAT.values() for n in c.values()) > R

    def test_without_group_by_each_unit_keeps_min_rows(self, session: Session) -> None:
        plan, exact = _exact(session, "SELECT COUNT(*) AS n, COUNT(DISTINCT uid) AS u FROM heavy")
        got = _named(plan, exact)
        assert got["n"] == {(): sum(min(R, n) for n in HEAVY_TOTAL.values())}
        assert got["u"] == got["__units"] == {(): HEAVY_UNITS}

    def test_each_unit_keeps_min_partitions(self, session: Session) -> None:
        plan, exact = _exact(session, FAST.format(where=""), ("cat",))
        got = _named(plan, exact)
        assert sum(got["u"].values()) == sum(min(M, len(c)) for c in HEAVY_PER_CAT.values())
        assert got["u"] == got["__units"]
        plan, exact = _exact(
            session,
            "SELECT region, COUNT(DISTINCT uid) AS u FROM heavy GROUP BY region",
            ("region",),
        )
        got = _named(plan, exact)
        assert sum(got["u"].values()) == sum(min(M, len(r)) for r in HEAVY_REGIONS_OF.values())

    def test_partition_invariants(self, session: Session) -> None:
        plan, exact = _exact(session, FAST.format(where=""), ("cat",))
        got = _named(plan, exact)
        s_meas = plan.measure(next(a for a in plan.aggregates if a.name == "s").measures[0])
        q_meas = plan.measure(next(a for a in plan.aggregates if a.name == "sq").measures[0])
        true_units: defaultdict[object, set[object]] = defaultdict(set)
        true_rows: Counter[object] = Counter()
        for r in HEAVY:
            if r["uid"] is not None:
                true_units[r["cat"]].add(r["uid"])
                true_rows[r["cat"]] += 1
        for (cat,), n in got["n"].items():
            u, c, s = got["u"][(cat,)], got["c"][(cat,)], got["s"][(cat,)]
            assert 1 <= u <= len(true_units[cat])
            assert u <= n <= min(true_rows[cat], R * u)
            assert 0 <= c <= n
            # c and s are sums over partitions of rounded expected values (compile.py, step
            # 4): each partition may round its count and its sum half a unit apart
            reach = max(abs(s_meas.row_low), abs(s_meas.row_high))
            slack = u * (reach + 1) // 2 + u
            assert c * s_meas.row_low - slack <= s <= c * s_meas.row_high + slack
            assert 0 <= got["sq"][(cat,)] <= n * q_meas.row_high
        assert sum(got["n"].values()) <= M * R * HEAVY_UNITS

    def test_per_unit_contributions_and_additivity(self, session: Session) -> None:
        """One query per unit: its own ≤ M partitions, min(R, rows) in each; they add up."""
        plan, full = _exact(session, FAST.format(where=""), ("cat",))
        whole = _named(plan, full)
        summed: dict[str, Counter[Key]] = defaultdict(Counter)
        for uid, cats in HEAVY_PER_CAT.items():
            p, ex = _exact(session, FAST.format(where=f" WHERE uid = {uid}"), ("cat",))
            mine = _named(p, ex)
            kept = {k[0] for k in mine["n"]}
            assert len(kept) == min(M, len(cats)) and kept <= set(cats)
            for (cat,), n in mine["n"].items():
                assert n == min(R, cats[str(cat)])
                assert mine["u"][(cat,)] == 1
            assert sum(mine["n"].values()) <= M * R
            for name, values in mine.items():
                summed[name].update(values)
        for name, values in whole.items():
            assert dict(summed[name]) == values, name

    def test_fast_and_plain_forms_keep_the_same_partitions(self, session: Session) -> None:
        """A query with a quantile keeps the same partitions and as many rows in each.

        Additive measures are expected values over the kept partitions' rows, so they agree
        across queries; which rows a quantile's histogram reads depends on the query's
        per-row value columns (they are hashed), so only its totals are bounded.
        """
        p1, fast = _exact(session, FAST.format(where=""), ("cat",))
        p2, plain = _exact(session, PLAIN, ("cat",))
        a, b = _named(p1, fast), _named(p2, plain)
        for name in ("n", "c", "u", "__units"):
            assert a[name] == b[name], name
        med = next(m for m in p2.measures if m.kind == "histogram")
        totals = {k: int(h.sum()) for k, h in plain.histograms[med.id].items()}
        assert set(totals) <= set(b["n"])
        assert all(0 < t <= b["n"][k] for k, t in totals.items())
        # every partition keeps min(rows, R) rows, of which the NULL/NaN values are in no bin
        assert sum(totals.values()) <= sum(b["n"].values())
        assert sum(totals.values()) >= sum(b["n"].values()) - sum(
            1 for r in HEAVY if r["uid"] is not None and _is_missing(r["v"])
        )


# --- (b) identical refusals ---------------------------------------------------------------------

REFUSALS: list[tuple[str, str, dict[str, object], type[Exception], str]] = [
    ("star", "SELECT * FROM ev_int", {"epsilon": 1}, UnsafeQuery, r"SELECT \*"),
    ("raw-column", "SELECT v FROM ev_int", {"epsilon": 1}, UnsafeQuery, r"v"),
    (
        "group-by-unit",
        "SELECT uid, COUNT(*) FROM ev_int GROUP BY uid",
        {"epsilon": 1, "delta": 1e-6},
        UnsafeQuery,
        "privacy unit",
    ),
    ("sum-text", "SELECT SUM(s) FROM ev_int", {"epsilon": 1}, UnsafeQuery, "numeric column"),
    (
        "no-bounds",
        "SELECT SUM(f) FROM ev_int",
        {"epsilon": 1},
        UnsafeQuery,
        "needs clamping bounds",
    ),
    (
        "join-not-on-unit",
        "SELECT COUNT(*) FROM ev_int JOIN heavy ON ev_int.cat = heavy.cat",
        {"epsilon": 1},
        UnsafeQuery,
        "only on their privacy unit",
    ),
    ("cross-join", "SELECT COUNT(*) FROM ev_int, heavy", {"epsilon": 1}, UnsafeQuery, "ON"),
    (
        "subquery",
        "SELECT COUNT(*) FROM ev_int WHERE v > (SELECT AVG(v) FROM ev_int)",
        {"epsilon": 1},
        UnsafeQuery,
        "subquer",
    ),
    (
        "random",
        "SELECT COUNT(*) FROM ev_int WHERE random() < 0.5",
        {"epsilon": 1},
        UnsafeQuery,
        "not allowed",
    ),
    (
        "file-read",
        "SELECT COUNT(*) FROM ev_int WHERE read_text('/etc/passwd') = 'x'",
        {"epsilon": 1},
        UnsafeQuery,
        "not allowed",
    ),
    (
        "in-columns",
        "SELECT COUNT(*) FROM ev_int WHERE s IN (cat, region)",
        {"epsilon": 1},
        UnsafeQuery,
        "literals",
    ),
    ("unsupported-aggregate", "SELECT MODE(v) FROM ev_int", {"epsilon": 1}, UnsafeQuery, "MODE"),
    (
        "window",
        "SELECT COUNT(*) OVER () FROM ev_int",
        {"epsilon": 1},
        UnsafeQuery,
        "(?i)window|OVER",
    ),
    (
        "private-keys-no-delta",
        "SELECT cat, COUNT(*) FROM ev_int GROUP BY cat",
        {"epsilon": 1},
        UnsafeQuery,
        "partition selection",
    ),
    (
        "two-statements",
        "SELECT COUNT(*) FROM ev_int; DROP TABLE ev_int",
        {"epsilon": 1},
        SQLError,
        "exactly one",
    ),
    (
        "unknown-table",
        "SELECT COUNT(*) FROM nope",
        {"epsilon": 1},
        SQLError,
        "unknown table 'nope'",
    ),
    (
        "unknown-column",
        "SELECT COUNT(*) FROM ev_int WHERE nope = 1",
        {"epsilon": 1},
        SQLError,
        "unknown column 'nope'",
    ),
    # decided by the engine's check(), on the schema alone: every engine must refuse it
    (
        "type-mismatch",
        "SELECT COUNT(*) FROM ev_int WHERE s > 5",
        {"epsilon": 1},
        SQLError,
        "type-check",
    ),
    (
        "delta-without-selection",
        "SELECT region, COUNT(*) FROM ev_int GROUP BY region",
        {"epsilon": 1, "delta": 1e-6},
        InvalidParameter,
        "delta",
    ),
    (
        "tiny-epsilon",
        "SELECT COUNT(*) FROM ev_int",
        {"epsilon": 1e-9},
        InvalidParameter,
        "too small",
    ),
]


class TestRefusals:
    """(b) The same queries are refused with the same exception class on every engine."""

    @pytest.mark.parametrize(
        ("sql", "options", "error", "match"),
        [r[1:] for r in REFUSALS],
        ids=[r[0] for r in REFUSALS],
    )
    def test_refused(
        self,
        session: Session,
        sql: str,
        options: dict[str, object],
        error: type[Exception],
        match: str,
    ) -> None:
        before = session.budget.spent
        with pytest.raises(error, match=match) as info:
            exact_aggregates(session, sql, not_private=True, secrets=SECRETS, **options)
        assert type(info.value) is error  # exactly: SQLError is also an UnsafeQuery
        assert session.budget.spent == before

    def test_floating_point_units_are_refused(self, session: Session) -> None:
        """A DOUBLE unit column (``-0.0``/``0.0``, NaN, rounding) never identifies people."""
        with pytest.raises(InvalidParameter, match="floating-point column"):
            session.add_table(
                "float_unit", _frame(BOUNDED), privacy_unit="f", max_groups=M, max_rows=R
            )
        assert "float_unit" not in session.tables

    def test_engine_still_answers_after_refusals(self, session: Session) -> None:
        plan, exact = _exact(session, "SELECT COUNT(*) AS n FROM ev_rows")
        assert _named(plan, exact)["n"] == {(): len(BOUNDED)}


# --- (c) determinism ---------------------------------------------------------------------------

DETERMINISM_QUERIES = [
    (FAST.format(where=""), ("cat",)),
    (PLAIN, ("cat",)),
    ("SELECT region, VARIANCE(v) AS var, AVG(q) AS aq FROM heavy GROUP BY region", ("region",)),
]


class TestDeterminism:
    """(c) The same plan and secrets give the same exact aggregates; the secrets matter."""

    @pytest.mark.parametrize(("sql", "keys"), DETERMINISM_QUERIES, ids=["fast", "plain", "public"])
    def test_same_plan_same_secrets(
        self,
        session: Session,
        engine_factory: EngineMaker,
        tmp_path: Path,
        sql: str,
        keys: tuple[str, ...],
    ) -> None:
        plan, first = _exact(session, sql, keys)
        _, again = exact_for_plan(session, plan, not_private=True, secrets=SECRETS)
        assert_exact_equal(first, again)
        fresh = _session(engine_factory, tmp_path / "ledger.db")  # another engine instance
        try:
            _, other = _exact(fresh, sql, keys)
        finally:
            fresh.close()
        assert_exact_equal(first, other)

    def test_other_secrets_keep_other_rows(self, session: Session) -> None:
        plan, first = _exact(session, FAST.format(where=""), ("cat",))
        differ = 0
        for k in range(3, 9):
            _, other = exact_for_plan(
                session, plan, not_private=True, secrets=Secrets(rows=k, partitions=k + 100)
            )
            try:
                assert_exact_equal(first, other)
            except AssertionError:
                differ += 1
        assert differ >= 3  # the keyed orders depend on the secrets


# --- (d) cross-engine comparison (runs once two engines are listed) ----------------------------


class TestCrossEngine:
    """(d) Two engines, the same secrets: identical exact aggregates.

    On the bounded data any two engines must agree (bounding keeps everything); on the heavy
    data only engines implementing the same keyed hash can (otherwise they keep different,
    equally valid, rows). Skips while ``conftest.ENGINES`` lists one engine.
    """

    def test_engines_agree(
        self, engine_pair: tuple[EngineMaker, EngineMaker], tmp_path: Path
    ) -> None:
        a = _session(engine_pair[0], tmp_path / "a.db")
        b = _session(engine_pair[1], tmp_path / "b.db")
        try:
            caps_a, caps_b = a._engine.capabilities, b._engine.capabilities
            # every case once, on the tables in turn (all of them run per engine in (a))
            queries: list[tuple[str, tuple[str, ...], frozenset[str]]] = [
                (_sql(c, t), c.keys, c.needs | t.needs)
                for c, t in zip(CASES, itertools.cycle(TABLES), strict=False)
            ]
            if same_keyed_hash(caps_a, caps_b):
                queries += [(sql, keys, frozenset()) for sql, keys in DETERMINISM_QUERIES]
            compared = 0
            for sql, keys, needs in queries:
                if missing(needs, caps_a) or missing(needs, caps_b):
                    continue  # refused by one of them (checked per engine in (a))
                assert_exact_equal(_exact(a, sql, keys)[1], _exact(b, sql, keys)[1])
                compared += 1
            assert compared > 0
        finally:
            a.close()
            b.close()
