"""In-engine Bernoulli sampling: the predicate, the materialised sample and its accounting."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from deniable.accounting import BudgetFilter, amplify_bernoulli
from deniable.accounting.loss import Epsilon, EpsilonDelta, Rho
from deniable.engines.duckdb import DuckDBRunner
from deniable.errors import BudgetExceeded, InvalidParameter, SQLError, UnsafeQuery
from deniable.noise.testing import SeededRandom
from deniable.sampling import (
    ROWID_IDENTITY,
    BernoulliFilter,
    identity_sql,
    quote_identifier,
    sample_table,
)


@pytest.fixture
def con() -> duckdb.DuckDBPyConnection:
    c = duckdb.connect()
    c.execute("CREATE TABLE people AS SELECT range AS id, range % 7 AS g FROM range(20000)")
    return c


def _count(con: duckdb.DuckDBPyConnection, sql_name: str) -> int:
    row = con.execute(f"SELECT count(*) FROM {sql_name}").fetchone()
    assert row is not None
    return int(row[0])


# ------------------------------------------------------------------ the predicate


def test_threshold_is_floor_of_rate_times_2_256() -> None:
    for rate in (Fraction(1, 3), Fraction(1, 10), 0.1, Fraction(999, 1000), 2**-30, 0.999):
        flt = BernoulliFilter(rate=rate, source=SeededRandom(0))
        # A float rate is read as the decimal it prints as (0.1 is 1/10), like every parameter.
        r = Fraction(repr(rate)) if isinstance(rate, float) else Fraction(rate)
        assert flt.rate == r
        assert flt.effective_rate <= r < flt.effective_rate + Fraction(1, 2**256)
        assert flt.effective_rate == Fraction((r.numerator << 256) // r.denominator, 2**256)
    assert BernoulliFilter(rate=Fraction(1, 4)).effective_rate == Fraction(1, 4)
    # 0.1 and 1/10 give the same threshold, and so the same sample for the same key.
    tenth = BernoulliFilter(rate=0.1, source=SeededRandom(0)).effective_rate
    assert tenth == BernoulliFilter(rate=Fraction(1, 10), source=SeededRandom(0)).effective_rate
    full = BernoulliFilter(rate=1)
    assert full.effective_rate == 1 and full.predicate(ROWID_IDENTITY) == ("TRUE", {})


@pytest.mark.parametrize("rate", [0, -0.1, 1.5, float("nan"), True])
def test_bad_rates_are_refused(rate: Any) -> None:
    with pytest.raises(InvalidParameter):
        BernoulliFilter(rate=rate)


def test_key_is_a_parameter_never_in_sql_or_repr() -> None:
    flt = BernoulliFilter(rate=0.5, source=SeededRandom(1))
    sql, params = flt.predicate(ROWID_IDENTITY)
    (key,) = (v for k, v in params.items() if k.startswith("deniable_sample_key"))
    (threshold,) = (v for k, v in params.items() if k.startswith("deniable_sample_threshold"))
    assert len(key) == 32 and key not in sql and key not in repr(flt)
    other = BernoulliFilter(rate=0.5, source=SeededRandom(2)).predicate(ROWID_IDENTITY)[1]
    assert key not in other.values()  # a new filter, a new key
    assert not set(other) & set(params)  # and its own parameter names: both fit in one query
    assert len(threshold) == 64


def test_identity_encoding_is_prefix_free_and_injective() -> None:
    c = duckdb.connect()
    c.execute(
        "CREATE TABLE t AS SELECT * FROM (VALUES ('a', 'bc'), ('ab', 'c'), ('', 'abc'), "
        "(NULL, 'abc'), ('-', 'abc'), ('1:a', ''), ('1', ':a')) v(x, y)"
    )
    ids = [r[0] for r in c.execute(f"SELECT {identity_sql(['x', 'y'])} FROM t").fetchall()]
    assert len(set(ids)) == len(ids)
    for a in ids:
        for b in ids:
            assert a == b or not b.startswith(a)
    c.execute(
        "CREATE TABLE u AS SELECT * FROM (VALUES (1, -5), (NULL, 5), (-1, 5), (15, NULL), "
        "(1, 55), (11, 5), (NULL, NULL)) v(x, y)"
    )
    types = {"x": "INTEGER", "y": "INTEGER"}
    ids = [r[0] for r in c.execute(f"SELECT {identity_sql(['x', 'y'], types)} FROM u").fetchall()]
    assert len(set(ids)) == len(ids)
    for a in ids:
        for b in ids:
            assert a == b or not b.startswith(a)
    rows = [r[0] for r in c.execute(f"SELECT {ROWID_IDENTITY} FROM u").fetchall()]
    assert rows[:2] == ["0.", "1."]
    assert quote_identifier('we"ird') == '"we""ird"'
    with pytest.raises(InvalidParameter):
        identity_sql([])
    with pytest.raises(InvalidParameter):
        identity_sql("user_id")


# ------------------------------------------------------------------ sample_table


def test_sample_is_a_temp_table_in_the_engine(con: duckdb.DuckDBPyConnection) -> None:
    with sample_table(
        DuckDBRunner(con), "people", rate=Fraction(1, 2), source=SeededRandom(3)
    ) as s:
        n = _count(con, s.sql_name)
        assert 0 < n < 20000
        assert s.relation().columns == ["id", "g"]
        temp = con.execute(
            "SELECT temporary FROM duckdb_tables() WHERE table_name = ?", [s.name]
        ).fetchone()
        assert temp == (True,)
        # Deterministic given the key: the table is materialised, reading twice agrees.
        assert _count(con, s.sql_name) == n
    assert con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE table_name = ?", [s.name]
    ).fetchone() == (0,)
    s.drop()  # idempotent
    with pytest.raises(InvalidParameter):
        s.relation()


def test_sampling_by_privacy_unit_keeps_units_whole(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("CREATE TABLE visits AS SELECT range % 500 AS user_id, range AS v FROM range(5000)")
    with sample_table(
        DuckDBRunner(con), "visits", rate=0.5, by=["user_id"], source=SeededRandom(4)
    ) as s:
        rows = con.execute(
            f"SELECT user_id, count(*) FROM {s.sql_name} GROUP BY user_id"
        ).fetchall()
        assert rows and all(c == 10 for _, c in rows)  # every kept user keeps all 10 rows
        assert s.by == ("user_id",)


def test_views_and_odd_names_are_sampled(con: duckdb.DuckDBPyConnection) -> None:
    con.execute('CREATE VIEW "odd ""view""" AS SELECT id FROM people WHERE g < 3')
    with sample_table(DuckDBRunner(con), 'odd "view"', rate=0.5, source=SeededRandom(5)) as s:
        assert 0 < _count(con, s.sql_name) < 20000
        assert s.relation().columns == ["id"]  # the row-number helper column is gone
    con.execute("CREATE SCHEMA s2")
    con.execute("CREATE TABLE s2.t AS SELECT range AS x FROM range(100)")
    with sample_table(DuckDBRunner(con), "s2.t", rate=0.5, source=SeededRandom(6)) as s:
        assert _count(con, s.sql_name) <= 100


