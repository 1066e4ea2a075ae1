"""The session end to end on the embedded DuckDB engine: sources, answers, budget, cache,
charging order, NULL/NaN/inf handling, canonical privacy units, public keys."""

from __future__ import annotations

import math
import unicodedata
import warnings
from fractions import Fraction
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rich.console import Console

import deniable.noise.source as source_module
import deniable.query.execute as session_module
from deniable import ROW
from deniable.accounting.loss import Epsilon, EpsilonDelta, Rho
from deniable.curator.session import Session
from deniable.errors import (
    BudgetExceeded,
    InternalError,
    InvalidParameter,
    PrivacyWarning,
    UnsafeQuery,
)
from deniable.noise.testing import SeededRandom
from deniable.query.catalog import canonical_unit
from deniable.query.testing import exact_aggregates


def _frame(n: int = 200) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "uid": [f"u{i % 50}" for i in range(n)],
            "k": [["a", "b", "c"][i % 3] for i in range(n)],
            "x": [float(i % 17) for i in range(n)],
        }
    )


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "ledger.db"


def _exact_count(s: Session, table: str) -> int:
    _, _, exact = exact_aggregates(
        s, f"SELECT COUNT(*) AS n FROM {table}", not_private=True, epsilon=1, max_rows=1000
    )
    return int(next(iter(exact.measures.values()))[0])


def test_every_source_kind(tmp_path: Path, ledger: Path) -> None:
    df = _frame()
    pq.write_table(pa.Table.from_pandas(df), tmp_path / "t.parquet")
    df.to_csv(tmp_path / "t.csv", index=False)
    con = duckdb.connect()
    con.execute("CREATE TABLE from_con AS SELECT * FROM df")
    rel = con.sql("SELECT * FROM df")
    s = Session(budget=Epsilon(epsilon=10), ledger=ledger)
    sources = {
        "pandas": df,
        "polars": pl.from_pandas(df),
        "arrow": pa.Table.from_pandas(df),
        "parquet": tmp_path / "t.parquet",
        "csv": str(tmp_path / "t.csv"),
        "relation": rel,
        "from_con": con,
    }
    for name, src in sources.items():
        info = s.add_table(
            name, src, privacy_unit="uid", bounds={"x": (0, 20)}, max_groups=1, max_rows=1
        )
        assert [c.name for c in info.columns] == ["uid", "k", "x"]
        assert _exact_count(s, name) == 200
    versions = {s.tables[n].version for n in sources}
    assert len(versions) >= 1 and all(versions)
    with pytest.raises(InvalidParameter, match="already registered"):
        s.add_table("PANDAS", df, privacy_unit=ROW)
    with pytest.raises(InvalidParameter, match="source must be"):
        s.add_table("bad", [1, 2, 3], privacy_unit=ROW)
    with pytest.raises(InvalidParameter, match="no such file"):
        s.add_table("missing", tmp_path / "nope.parquet", privacy_unit=ROW)
    with pytest.raises(InvalidParameter, match="no table"):
        s.add_table("absent", con, privacy_unit=ROW)
    s.close()
    assert con.sql("SELECT count(*) FROM from_con").fetchall() == [(200,)]  # caller's stays open


def test_add_table_validates_policy(ledger: Path) -> None:
    s = Session(budget=Epsilon(epsilon=1), ledger=ledger)
    df = _frame()
    with pytest.raises(InvalidParameter, match="no column"):
        s.add_table("t", df, privacy_unit="nope", max_groups=1, max_rows=1)
    with pytest.raises(InvalidParameter, match="numeric"):
        s.add_table("t", df, bounds={"k": (0, 1)}, privacy_unit=ROW)
    with pytest.raises(InvalidParameter, match="lower < upper"):
        s.add_table("t", df, bounds={"x": (1, 1)}, privacy_unit=ROW)
    with pytest.raises(InvalidParameter, match="finite"):
        s.add_table("t", df, bounds={"x": (0, math.inf)}, privacy_unit=ROW)
    with pytest.raises(InvalidParameter, match="privacy unit cannot"):
        s.add_table(
            "t", df, privacy_unit="uid", public_keys={"uid": ["u1"]}, max_groups=1, max_rows=1
        )
    with pytest.raises(InvalidParameter, match="need a privacy_unit"):
        s.add_table("t", df, privacy_unit=ROW, max_rows=3)
    s.close()


