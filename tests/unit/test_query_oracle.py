"""DuckDB as an oracle for the rewriter (noise switched off through the test-only hook).

1. The optimised bounding SQL (rank only heavy partitions and crowded units) must give the
   same exact aggregates as a hand-written, straightforward window-function query with the
   same secrets, on data with heavy users, NULL keys, NULL/NaN/±inf and out-of-range values.
2. On data that is already within the contribution bounds, the aggregates must equal a plain
   pandas computation of the clamped values.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from deniable.accounting.loss import EpsilonDelta
from deniable.curator.session import Session
from deniable.query.plan import DPPlan
from deniable.query.release import ExactAggregates
from deniable.query.rewrite import compile as compile_module
from deniable.query.rewrite.compile import CompiledQuery, Secrets
from deniable.query.testing import exact_aggregates

R, M = 3, 2
LO, HI = -5.0, 50.0


def _events(seed: int, *, bounded: bool) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    cats = np.array(["a", "b", "c", "d", "e", None], dtype=object)
    for u in range(300):
        if bounded:
            ks = rng.choice(cats, size=int(rng.integers(1, M + 1)), replace=False)
            per = {k: int(rng.integers(1, R + 1)) for k in ks}
        else:
            heavy = u % 10 == 0
            ks = rng.choice(cats, size=int(rng.integers(1, 6 if heavy else 3)), replace=False)
            per = {k: int(rng.integers(1, 12 if heavy else 4)) for k in ks}
        for k, n in per.items():
            for _ in range(n):
                rows.append((u, k, float(rng.normal(20, 30)), int(rng.integers(-3, 15))))
    df = pd.DataFrame(rows, columns=["user_id", "category", "value", "qty"])
    if not bounded:
        special = [np.nan, np.inf, -np.inf, 1e300, -1e300, None]
        idx = rng.choice(len(df), size=60, replace=False)
        df["value"] = df.value.astype(object)
        for j, i in enumerate(idx):
            df.at[i, "value"] = special[j % len(special)]
        df["user_id"] = df.user_id.astype(object)
        for i in idx[:5]:
            df.at[i, "user_id"] = None  # rows without a privacy unit are dropped
    return df


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Sessions ``heavy`` and ``bounded``, and their data frames ``heavy_df``, ``bounded_df``."""
    out: dict[str, Any] = {}
    for name, bounded in (("heavy", False), ("bounded", True)):
        s = Session(
            budget=EpsilonDelta(epsilon=10, delta=1e-3),
            ledger=tmp_path_factory.mktemp(name) / "ledger.db",
        )
        df = _events(11, bounded=bounded)
        # Arrow keeps NaN and NULL apart (pandas would turn NaN into NULL).
        table = pa.table(
            {
                "user_id": pa.array(list(df.user_id), type=pa.int64()),
                "category": pa.array([c if isinstance(c, str) else None for c in df.category]),
                "value": pa.array(list(df.value), type=pa.float64(), from_pandas=False),
                "qty": pa.array(df.qty.tolist(), type=pa.int64()),
            }
        )
        s.add_table(
            "events",
            table,
            privacy_unit="user_id",
            bounds={"value": (LO, HI), "qty": (0, 10)},
            max_groups=M,
            max_rows=R,
        )
        out[name] = s
        out[name + "_df"] = df
    yield out
    for _k, v in out.items():
        if isinstance(v, Session):
            v.close()


QUERY = (
    "SELECT category, COUNT(*) AS n, COUNT(value) AS c, SUM(value) AS s, AVG(value) AS a, "
    "COUNT(DISTINCT user_id) AS u, SUM(qty) AS q FROM events WHERE qty >= 0 GROUP BY category"
)


def _h(key: int, *args: str) -> str:
    """The keyed chain hash, spelled out: H(H(key ⊕ H(a₀)) ⊕ H(a₁)) … (see compile.py)."""
    acc = f"xor(CAST({key} AS UBIGINT), hash({args[0]}))"
    for a in args[1:]:
        acc = f"xor(hash({acc}), hash({a}))"
    return f"hash({acc})"


def _double(x: float) -> str:
    return f"CAST('{x!r}' AS DOUBLE)"


