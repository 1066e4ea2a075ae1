"""Nothing the data decides before the charge (DESIGN §6.5): regression tests of issue 20.

Each test compares a dataset D with D′ = D plus one person holding an extreme value and
requires the same outcome class (answered and charged), or bounds what runs before the
charge by public parameters. Each failed before its fix:

* temporal group keys were converted to Python for every partition before the charge, so
  one person's ``DATE 'infinity'`` or year-10000 date raised ``OverflowError`` for free;
* quantile histograms were allocated densely (partitions × grid) before the charge, so the
  number of private keys a WHERE selects decided a ``MemoryError``.
"""

from __future__ import annotations

import datetime as dt
import tracemalloc
from fractions import Fraction
from pathlib import Path

import duckdb
import pytest

from deniable.accounting import EpsilonDelta
from deniable.curator.session import Session
from deniable.query.release import decode_key, order_keys
from deniable.query.testing import exact_aggregates

BASE = "SELECT i % 40 AS uid, {value} AS d FROM range(400) r(i)"
NORMAL = "DATE '2020-01-01' + (i % 4)::INTEGER"

EXTREMES = {
    "DATE": [
        "'infinity'::DATE",
        "'-infinity'::DATE",
        "DATE '10000-01-01'",
        "DATE '0044-03-15 (BC)'",
    ],
    "TIMESTAMP": ["'infinity'::TIMESTAMP", "TIMESTAMP '12000-06-01 10:00:00'"],
    "TIMESTAMPTZ": ["'infinity'::TIMESTAMPTZ", "'-infinity'::TIMESTAMPTZ"],
}


def _session(tmp_path: Path, normal: str, extreme: str | None, cast: str) -> Session:
    con = duckdb.connect()
    sql = BASE.format(value=f"CAST({normal} AS {cast})")
    if extreme is not None:
        # one more person, with 30 rows of the extreme value (a group of its own)
        sql += f" UNION ALL SELECT 1000 + (i % 30), CAST({extreme} AS {cast}) FROM range(30) r(i)"
    con.execute(f"CREATE TABLE t AS {sql}")
    session = Session(
        budget=EpsilonDelta(epsilon=1000, delta=Fraction(1, 1000)),
        ledger=tmp_path / f"{abs(hash((extreme, cast)))}.sqlite",
    )
    session.add_table("t", con, privacy_unit="uid", max_groups=1, max_rows=5)
    return session


@pytest.mark.parametrize(
    ("cast", "extreme"), [(c, e) for c, values in EXTREMES.items() for e in values]
)
def test_an_extreme_temporal_key_does_not_decide_the_outcome(
    tmp_path: Path, cast: str, extreme: str
) -> None:
    query = "SELECT d, COUNT(*) AS n FROM t GROUP BY d"
    answers = []
    for person in (None, extreme):
        session = _session(tmp_path, NORMAL, person, cast)
        before = session.budget.remaining
        answer = session.sql(query, epsilon=50, delta=Fraction(1, 10**6))
        assert session.budget.remaining != before  # answered and charged, with and without
        answers.append(answer.to_pandas())
    without, with_person = answers
    # at ε = 50 every group of 10 or more people is kept, the extreme one included (its
    # key as a value Python can hold, or the column as the engine's text)
    assert len(with_person) == len(without) + 1
    assert with_person["n"].sum() == pytest.approx(without["n"].sum() + 30, abs=10)


def test_released_temporal_keys_are_python_values_where_python_can_hold_them(
    tmp_path: Path,
) -> None:
    query = "SELECT d, COUNT(*) AS n FROM t GROUP BY d"
    plain = _session(tmp_path, NORMAL, None, "DATE")
    frame = plain.sql(query, epsilon=50, delta=Fraction(1, 10**6)).to_pandas()
    assert list(frame["d"]) == [dt.date(2020, 1, d) for d in range(1, 5)]  # chronological
    # a released key Python cannot hold: the whole column is the engine's text (one type
    # per column, so the answer always converts to Arrow after the charge)
    extreme = _session(tmp_path, NORMAL, "'infinity'::DATE", "DATE")
    answer = extreme.sql(query, epsilon=50, delta=Fraction(1, 10**6))
    assert list(answer.to_pandas()["d"]) == [f"2020-01-0{d}" for d in range(1, 5)] + ["infinity"]
    assert answer.to_arrow().num_rows == 5


def test_public_decimal_domain_still_matches_the_engine_keys(tmp_path: Path) -> None:
    """DECIMAL keys leave the engine as text now; a declared domain still finds them."""
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE t AS SELECT i % 40 AS uid, ((i % 4) + 0.5)::DECIMAL(10, 2) AS d "
        "FROM range(400) r(i)"
    )
    session = Session(budget=EpsilonDelta(epsilon=1000, delta=0), ledger=tmp_path / "l.sqlite")
    domain = [0.5, 1.5, 2.5, 3.5, 4.5]  # the last is empty
    session.add_table(
        "t", con, privacy_unit="uid", max_groups=4, max_rows=10, public_keys={"d": domain}
    )
    query = "SELECT d, COUNT(*) AS n FROM t GROUP BY d"
    plan, _, exact = exact_aggregates(session, query, not_private=True, epsilon=1)
    counts = dict(
        zip(exact.decoded_keys(), exact.measures[plan.measures[0].id].tolist(), strict=True)
    )
    assert counts == {(d,): 100 for d in domain[:4]}
    frame = session.sql(query, epsilon=900).to_pandas()  # sensitivity 40: scale 0.044
    assert [float(d) for d in frame["d"]] == domain
    assert frame["n"].tolist() == pytest.approx([100] * 4 + [0], abs=3)