def test_answer_shape_conversions_and_metadata(ledger: Path) -> None:
    s = Session(budget=Epsilon(epsilon=2), ledger=ledger)
    s.add_table(
        "t",
        _frame(),
        privacy_unit="uid",
        bounds={"x": (0, 20)},
        max_rows=4,
        public_keys={"k": ["a", "b", "c", "d"]},
        max_groups=1,
    )
    a = s.sql("SELECT k, COUNT(*) AS n, AVG(x) AS mean FROM t GROUP BY k ORDER BY k", epsilon=1)
    assert a.columns == ["k", "n", "n_low", "n_high", "mean", "mean_low", "mean_high"]
    assert a["k"].tolist() == ["a", "b", "c", "d"]  # the empty public key "d" is output
    assert ((a["mean"] >= 0) & (a["mean"] <= 20)).all()  # counts may be negative: unbiased
    assert (a["n_low"] <= a["n"]).all() and (a["n"] <= a["n_high"]).all()
    assert isinstance(a.to_polars(), pl.DataFrame) and isinstance(a.to_arrow(), pa.Table)
    assert a.loss == Epsilon(epsilon=1) and a.remaining == Epsilon(epsilon=1)
    assert a.bounds == {"mean": (0.0, 20.0)}
    assert set(a.mechanisms) == {"n", "mean"} and "geometric" in a.mechanisms["n"]
    assert a.metadata.max_rows == 4 and a.metadata.privacy_unit == "uid"
    assert "empty groups" in (a.metadata.partition_selection or "")
    console = Console(record=True, width=120)
    console.print(a)
    assert "remaining" in console.export_text()
    assert "<table" in a._repr_html_() and "remaining" in repr(a)
    s.close()


def test_budget_refusal_costs_nothing_and_says_what_is_left(ledger: Path) -> None:
    s = Session(budget=Epsilon(epsilon=1), ledger=ledger)
    s.add_table("t", _frame(), privacy_unit=ROW)
    s.sql("SELECT COUNT(*) AS n FROM t", epsilon=0.75)
    with pytest.raises(BudgetExceeded, match=r"0\.25") as info:
        s.sql("SELECT COUNT(*) AS m FROM t", epsilon=0.5)
    assert info.value.remaining == Epsilon(epsilon=0.25)
    assert s.budget.spent == Epsilon(epsilon=0.75) and len(s.budget.history) == 1
    s.close()