def _reference(plan_measures: dict[str, object], e_sum: int, e_avg: int, centre: int) -> str:
    """The straightforward form, written by hand for QUERY (not generated): the totals of
    every row of each kept (unit, partition), partitions ranked by a window."""
    v = "(CASE WHEN isnan(value) THEN NULL ELSE value END)"
    # SQL's least/greatest skip NULLs; a NULL value must stay NULL.
    clamped = f"(CASE WHEN {v} IS NULL THEN NULL ELSE least(greatest({v}, {_double(LO)}), {_double(HI)}) END)"
    s_units = f"CAST(round({clamped} * {_double(2.0**-e_sum)}) AS BIGINT)"
    a_units = f"(CAST(round({clamped} * {_double(2.0**-e_avg)}) AS BIGINT) - {centre})"
    q_units = "CAST(CASE WHEN qty IS NULL THEN NULL ELSE least(greatest(qty, 0), 10) END AS BIGINT)"
    return f"""
    WITH r AS (
        SELECT user_id AS u, category AS k, {v} AS c, {s_units} AS s, {v} AS ac, {a_units} AS a,
               {q_units} AS q
        FROM events WHERE COALESCE(TRY(qty >= 0), FALSE) AND user_id IS NOT NULL),
    totals AS (SELECT u, k, count(*) AS n, count(c) AS c, sum(s) AS s, count(ac) AS ac,
                      sum(a) AS a, sum(q) AS q FROM r GROUP BY u, k),
    parts AS (SELECT *, row_number() OVER (PARTITION BY u ORDER BY {_h(2, "u", "k")}) AS pr
              FROM totals)
    SELECT * FROM parts WHERE pr <= {M}
    """


def _expected_subset_total(total: int, n: int) -> int:
    """A partition's contribution: ``round(total · min(n, R) / n)``, half away from zero."""
    x = Fraction(total * min(n, R), n)
    whole = math.floor(abs(x) + Fraction(1, 2))
    return whole if x >= 0 else -whole