def test_bad_inputs_are_refused(con: duckdb.DuckDBPyConnection) -> None:
    with pytest.raises(SQLError):
        sample_table(DuckDBRunner(con), "nope", rate=0.5)
    with pytest.raises(InvalidParameter):
        sample_table(DuckDBRunner(con), "people", rate=0.5, by=["missing"])
    with pytest.raises(InvalidParameter):
        sample_table(DuckDBRunner(con), "people", rate=2)


class _Recorder:
    """An SQLRunner over DuckDB that records statements and refuses to hand rows to Python."""

    dialect = "duckdb"

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self._runner = DuckDBRunner(con)
        self.statements: list[tuple[str, Any]] = []

    def execute(self, sql: str, params: Mapping[str, object] | None = None) -> None:
        self.statements.append((sql, params))
        self._runner.execute(sql, params)

    def columns(self, relation: str) -> tuple[tuple[str, str], ...] | None:
        self.statements.append((f"SELECT * FROM {relation} LIMIT 0", None))
        return self._runner.columns(relation)

    def rows(self, sql: str, params: Mapping[str, object] | None = None) -> list[tuple[Any, ...]]:
        raise AssertionError("rows fetched into Python via rows()")

    def arrow(self, sql: str) -> pa.Table:
        raise AssertionError("rows fetched into Python via arrow()")

    def register(self, name: str, data: pa.Table) -> None:
        raise AssertionError("data registered from Python")

    def unregister(self, name: str) -> None:
        raise AssertionError("data registered from Python")

    def table(self, name: str) -> Any:
        return self._runner.table(name)