def test_charge_is_committed_before_noise_and_failures_after_it_release_nothing(
    ledger: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = Session(budget=Epsilon(epsilon=1), ledger=ledger)
    s.add_table("t", _frame(), privacy_unit=ROW)
    seen: list[int] = []
    real_release = session_module.release

    def spy(plan, exact, *, source):  # type: ignore[no-untyped-def]
        seen.append(len(s.budget.history))  # the charge is already durable here
        return real_release(plan, exact, source=source)

    monkeypatch.setattr(session_module, "release", spy)
    s.sql("SELECT COUNT(*) AS n FROM t", epsilon=0.25)
    assert seen == [1]

    def broken(plan, exact, *, source):  # type: ignore[no-untyped-def]
        raise InternalError("simulated bug after the charge")

    monkeypatch.setattr(session_module, "release", broken)
    with pytest.raises(InternalError):
        s.sql("SELECT COUNT(*) AS m FROM t", epsilon=0.25)
    # the charge stays (conservative), no answer is stored for it
    assert s.budget.spent == Epsilon(epsilon=0.5)
    assert s.budget.history[-1].status == "charged"
    s.close()


def test_engine_failure_costs_nothing(ledger: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from deniable.engines.duckdb import EngineError

    s = Session(budget=Epsilon(epsilon=1), ledger=ledger)
    s.add_table("t", _frame(), privacy_unit=ROW)

    def fail(binding, sql):  # type: ignore[no-untyped-def]
        raise EngineError("simulated out of memory")

    monkeypatch.setattr(s._engine, "run", fail)
    with pytest.raises(EngineError):
        s.sql("SELECT COUNT(*) AS n FROM t", epsilon=0.5)
    assert s.budget.spent == Epsilon(epsilon=0) and s.budget.history == []
    s.close()


def test_mechanisms_run_with_exactly_the_planned_events(
    ledger: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The release draws noise with the parameters of the program's events, which the
    compiler checked against the charge (once, before the commit): every mechanism call is
    one event, and together they compose to the charged loss."""
    import deniable.query.release as release_module
    from deniable.accounting.conversions import convert
    from deniable.mechanisms.events import ExponentialEvent, GeometricEvent, compose_events

    calls: list[object] = []
    real_geometric, real_exponential = release_module.geometric, release_module.exponential

    def geometric_spy(values, *, sensitivity, epsilon, source=None):  # type: ignore[no-untyped-def]
        calls.append(GeometricEvent(Fraction(sensitivity), Fraction(epsilon)))
        return real_geometric(values, sensitivity=sensitivity, epsilon=epsilon, source=source)

    def exponential_spy(scores, *, sensitivity, epsilon, source=None):  # type: ignore[no-untyped-def]
        # no GROUP BY: one partition, so each call is one event (a MEDIAN's value and its
        # interval's two endpoints are three choices, the endpoints' events alike)
        calls.append(ExponentialEvent(Fraction(sensitivity), Fraction(epsilon)))
        return real_exponential(scores, sensitivity=sensitivity, epsilon=epsilon, source=source)

    s = Session(budget=Epsilon(epsilon=1), ledger=ledger)
    s.add_table("t", _frame(), bounds={"x": (0, 20)}, privacy_unit=ROW)
    monkeypatch.setattr(release_module, "geometric", geometric_spy)
    monkeypatch.setattr(release_module, "exponential", exponential_spy)
    query = "SELECT COUNT(*) AS n, AVG(x) AS a, MEDIAN(x) AS m FROM t"
    program = s.compile(query, epsilon=0.5)
    answer = s.execute(program)
    assert sorted(map(repr, calls)) == sorted(map(repr, program.events))
    assert compose_events(calls, Epsilon) == answer.loss == convert(program.loss, Epsilon)
    s.close()


def test_cache_returns_stored_answer_at_no_cost(ledger: Path) -> None:
    s = Session(budget=Epsilon(epsilon=1), ledger=ledger, source=None)
    s.add_table("t", _frame(), bounds={"x": (0, 20)}, privacy_unit=ROW)
    a = s.sql("SELECT COUNT(*) AS n, SUM(x) AS s FROM t", epsilon=0.5)
    b = s.sql("select   count(*) as N, sum(X) as S\nfrom T", epsilon=0.5)
    assert b.cached and not a.cached and b.loss == Epsilon(epsilon=0)
    assert b.metadata.cost == Epsilon(epsilon=0.5)
    # served under the names this query asked for
    assert b.columns == ["N", "N_low", "N_high", "S", "S_low", "S_high"]
    assert b["S"].tolist() == a["s"].tolist() and b["N"].tolist() == a["n"].tolist()
    assert s.budget.spent == Epsilon(epsilon=0.5)
    # other parameters are another query
    s.sql("SELECT COUNT(*) AS n, SUM(x) AS s FROM t", epsilon=0.25)
    assert s.budget.spent == Epsilon(epsilon=0.75)
    s.close()
    # another session on the same ledger and the same data shares the cache...
    s2 = Session(budget=Epsilon(epsilon=1), ledger=ledger)
    s2.add_table("t", _frame(), bounds={"x": (0, 20)}, privacy_unit=ROW)
    c = s2.sql("SELECT COUNT(*) AS n, SUM(x) AS s FROM t", epsilon=0.5)
    assert c.cached and c["s"].tolist() == a["s"].tolist()
    s2.close()
    # ...but not after the data changed (a new data version)
    s3 = Session(budget=Epsilon(epsilon=1), ledger=ledger)
    s3.add_table("t", _frame(201), bounds={"x": (0, 20)}, privacy_unit=ROW)
    d = s3.sql("SELECT COUNT(*) AS n, SUM(x) AS s FROM t", epsilon=0.25)
    assert not d.cached and s3.budget.spent == Epsilon(epsilon=1)
    s3.close()


def test_per_query_analyst_is_charged_and_replays_can_be_private(ledger: Path) -> None:
    s = Session(budget=Epsilon(epsilon=1), ledger=ledger, analyst="owner")
    s.add_table("t", _frame(), bounds={"x": (0, 20)}, privacy_unit=ROW)
    s._ledger.set_allowance("default", "bea", Epsilon(epsilon=Fraction(3, 10)))
    q = "SELECT COUNT(*) AS n FROM t"
    program = s.compile(q, epsilon=0.25)
    a = s.execute(program, analyst="ann", share_replays=False)
    # bea asks the same question: with private replays she pays again and sees fresh noise
    b = s.execute(program, analyst="bea", share_replays=False)
    assert not b.cached and s.budget.spent == Epsilon(epsilon=Fraction(1, 2))
    # her own replay is free; ann's stored answer was never shown to her
    assert s.execute(program, analyst="bea", share_replays=False).cached
    assert [c.analyst for c in s._ledger.history("default")] == ["ann", "bea"]
    # the charge counts against the per-query analyst's allowance, not the session's
    with pytest.raises(BudgetExceeded):
        s.sql("SELECT COUNT(*) AS n FROM t WHERE x > 1", epsilon=0.25, analyst="bea")
    # shared replays (the default) serve one analyst's stored answer to anyone, free
    shared = s.compile("SELECT COUNT(*) AS n FROM t WHERE x > 2", epsilon=0.25)
    a = s.execute(shared, analyst="ann")
    c = s.execute(shared, analyst="cid")
    assert c.cached and c["n"].tolist() == a["n"].tolist()
    assert s.budget.spent == Epsilon(epsilon=Fraction(3, 4))
    with pytest.raises(InvalidParameter):
        s.execute(program, analyst="")
    s.close()


def test_null_nan_and_inf_are_handled_like_sql(ledger: Path) -> None:
    values = [1.0, None, float("nan"), float("inf"), float("-inf"), 1e308, -3.0, 5.0]
    table = pa.table(
        {
            "x": pa.array(values, type=pa.float64(), from_pandas=False),
            "i": pa.array([1, None, 3, 4, 5, 6, 7, 8], type=pa.int64()),
        }
    )
    s = Session(budget=Epsilon(epsilon=1), ledger=ledger)
    s.add_table("t", table, bounds={"x": (-2, 10), "i": (2, 5)}, privacy_unit=ROW)
    plan, _, exact = exact_aggregates(
        s,
        "SELECT COUNT(*) AS n, COUNT(x) AS c, SUM(x) AS s, SUM(i) AS si FROM t",
        not_private=True,
        epsilon=1,
    )
    n, c, sx, si = (int(exact.measures[m.id][0]) for m in plan.measures)
    assert n == 8 and c == 6  # NULL and NaN are not values
    g = 2.0 ** plan.measures[2].exponent
    # NULL and NaN add nothing (not the lower bound): 1 + 10 (inf) − 2 (−inf) + 10 (1e308)
    # − 2 (−3) + 5 = 22
    assert sx * g == 22.0
    assert si == 2 + 3 + 4 + 5 + 5 + 5 + 5  # NULL ignored, 1 → 2, 6, 7, 8 → 5
    plan, _, exact = exact_aggregates(
        s, "SELECT MEDIAN(x) AS m FROM t", not_private=True, epsilon=1, quantile_grid=12
    )
    (hist,) = exact.histograms[plan.measures[0].id].values()
    # grid of 1 on [−2, 10]: −inf, −3 → −2 (bin 0); 1 → bin 3; 5 → bin 7; inf, 1e308 → bin 12
    assert hist.tolist() == [2, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 2]
    s.close()


def test_privacy_unit_has_one_canonical_form(ledger: Path) -> None:
    composed, decomposed = "Jos\u00e9", "Jose\u0301"
    assert composed != decomposed
    assert unicodedata.normalize("NFC", decomposed) == composed
    assert canonical_unit(decomposed) == canonical_unit(composed)
    df = pd.DataFrame({"who": [composed, decomposed, "José ", "jose", composed], "x": [1.0] * 5})
    s = Session(budget=Epsilon(epsilon=1), ledger=ledger)
    s.add_table("t", df, privacy_unit="who", max_rows=1, max_groups=1)
    _, _, exact = exact_aggregates(
        s, "SELECT COUNT(DISTINCT who) AS u, COUNT(*) AS n FROM t", not_private=True, epsilon=1
    )
    # José (two spellings, three rows) is one person; "José " and "jose" are others.
    assert exact.units.tolist() == [3]
    assert [int(v[0]) for v in exact.measures.values()] == [3, 3]  # one row each kept
    s.close()


def test_public_keys_filter_rows_outside_the_domain(ledger: Path) -> None:
    s = Session(budget=Epsilon(epsilon=1), ledger=ledger)
    s.add_table("t", _frame(), public_keys={"k": ["a", "zz"]}, privacy_unit=ROW)
    _, _, exact = exact_aggregates(
        s, "SELECT k, COUNT(*) AS n FROM t GROUP BY k", not_private=True, epsilon=1
    )
    assert exact.keys == [("a",)]
    a = s.sql("SELECT k, COUNT(*) AS n FROM t GROUP BY k", epsilon=1)
    assert sorted(a["k"]) == ["a", "zz"]
    s.close()


def test_order_limit_offset_are_post_processing(ledger: Path) -> None:
    s = Session(budget=Epsilon(epsilon=10), ledger=ledger)
    s.add_table("t", _frame(), public_keys={"k": ["a", "b", "c"]}, privacy_unit=ROW)
    a = s.sql("SELECT COUNT(*) AS n FROM t GROUP BY k ORDER BY k DESC LIMIT 2 OFFSET 0", epsilon=5)
    assert a.columns == ["n", "n_low", "n_high"] and len(a) == 2
    b = s.sql("SELECT k, COUNT(*) AS n FROM t GROUP BY k ORDER BY n LIMIT 1 OFFSET 1", epsilon=1)
    assert len(b) == 1
    s.close()


def test_rho_budget_and_pure_budget_rules(ledger: Path, tmp_path: Path) -> None:
    s = Session(budget=Rho(rho=1), ledger=ledger)
    s.add_table(
        "t", _frame(), bounds={"x": (0, 20)}, public_keys={"k": ["a", "b", "c"]}, privacy_unit=ROW
    )
    a = s.sql("SELECT k, COUNT(*) AS n, AVG(x) AS m, MEDIAN(x) AS med FROM t GROUP BY k", rho=0.5)
    assert "discrete_gaussian" in a.mechanisms["n"]
    assert isinstance(a.loss, Rho) and a.loss.rho <= 0.5
    with pytest.raises(InvalidParameter, match="rho"):
        s.sql("SELECT COUNT(*) AS n FROM t", epsilon=0.1)
    s.close()
    p = Session(budget=Epsilon(epsilon=1), ledger=tmp_path / "pure.db")
    p.add_table("t", _frame(), privacy_unit=ROW)
    with pytest.raises(UnsafeQuery, match="partition selection"):
        p.sql("SELECT k, COUNT(*) AS n FROM t GROUP BY k", epsilon=0.5)
    with pytest.raises(InvalidParameter, match="pure"):
        p.sql("SELECT k, COUNT(*) AS n FROM t GROUP BY k", epsilon=0.5, delta=1e-6)
    assert p.budget.spent == Epsilon(epsilon=0)
    p.close()


def test_private_keys_with_approximate_budget(ledger: Path) -> None:
    s = Session(budget=EpsilonDelta(epsilon=5, delta=1e-5), ledger=ledger)
    df = pd.DataFrame({"uid": range(3000), "k": ["big"] * 2999 + ["lonely"]})
    s.add_table("t", df, privacy_unit="uid", max_groups=1, max_rows=1)
    a = s.sql("SELECT k, COUNT(*) AS n FROM t GROUP BY k", epsilon=1, delta=1e-6)
    assert a["k"].tolist() == ["big"]  # kept w.p. 1; the lonely key w.p. 1e-6
    assert a.loss == EpsilonDelta(epsilon=1, delta=1e-6)
    assert "Desfontaines" in (a.metadata.partition_selection or "")
    s.close()


def test_release_path_uses_the_secure_source_by_default(
    ledger: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = {"n": 0}
    real = source_module.SecureRandom.words

    def counting(self, n):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        return real(self, n)

    monkeypatch.setattr(source_module.SecureRandom, "words", counting)
    s = Session(budget=Epsilon(epsilon=1), ledger=ledger)
    s.add_table("t", _frame(), privacy_unit=ROW)
    s.sql("SELECT COUNT(*) AS n FROM t", epsilon=0.5)
    assert calls["n"] >= 2  # the bounding secrets and the noise
    s.close()


def test_seeded_source_warns_and_reproduces(tmp_path: Path) -> None:
    answers = []
    for i in range(2):
        with pytest.warns(PrivacyWarning):
            s = Session(
                budget=Epsilon(epsilon=1), ledger=tmp_path / f"{i}.db", source=SeededRandom(3)
            )
        s.add_table("t", _frame(), bounds={"x": (0, 20)}, privacy_unit=ROW)
        answers.append(s.sql("SELECT SUM(x) AS s FROM t", epsilon=1)["s"].tolist())
        s.close()
    assert answers[0] == answers[1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Session(budget=Epsilon(epsilon=1), ledger=tmp_path / "secure.db").close()


def test_explain_shows_plan_and_sql_without_cost(ledger: Path) -> None:
    s = Session(budget=Epsilon(epsilon=1), ledger=ledger)
    s.add_table(
        "t",
        _frame(),
        privacy_unit="uid",
        bounds={"x": (0, 20)},
        public_keys={"k": ["a", "b", "c"]},
        max_groups=1,
        max_rows=1,
    )
    text = s.explain("SELECT k, SUM(x) AS s FROM t GROUP BY k", epsilon=1)
    assert '"max_rows": 1' in text and "WITH __l1 AS" in text
    assert s.budget.spent == Epsilon(epsilon=0)
    s.close()


def test_no_numpy_random_on_the_release_path(monkeypatch: pytest.MonkeyPatch, ledger: Path) -> None:
    def forbidden(*a, **k):  # type: ignore[no-untyped-def]
        raise AssertionError("numpy.random used on the release path")

    s = Session(budget=Epsilon(epsilon=1), ledger=ledger)
    s.add_table(
        "t", _frame(), bounds={"x": (0, 20)}, public_keys={"k": ["a", "b", "c"]}, privacy_unit=ROW
    )
    monkeypatch.setattr(np.random, "default_rng", forbidden)
    monkeypatch.setattr(np.random, "random", forbidden)
    s.sql("SELECT k, COUNT(*) AS n, AVG(x) AS m, MEDIAN(x) AS md FROM t GROUP BY k", epsilon=1)
    s.close()


def test_row_policies_are_stated_as_policy_never_as_counts(tmp_path: Path) -> None:
    """The answer says which rules applied to rows; the text is the same on neighbouring data
    (here: with and without rows whose unit is NULL), so it reveals nothing."""
    texts = []
    for nulls in (0, 7):
        frame = pd.DataFrame(
            {
                "u": pd.array([1, 2, 3] + [None] * nulls, dtype="Int64"),
                "x": [1.0, 2.0, 3.0] + [4.0] * nulls,
            }
        )
        s = Session(budget=Epsilon(epsilon=1), ledger=tmp_path / f"l{nulls}.db")
        s.add_table("t", frame, privacy_unit="u", bounds={"x": (0, 5)}, max_rows=2, max_groups=1)
        answer = s.sql("SELECT SUM(x) AS s FROM t WHERE x > 1", epsilon=0.5)
        texts.append(answer.metadata.row_policies)
        s.close()
    assert texts[0] == texts[1]
    joined = " ".join(texts[0])
    assert "NULL" in joined and "at most 2 row(s)" in joined and "[0, 5]" in joined


def test_join_across_connections_is_refused_clearly(tmp_path: Path) -> None:
    """A table of the caller's DuckDB connection cannot join a public table copied into the
    engine: the refusal says why, before anything is charged."""
    import duckdb

    from deniable.errors import InvalidParameter

    con = duckdb.connect()
    con.execute("CREATE TABLE ev AS SELECT i % 7 AS u, i % 3 AS k FROM range(100) t(i)")
    s = Session(budget=Epsilon(epsilon=1), ledger=tmp_path / "l.db")
    s.add_table("ev", con, privacy_unit="u", max_groups=1, max_rows=1)
    s.add_public_table("ks", pd.DataFrame({"k": [0, 1, 2], "label": ["a", "b", "c"]}))
    with pytest.raises(InvalidParameter, match="different databases"):
        s.sql(
            "SELECT ks.label, COUNT(*) AS n FROM ev JOIN ks ON ev.k = ks.k GROUP BY ks.label",
            epsilon=0.5,
        )
    assert s.budget.history == []
    s.add_table(
        "ev2", pd.DataFrame({"u": [1, 2], "k": [0, 1]}), privacy_unit="u", max_groups=1, max_rows=1
    )
    answer = s.sql(
        "SELECT ks.label, COUNT(*) AS n FROM ev2 JOIN ks ON ev2.k = ks.k GROUP BY ks.label",
        epsilon=0.5,
    )
    assert list(answer["label"]) == ["a", "b", "c"]
    s.close()
    con.close()


def test_cache_key_covers_the_joined_tables(tmp_path: Path) -> None:
    """The same join text over other data in a joined table is another question."""
    ledger = tmp_path / "l.db"
    answers = []
    for weight in (1.0, 2.0):
        s = Session(budget=Epsilon(epsilon=5), ledger=ledger)
        s.add_table(
            "a",
            pd.DataFrame({"u": [1, 2, 3], "k": ["x", "y", "x"]}),
            privacy_unit="u",
            public_keys={"k": ["x", "y"]},
            max_groups=1,
            max_rows=1,
        )
        s.add_table(
            "b",
            pd.DataFrame({"u": [1, 2, 3], "w": [weight] * 3}),
            privacy_unit="u",
            bounds={"w": (0, 5)},
            max_groups=1,
            max_rows=1,
        )
        answers.append(
            s.sql("SELECT a.k, SUM(b.w) AS s FROM a JOIN b ON a.u = b.u GROUP BY a.k", epsilon=0.5)
        )
        s.close()
    assert not answers[0].cached and not answers[1].cached