@pytest.mark.parametrize("pack_bits", [None, 2])
def test_optimised_bounding_equals_straightforward_reference(
    sessions: dict[str, Any], pack_bits: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each kept partition contributes min(rows, R) rows and the expected totals of a
    uniform R-row subset of its rows (compile.py, step 4), computed here with Fractions.

    With ``pack_bits=2`` a packed count holds at most 3 rows, so the kept partitions of 4 or
    more rows take the other path (summed again from their rows, ``__giant``)."""
    if pack_bits is not None:
        monkeypatch.setattr(compile_module, "PACK_BITS_MAX", pack_bits)
    session = sessions["heavy"]
    plan, compiled, exact = exact_aggregates(
        session, QUERY, not_private=True, epsilon=1, delta=1e-6
    )
    # The column's count of values rides in the low bits of its sum (compile.py): this test
    # checks the unpacking too, on negative values, NULL/NaN/±inf and heavy partitions.
    # DuckDB keeps packed sums in HUGEINT (wide packing): the count takes the bits one row's
    # packed value leaves, and below GIANT_FREE_BITS the large partitions are summed again.
    shift = re.search(r"__p\d+ >> (\d+)", compiled.sql)
    assert shift is not None
    bits = int(shift.group(1))
    if pack_bits is None:
        assert bits >= compile_module.GIANT_FREE_BITS and "__giant" not in compiled.sql
    else:
        assert bits == pack_bits and "__giant" in compiled.sql
    kinds = [(m.kind, None if m.column is None else m.column.name) for m in plan.measures]
    assert kinds == [
        ("rows", None),
        ("values", "value"),
        ("sum", "value"),
        ("values", "value"),
        ("sum", "value"),
        ("units", None),
        ("sum", "qty"),
    ]
    ms = plan.measures
    assert ms[6].exponent == 0 and ms[2].centre == 0
    assert ms[2].exponent == ms[4].exponent  # SUM and AVG share one exact sum of the column
    sql = _reference({}, ms[2].exponent, ms[4].exponent, ms[4].centre)
    engine = session._engine  # the oracle runs on the same DuckDB, on the same view
    binding = session._bindings["events"]
    parts = engine.run(binding, sql.replace("FROM events", f'FROM "{binding.name}"')).to_pylist()
    want: dict[object, Counter[str]] = defaultdict(Counter)
    for p in parts:
        w = want[p["k"]]
        w["units"] += 1
        w["n"] += min(p["n"], R)
        for name in ("c", "s", "ac", "a", "q"):
            w[name] += _expected_subset_total(int(p[name] or 0), p["n"])
    got = {k: i for i, k in enumerate(exact.keys)}
    assert len(want) == len(got) >= 5
    assert (None,) in got  # NULL keys form a group, as in SQL
    for key, w in want.items():
        i = got[(key,)]
        assert exact.units[i] == w["units"]
        assert exact.measures[ms[5].id][i] == w["units"]
        assert exact.measures[ms[0].id][i] == w["n"]
        assert exact.measures[ms[1].id][i] == w["c"]
        assert exact.measures[ms[2].id][i] == w["s"]
        assert exact.measures[ms[3].id][i] == w["ac"]
        assert exact.measures[ms[4].id][i] == w["a"]
        assert exact.measures[ms[6].id][i] == w["q"]
    # The bounding did something: heavy partitions were scaled, with NULLs among their
    # values (so the scaled count of values differs from the scaled count of rows), and
    # units had more partitions than M.
    assert sum(p["n"] > R for p in parts) >= 20
    assert any(p["n"] > R and p["c"] < p["n"] for p in parts)
    if pack_bits is not None:
        check = compiled.sql.split(" SELECT 0 AS __part")[0] + " SELECT count(*) FROM __grows"
        assert session._engine.run(binding, check).to_pydict()["count_star()"][0] >= 100
    raw = sessions["heavy_df"]
    assert int(exact.measures[ms[0].id].sum()) < int((raw.qty >= 0).sum())


def test_inexact_packed_totals_stay_within_the_partition_bounds(
    sessions: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the re-sum (wide packing at GIANT_FREE_BITS or more), a partition of 2^bits
    rows or more reads its packed totals modulo 2^bits: inexact, but each contribution is
    still clamped to the partition's bounds, so no group exceeds units × max_rows × bound.

    Lowered to 2 bits here, so that partitions of 4 rows or more take that path."""
    monkeypatch.setattr(compile_module, "PACK_BITS_MAX", 2)
    monkeypatch.setattr(compile_module, "GIANT_FREE_BITS", 2)
    session = sessions["heavy"]
    plan, compiled, exact = exact_aggregates(
        session, QUERY, not_private=True, epsilon=1, delta=1e-6
    )
    assert "__giant" not in compiled.sql and " >> 2" in compiled.sql
    ms = plan.measures
    monkeypatch.setattr(compile_module, "GIANT_FREE_BITS", 64)  # the exact re-sum path
    _, resummed, reference = exact_aggregates(
        session, QUERY, not_private=True, epsilon=1, delta=1e-6
    )
    assert "__giant" in resummed.sql
    wrong = 0
    at = {k: j for j, k in enumerate(reference.keys)}
    for i, key in enumerate(exact.keys):
        units = int(exact.units[i])
        for m in (ms[1], ms[3]):  # counts of values: at most max_rows per kept partition
            assert 0 <= int(exact.measures[m.id][i]) <= units * R
        # the sum of value, in grid units of 2^exponent, within ±units·R·max|bound|
        top = units * R * max(abs(LO), abs(HI)) / 2.0 ** ms[2].exponent
        assert abs(int(exact.measures[ms[2].id][i])) <= top
        wrong += int(exact.measures[ms[1].id][i]) != int(reference.measures[ms[1].id][at[key]])
    assert wrong >= 1  # the inexact path was taken (heavy partitions have 4+ rows)


def test_counts_only_need_no_rows(sessions: dict[str, Any]) -> None:
    """COUNT(*) alone keeps min(rows, max_rows) per kept partition without re-reading rows,
    and agrees with the full query's counts under the same secrets."""
    session = sessions["heavy"]
    count_plan, compiled, counts = exact_aggregates(
        session,
        "SELECT category, COUNT(*) AS n, COUNT(DISTINCT user_id) AS u FROM events "
        "WHERE qty >= 0 GROUP BY category",
        not_private=True,
        epsilon=1,
        delta=1e-6,
    )
    assert "__heavy" not in compiled.sql and "least(__n, 3)" in compiled.sql
    plan, _, full = exact_aggregates(session, QUERY, not_private=True, epsilon=1, delta=1e-6)
    rows_id = plan.measures[0].id
    assert plan.measures[0].kind == "rows"
    n_of = {k: int(full.measures[rows_id][i]) for i, k in enumerate(full.keys)}
    c_rows = count_plan.measures[0].id
    assert {k: int(counts.measures[c_rows][i]) for i, k in enumerate(counts.keys)} == n_of
    units_of = {k: int(full.units[i]) for i, k in enumerate(full.keys)}
    assert {k: int(counts.units[i]) for i, k in enumerate(counts.keys)} == units_of


def test_bounds_hold_per_unit(sessions: dict[str, Any]) -> None:
    """No unit has more than M partitions and R rows in each after bounding."""
    session = sessions["heavy"]
    _plan, compiled, _ = exact_aggregates(session, QUERY, not_private=True, epsilon=1, delta=1e-6)
    binding = session._bindings["events"]
    check = compiled.sql.split(" SELECT 0 AS __part")[0]
    stats = session._engine.run(
        binding,
        check + " SELECT max(__n) AS r, max(p) AS m FROM "
        "(SELECT __u, count(*) AS p, max(__n) AS __n FROM __kept GROUP BY __u)",
    ).to_pydict()
    assert stats["r"][0] == R and stats["m"][0] == M


def _half_away(x: np.ndarray) -> np.ndarray:
    return np.asarray(np.sign(x) * np.floor(np.abs(x) + 0.5), dtype=float)


def test_prebounded_data_equals_pandas(sessions: dict[str, Any]) -> None:
    session, df = sessions["bounded"], sessions["bounded_df"]
    plan, _, exact = exact_aggregates(session, QUERY, not_private=True, epsilon=1, delta=1e-6)
    ms = plan.measures
    d = df[df.qty >= 0].copy()
    d["cl"] = d.value.clip(LO, HI)
    d["s"] = _half_away(d.cl * 2.0 ** -ms[2].exponent)
    d["a"] = _half_away(d.cl * 2.0 ** -ms[4].exponent) - ms[4].centre
    d["q"] = d.qty.clip(0, 10)
    expected = d.groupby("category", dropna=False).agg(
        n=("value", "size"),
        s=("s", "sum"),
        a=("a", "sum"),
        q=("q", "sum"),
        u=("user_id", "nunique"),
    )
    got = {k[0]: i for i, k in enumerate(exact.keys)}
    assert len(got) == len(expected)
    for key, row in expected.iterrows():
        i = got[None if (isinstance(key, float) and math.isnan(key)) else key]
        assert exact.measures[ms[0].id][i] == row.n
        assert exact.measures[ms[2].id][i] == row.s
        assert exact.measures[ms[4].id][i] == row.a
        assert exact.measures[ms[6].id][i] == row.q
        assert exact.units[i] == row.u
        # The fixed-point sum is the clamped sum up to the per-row rounding.
        g = 2.0 ** ms[2].exponent
        true = d.cl[d.category.isna() if key is None or key != key else d.category == key].sum()
        assert abs(exact.measures[ms[2].id][i] * g - true) <= row.n * g / 2


MEDIAN_QUERY = "SELECT category, COUNT(*) AS n, MEDIAN(value) AS med FROM events GROUP BY category"


def test_quantile_path_histograms_match_reference(sessions: dict[str, Any]) -> None:
    session = sessions["heavy"]
    plan, _compiled, exact = exact_aggregates(
        session, MEDIAN_QUERY, not_private=True, epsilon=1, delta=1e-6
    )
    med = plan.measures[1]
    assert med.kind == "histogram" and med.grid == 1000
    v = "(CASE WHEN isnan(value) THEN NULL ELSE value END)"
    clamped = f"(CASE WHEN {v} IS NULL THEN NULL ELSE least(greatest({v}, {_double(LO)}), {_double(HI)}) END)"
    step = _double(med.grid / (HI - LO))
    raw = f"CAST(round(({clamped} - {_double(LO)}) * {step}) AS BIGINT)"
    binexpr = f"(CASE WHEN {raw} IS NULL THEN NULL ELSE least(greatest({raw}, 0), 1000) END)"
    binding = session._bindings["events"]
    sql = f"""
    WITH r AS (SELECT user_id AS u, category AS k, {binexpr} AS h FROM "{binding.name}"
               WHERE user_id IS NOT NULL),
    ranked AS (SELECT *, row_number() OVER (PARTITION BY u, k ORDER BY {_h(1, "u", "k", "h")}) AS rn
               FROM r),
    rk AS (SELECT * FROM ranked WHERE rn <= {R}),
    parts AS (SELECT u, k, row_number() OVER (PARTITION BY u ORDER BY {_h(2, "u", "k")}) AS pr
              FROM (SELECT DISTINCT u, k FROM rk)),
    b AS (SELECT rk.* FROM rk JOIN parts ON rk.u = parts.u AND rk.k IS NOT DISTINCT FROM parts.k
          WHERE pr <= {M})
    SELECT k, h, count(*) AS c FROM b WHERE h IS NOT NULL GROUP BY k, h
    """
    ref = session._engine.run(binding, sql).to_pydict()
    hist = exact.histograms[med.id]
    total = 0
    for k, h, c in zip(ref["k"], ref["h"], ref["c"], strict=True):
        assert hist[(k,)][h] == c
        total += c
    assert total == sum(int(x.sum()) for x in hist.values())
    # NULL and NaN values are in no bin
    raw_values = sessions["heavy_df"].value
    assert total < int(raw_values.notna().sum())


# --- the fast form of histogram and distinct measures against the plain form -------------
#
# Queries with quantiles, MIN/MAX or COUNT(DISTINCT col) read the bounded rows themselves.
# The default form re-reads only kept partitions (ranking the rows of those above max_rows);
# the plain form ranks every row, then every partition. For the same secrets they must keep
# the same partitions and rows, so every exact aggregate must be identical.

FORM_QUERIES = {
    "median": "SELECT category, MEDIAN(value) AS m FROM {t} GROUP BY category",
    "quantile_min_max": (
        "SELECT category, QUANTILE(value, 0.25) AS q, MIN(qty) AS lo, MAX(value) AS hi "
        "FROM {t} GROUP BY category"
    ),
    "distinct": (
        "SELECT category, COUNT(DISTINCT qty) AS d, COUNT(DISTINCT value) AS dv "
        "FROM {t} GROUP BY category"
    ),
    "mixed": (
        "SELECT category, COUNT(*) AS n, SUM(value) AS s, AVG(qty) AS a, MEDIAN(value) AS m, "
        "MAX(qty) AS hi, COUNT(DISTINCT qty) AS d, COUNT(value) AS c, "
        "COUNT(DISTINCT user_id) AS u FROM {t} WHERE qty >= 0 GROUP BY category"
    ),
    "ungrouped": "SELECT MEDIAN(value) AS m FROM {t}",
    "ungrouped_mixed": (
        "SELECT COUNT(*) AS n, MIN(value) AS lo, SUM(qty) AS s, AVG(value) AS a, "
        "COUNT(DISTINCT category) AS d, QUANTILE(qty, 0.9) AS q FROM {t}"
    ),
}
# private keys (partition selection), a public domain larger than max_groups (partitions
# ranked), a public domain no larger than max_groups (no partition ranking at all)
FORM_TABLES = ("events", "events_public", "events_small")
FORM_SECRETS = (
    Secrets(rows=1, partitions=2),
    Secrets(rows=0x5DEECE66D1234567, partitions=0x2545F4914F6CDD1D),
)


def _forms_frame() -> pd.DataFrame:
    """The heavy events, plus units with many rows in many partitions (most above R)."""
    df = _events(11, bounded=False)
    rng = np.random.default_rng(5)
    extra = []
    for u in range(1000, 1012):
        for k in ["a", "b", "c", "d", "e", None]:
            for _ in range(int(rng.integers(1, 40))):
                v = float(rng.normal(20, 30)) if rng.random() > 0.1 else np.nan
                extra.append((u, k, v, int(rng.integers(-3, 15))))
    more = pd.DataFrame(extra, columns=df.columns)
    more["value"] = more.value.astype(object)
    return pd.concat([df, more], ignore_index=True)


@pytest.fixture(scope="module")
def forms(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Session, pd.DataFrame]]:
    df = _forms_frame()
    table = pa.table(
        {
            "user_id": pa.array(list(df.user_id), type=pa.int64()),
            "category": pa.array([c if isinstance(c, str) else None for c in df.category]),
            "value": pa.array(list(df.value), type=pa.float64(), from_pandas=False),
            "qty": pa.array(df.qty.tolist(), type=pa.int64()),
        }
    )
    s = Session(
        budget=EpsilonDelta(epsilon=10, delta=1e-3),
        ledger=tmp_path_factory.mktemp("forms") / "ledger.db",
    )
    policy: dict[str, object] = {
        "privacy_unit": "user_id",
        "bounds": {"value": (LO, HI), "qty": (0, 10)},
        "max_groups": M,
        "max_rows": R,
    }
    s.add_table("events", table, **policy)  # type: ignore[arg-type]
    domain = ["a", "b", "c", "d", "e", None]
    s.add_table("events_public", table, public_keys={"category": domain}, **policy)  # type: ignore[arg-type]
    s.add_table("events_small", table, public_keys={"category": ["a", None]}, **policy)  # type: ignore[arg-type]
    yield s, df
    s.close()