def test_no_row_comes_into_python() -> None:
    big = duckdb.connect()
    big.execute(
        "CREATE TABLE big AS SELECT range AS id, repeat('x', 100) AS pad FROM range(1000000)"
    )
    rec = _Recorder(big)
    s = sample_table(rec, "big", rate=0.01, source=SeededRandom(7))
    # One CREATE … AS SELECT does the work; every other statement reads no rows (LIMIT 0).
    creates = [sql for sql, _ in rec.statements if sql.startswith("CREATE TEMP TABLE")]
    assert len(creates) == 1 and "sha256" in creates[0]
    assert all("LIMIT 0" in sql or sql.startswith("CREATE") for sql, _ in rec.statements)
    params = next(p for _, p in rec.statements if p)
    (key,) = (v for k, v in params.items() if k.startswith("deniable_sample_key"))
    assert all(key not in sql for sql, _ in rec.statements)  # the key is only a parameter
    n = _count(big, s.sql_name)
    assert 8_000 < n < 12_000  # ≈ 10 000 (a loose sanity bound; the stats suite tests it)
    s.drop()


# ------------------------------------------------------------------ accounting


def test_first_charge_is_the_amplified_loss(con: duckdb.DuckDBPyConnection) -> None:
    with sample_table(DuckDBRunner(con), "people", rate=0.1, source=SeededRandom(8)) as s:
        loss = Epsilon(epsilon=1)
        assert s.charge(loss) == amplify_bernoulli(loss, 0.1) == s.amplify(loss)
        assert s.spent == amplify_bernoulli(loss, 0.1)


def test_queries_on_one_sample_are_charged_the_amplified_total(
    con: duckdb.DuckDBPyConnection,
) -> None:
    with sample_table(DuckDBRunner(con), "people", rate=0.1, source=SeededRandom(9)) as s:
        first = s.charge(Epsilon(epsilon=1))
        second = s.charge(EpsilonDelta(epsilon=1, delta=Fraction(1, 10**6)))
        total = amplify_bernoulli(EpsilonDelta(epsilon=2, delta=Fraction(1, 10**6)), 0.1)
        assert s.spent == total and first + second == total
        # Amplification is superadditive: the second query costs more than the first.
        assert second.epsilon > first.epsilon
        assert s.spent_on_sample == EpsilonDelta(epsilon=2, delta=Fraction(1, 10**6))


def test_charge_goes_to_the_budget_and_a_refusal_changes_nothing(
    con: duckdb.DuckDBPyConnection,
) -> None:
    budget = BudgetFilter(EpsilonDelta(epsilon=Fraction(1, 5), delta=Fraction(1, 10**5)))
    with sample_table(DuckDBRunner(con), "people", rate=0.1, source=SeededRandom(10)) as s:
        cost = s.charge(Epsilon(epsilon=1), budget=budget)
        assert budget.spent == cost
        with pytest.raises(BudgetExceeded):
            s.charge(Epsilon(epsilon=1), budget=budget)  # would total ≈ 0.35 > 0.2
        assert s.spent == cost and budget.spent == cost
        with pytest.raises(InvalidParameter):
            s.charge(Rho(rho=1))


def test_exclusive_use_for_sampling_based_algorithms(con: duckdb.DuckDBPyConnection) -> None:
    with sample_table(DuckDBRunner(con), "people", rate=0.1, source=SeededRandom(11)) as s:
        s.claim_exclusive()
        with pytest.raises(UnsafeQuery):
            s.charge(Epsilon(epsilon=1))
        with pytest.raises(UnsafeQuery):
            s.claim_exclusive()
    with sample_table(DuckDBRunner(con), "people", rate=0.1, source=SeededRandom(12)) as s:
        s.charge(Epsilon(epsilon=1))
        with pytest.raises(UnsafeQuery):
            s.claim_exclusive()