@pytest.mark.parametrize(
    ("text", "decoder", "value"),
    [
        ("2020-02-29", "date", dt.date(2020, 2, 29)),
        ("infinity", "date", "infinity"),
        ("10000-01-01", "date", "10000-01-01"),
        ("0044-03-15 (BC)", "date", "0044-03-15 (BC)"),
        ("2020-01-01 10:00:00.5", "timestamp", dt.datetime(2020, 1, 1, 10, 0, 0, 500000)),
        ("2020-01-01 00:00:00+00", "timestamp", dt.datetime(2020, 1, 1, tzinfo=dt.UTC)),
        ("-infinity", "timestamp", "-infinity"),
        ("12:30:00", "time", dt.time(12, 30)),
        ("1.50", "decimal", __import__("decimal").Decimal("1.50")),
        ("NaN", "decimal", "NaN"),
        ("[1, 2]", "text", "[1, 2]"),
    ],
)
def test_decode_key_is_total(text: str, decoder: str, value: object) -> None:
    assert decode_key(text, decoder) == value


def test_order_keys_is_by_value_not_by_text() -> None:
    keys = [(10,), (9,), (None,), (float("nan"),), (-1.5,)]
    assert [keys[i] for i in order_keys(keys)][:3] == [(-1.5,), (9,), (10,)]
    assert [keys[i] for i in order_keys(keys)][-1] == (None,)  # NULL last, as in DuckDB
    dates = [(dt.date(2020, 1, 10),), (dt.date(2020, 1, 9),), ("infinity",)]
    assert [dates[i] for i in order_keys(dates)] == [dates[2], dates[1], dates[0]]


def test_quantile_histograms_before_the_charge_are_not_partitions_times_grid(
    tmp_path: Path,
) -> None:
    """Memory read from the engine's result is its size, whatever the public grid.

    Dense histograms took 300 partitions × 100,001 cells × 8 bytes = 240 MB here: one
    person-free knob (the grid) times the private number of keys, a free MemoryError.
    """
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE t AS SELECT i AS uid, i % 300 AS g, (i % 97)::DOUBLE AS v "
        "FROM range(3000) r(i)"
    )
    session = Session(budget=EpsilonDelta(epsilon=1000, delta=0), ledger=tmp_path / "l.sqlite")
    session.add_table(
        "t",
        con,
        privacy_unit="uid",
        bounds={"v": (0, 100)},
        max_groups=1,
        max_rows=1,
        public_keys={"g": list(range(300))},
    )
    from deniable.query import release as release_module

    original = release_module.read_result
    peaks: list[int] = []

    def measured(*args: object, **kwargs: object) -> object:
        tracemalloc.start()
        try:
            return original(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            peaks.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()

    import deniable.query.execute as execute_module

    execute_module.read_result = measured  # type: ignore[assignment]
    try:
        answer = session.sql(
            "SELECT g, MEDIAN(v) AS m FROM t GROUP BY g", epsilon=100, quantile_grid=100_000
        )
    finally:
        execute_module.read_result = original
    assert len(answer.to_pandas()) == 300
    assert peaks and peaks[0] < 64 * 2**20, f"read_result peaked at {peaks[0] / 2**20:.0f} MiB"


def test_a_keys_only_query_never_runs_on_the_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Public keys only: answered from the declared domain, free, without running a statement.

    Before the fix the statement ran over every matching row, so its latency counted the
    rows a WHERE matched (22 ms at 0%, 416 ms at 100% of 10⁶ rows): a free counting oracle.
    """
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT i % 40 AS uid, i % 3 AS k FROM range(400) r(i)")
    session = Session(budget=EpsilonDelta(epsilon=1, delta=0), ledger=tmp_path / "l.sqlite")
    session.add_table(
        "t", con, privacy_unit="uid", max_groups=1, max_rows=1, public_keys={"k": [0, 1, 2, 5]}
    )
    from deniable.engines.duckdb import DuckDBEngine

    def refuse(*args: object, **kwargs: object) -> object:
        raise AssertionError("a keys-only query ran a statement on the data")

    monkeypatch.setattr(DuckDBEngine, "run", refuse)
    before = session.budget.remaining
    frame = session.sql("SELECT k FROM t WHERE uid > 1000 GROUP BY k", epsilon=1).to_pandas()
    assert frame["k"].tolist() == [0, 1, 2, 5]
    assert session.budget.remaining == before  # nothing charged
    # a query with an aggregate does run (and the patched engine refuses it)
    with pytest.raises(AssertionError, match="ran a statement"):
        session.sql("SELECT k, COUNT(*) AS n FROM t GROUP BY k", epsilon=1)