def _by_key(exact: ExactAggregates) -> dict[str, object]:
    """Every exact aggregate, keyed by partition key (independent of the result's row order)."""
    out: dict[str, object] = {"keys": set(exact.keys)}
    out["units"] = dict(zip(exact.keys, exact.units.tolist(), strict=True))
    for mid, values in exact.measures.items():
        out[mid] = dict(zip(exact.keys, values.tolist(), strict=True))
    for mid, hist in exact.histograms.items():
        out["hist " + mid] = {k: v.tolist() for k, v in hist.items()}
    return out


def _run_form(
    session: Session,
    query: str,
    secrets: Secrets,
    *,
    plain: bool | None,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[DPPlan, CompiledQuery, ExactAggregates]:
    monkeypatch.setattr(compile_module, "PLAIN_FORM", plain)
    options: dict[str, object] = {"epsilon": 1}
    if "GROUP BY" in query and "FROM events " in query + " ":
        options["delta"] = 1e-6  # private keys: partition selection
    return exact_aggregates(session, query, not_private=True, secrets=secrets, **options)


@pytest.mark.parametrize("table", FORM_TABLES)
@pytest.mark.parametrize("name", sorted(FORM_QUERIES))
def test_fast_histogram_form_equals_plain_form(
    forms: tuple[Session, pd.DataFrame], name: str, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    session, _ = forms
    query = FORM_QUERIES[name].format(t=table)
    for secrets in FORM_SECRETS:
        plan, fast_sql, fast = _run_form(
            session, query, secrets, plain=False, monkeypatch=monkeypatch
        )
        _, plain_sql, plain = _run_form(
            session, query, secrets, plain=True, monkeypatch=monkeypatch
        )
        # the two forms are really different statements (the fast one forced for ungrouped
        # queries, which run the plain form by default)
        assert "__ranked" not in fast_sql.sql and "__lrows" in fast_sql.sql
        assert "__ranked" in plain_sql.sql and "__lrows" not in plain_sql.sql
        assert any(m.kind in ("histogram", "distinct") for m in plan.measures)
        got, want = _by_key(fast), _by_key(plain)
        assert got == want
        assert len(got["keys"]) >= 1  # type: ignore[arg-type]
        if "GROUP BY" in query and table != "events_small":
            assert len(got["keys"]) >= 5  # type: ignore[arg-type]
            assert (None,) in got["keys"]  # type: ignore[operator]


def test_form_comparison_sees_which_rows_and_partitions_are_kept(
    forms: tuple[Session, pd.DataFrame], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Negative controls: the comparison above would catch a fast form that kept other rows
    or other partitions (here: the plain form under another row or partition secret), and
    the data has the shapes that make both bounds bite."""
    session, df = forms
    query = FORM_QUERIES["mixed"].format(t="events_public")
    base = Secrets(rows=1, partitions=2)
    _, _, fast = _run_form(session, query, base, plain=False, monkeypatch=monkeypatch)
    for other in (Secrets(rows=3, partitions=2), Secrets(rows=1, partitions=4)):
        _, _, plain = _run_form(session, query, other, plain=True, monkeypatch=monkeypatch)
        got, want = _by_key(fast), _by_key(plain)
        hist = [k for k in got if k.startswith("hist ")]
        assert hist and any(got[k] != want[k] for k in hist)
    # heavy partitions among the kept ones, and units above max_groups
    d = df[df.user_id.notna() & (df.qty >= 0)]
    sizes = d.groupby(["user_id", "category"], dropna=False).size()
    assert int((sizes > R).sum()) >= 50 and int((sizes > 3 * R).sum()) >= 10
    parts = sizes.groupby(level=0).size()
    assert int((parts > M).sum()) >= 20
    assert d.value.isna().sum() >= 10 and d.category.isna().sum() >= 10


@pytest.mark.parametrize(("name", "plain"), [("ungrouped", True), ("median", False)])
def test_default_form_depends_on_the_query_shape(
    forms: tuple[Session, pd.DataFrame], name: str, plain: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Grouped queries run the fast form; ungrouped ones the plain form (cheaper there)."""
    session, _ = forms
    query = FORM_QUERIES[name].format(t="events_public")
    secrets = FORM_SECRETS[1]
    _, default_sql, default = _run_form(
        session, query, secrets, plain=None, monkeypatch=monkeypatch
    )
    _, forced_sql, forced = _run_form(session, query, secrets, plain=plain, monkeypatch=monkeypatch)
    assert default_sql.sql == forced_sql.sql
    assert ("__ranked" in default_sql.sql) is plain
    assert _by_key(default) == _by_key(forced)
