"""Tables registered with ``sample_rate``: the sample is drawn per privacy unit in the engine,
queries run on it, and the ledger is charged the amplified increments (Li–Qardaji–Su Thm 1)."""

from __future__ import annotations

import math
import unicodedata
from fractions import Fraction
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy import stats

from deniable import ROW
from deniable.accounting.amplification import amplify_bernoulli
from deniable.accounting.loss import Epsilon, EpsilonDelta, Rho
from deniable.curator.session import Session
from deniable.errors import BudgetExceeded, InvalidParameter
from deniable.query.catalog import canonical_unit


def _users(n_users: int = 2000, rows: int = 3) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "uid": np.repeat([f"u{i}" for i in range(n_users)], rows),
            "k": np.tile(["a", "b", "c"], n_users * rows // 3 + 1)[: n_users * rows],
            "x": np.linspace(0, 100, n_users * rows),
        }
    )


def _sample_rows(s: Session, table: str) -> pd.DataFrame:
    """The materialised sample (test-only access to the engine)."""
    binding = s._bindings[table]
    con = s._engine.connection  # type: ignore[attr-defined]
    return con.execute(f'SELECT * FROM "{binding.name}"').df()


def test_charges_add_up_to_the_amplified_total(tmp_path: Path) -> None:
    beta = Fraction(1, 10)
    s = Session(budget=Epsilon(epsilon=10), ledger=tmp_path / "l.db")
    s.add_table(
        "t",
        _users(),
        privacy_unit="uid",
        max_groups=3,
        public_keys={"k": ["a", "b", "c"]},
        sample_rate=0.1,
        max_rows=1,
    )
    asked = [Fraction(1), Fraction(1, 2), Fraction(2)]
    queries = [
        "SELECT COUNT(*) AS n FROM t",
        "SELECT k, COUNT(*) AS n FROM t GROUP BY k",
        "SELECT COUNT(DISTINCT uid) AS n FROM t",
    ]
    charged = []
    for q, eps in zip(queries, asked, strict=True):
        a = s.sql(q, epsilon=eps)
        assert a.metadata.sample_rate == 0.1
        assert a.metadata.loss_on_sample == Epsilon(epsilon=eps)
        charged.append(a.loss.epsilon)  # type: ignore[union-attr]
        # Each charge is the increment of the amplified composition.
        total = amplify_bernoulli(Epsilon(epsilon=sum(asked[: len(charged)])), beta)
        assert sum(charged) == total.epsilon
        assert s.budget.spent == Epsilon(epsilon=total.epsilon)
    # Amplification is not additive: charging each its own amplified loss under-counts.
    separately = sum(amplify_bernoulli(Epsilon(epsilon=e), beta).epsilon for e in asked)
    assert sum(charged) > separately
    assert math.isclose(float(sum(charged)), math.log1p(0.1 * math.expm1(3.5)), rel_tol=1e-9)
    s.close()


def test_delta_is_amplified_too(tmp_path: Path) -> None:
    s = Session(budget=EpsilonDelta(epsilon=5, delta=1e-3), ledger=tmp_path / "l.db")
    s.add_table("t", _users(), privacy_unit="uid", max_groups=3, sample_rate=0.25, max_rows=1)
    a = s.sql("SELECT k, COUNT(*) AS n FROM t GROUP BY k", epsilon=1, delta=1e-4)
    assert a.metadata.partition_selection is not None
    assert a.metadata.loss_on_sample == EpsilonDelta(epsilon=1, delta=Fraction(1, 10_000))
    assert a.loss == amplify_bernoulli(
        EpsilonDelta(epsilon=1, delta=Fraction(1, 10_000)), Fraction(1, 4)
    )
    assert a.loss.delta == Fraction(1, 40_000)  # type: ignore[union-attr]
    s.close()


def test_budget_refusal_uses_the_amplified_cost_and_records_nothing(tmp_path: Path) -> None:
    beta = Fraction(1, 10)
    s = Session(budget=Epsilon(epsilon=Fraction(3, 10)), ledger=tmp_path / "l.db")
    s.add_table("t", _users(), privacy_unit="uid", sample_rate=beta, max_groups=1, max_rows=1)
    # ε = 1 on the sample costs 0.1586 < 0.3: fits although 1 > 0.3.
    s.sql("SELECT COUNT(*) AS n FROM t", epsilon=1)
    # A second ε = 1 costs amplify(2) − amplify(1) = 0.3355 > 0.1414 left: refused.
    with pytest.raises(BudgetExceeded) as info:
        s.sql("SELECT COUNT(DISTINCT uid) AS n FROM t", epsilon=1)
    assert info.value.remaining == s.budget.remaining
    # The refused query left the sample's account alone: the next charge is the increment
    # from amplify(1), not from amplify(2).
    a = s.sql("SELECT COUNT(DISTINCT uid) AS n FROM t", epsilon=Fraction(1, 10))
    expected = (
        amplify_bernoulli(Epsilon(epsilon=Fraction(11, 10)), beta).epsilon
        - amplify_bernoulli(Epsilon(epsilon=1), beta).epsilon
    )
    assert a.loss == Epsilon(epsilon=expected)
    assert len(s.budget.history) == 2
    s.close()


def test_identical_query_on_the_same_sample_is_free(tmp_path: Path) -> None:
    s = Session(budget=Epsilon(epsilon=5), ledger=tmp_path / "l.db")
    s.add_table("t", _users(), privacy_unit="uid", sample_rate=0.5, max_groups=1, max_rows=1)
    first = s.sql("SELECT COUNT(*) AS n FROM t", epsilon=1)
    again = s.sql("SELECT COUNT(*) AS n FROM t", epsilon=1)
    assert again.cached and again.loss == Epsilon(epsilon=0)
    assert again["n"].tolist() == first["n"].tolist()
    assert again.metadata.sample_rate == 0.5
    assert again.metadata.loss_on_sample == Epsilon(epsilon=1)
    s.close()
    # A new session draws a new sample: the stored answer (about another sample) is not
    # served for it, and the new sample's account starts from zero.
    s2 = Session(budget=Epsilon(epsilon=5), ledger=tmp_path / "l.db")
    s2.add_table("t", _users(), privacy_unit="uid", sample_rate=0.5, max_groups=1, max_rows=1)
    fresh = s2.sql("SELECT COUNT(*) AS n FROM t", epsilon=1)
    assert not fresh.cached
    assert fresh.loss == first.loss
    s2.close()


def test_whole_privacy_units_are_kept_or_dropped(tmp_path: Path) -> None:
    # Each person has rows written with composed and decomposed accents: one canonical unit.
    names = [f"Jos\u00e9 {i}" for i in range(1500)]
    rows = []
    for i, name in enumerate(names):
        for j in range(4):
            form = "NFC" if j % 2 == 0 else "NFD"
            rows.append((unicodedata.normalize(form, name), j, float(i)))
    df = pd.DataFrame(rows, columns=["person", "j", "x"])
    s = Session(budget=Epsilon(epsilon=1), ledger=tmp_path / "l.db")
    s.add_table("t", df, privacy_unit="person", sample_rate=0.5, max_groups=1, max_rows=1)
    sample = _sample_rows(s, "t")
    per_unit = sample.groupby(sample["person"].map(canonical_unit)).size()
    assert set(per_unit.tolist()) == {4}  # every kept person keeps all 4 rows
    kept = len(per_unit)
    # Binomial(1500, 1/2): outside [640, 860] with probability < 1e-7.
    assert stats.binom.cdf(639, 1500, 0.5) + stats.binom.sf(860, 1500, 0.5) < 1e-7
    assert 640 <= kept <= 860
    s.close()


@pytest.mark.parametrize("beta", [Fraction(1, 10), Fraction(7, 10)])
def test_the_share_of_units_kept_is_beta(tmp_path: Path, beta: Fraction) -> None:
    n_users = 20_000
    s = Session(budget=Epsilon(epsilon=1), ledger=tmp_path / "l.db")
    s.add_table(
        "t", _users(n_users, rows=1), privacy_unit="uid", sample_rate=beta, max_groups=1, max_rows=1
    )
    kept = len(_sample_rows(s, "t"))
    # Two-sided binomial acceptance region at total probability < 1e-7.
    lo = int(stats.binom.ppf(5e-8, n_users, float(beta)))
    hi = int(stats.binom.isf(5e-8, n_users, float(beta)))
    assert lo <= kept <= hi, (kept, lo, hi)
    s.close()


def test_row_level_tables_sample_rows(tmp_path: Path) -> None:
    df = _users(10_000, rows=1)
    pq.write_table(pa.Table.from_pandas(df), tmp_path / "t.parquet")
    s = Session(budget=Epsilon(epsilon=1), ledger=tmp_path / "l.db")
    s.add_table("t", tmp_path / "t.parquet", sample_rate=0.3, privacy_unit=ROW)
    kept = len(_sample_rows(s, "t"))
    lo, hi = stats.binom.ppf(5e-8, 10_000, 0.3), stats.binom.isf(5e-8, 10_000, 0.3)
    assert lo <= kept <= hi
    a = s.sql("SELECT COUNT(*) AS n FROM t", epsilon=1)
    assert abs(a["n"][0] - kept) < 60  # discrete Laplace at ε = 1: P[|Z| ≥ 60] < 1e-25
    s.close()


def test_sources_outside_the_engine_are_sampled_inside_it(tmp_path: Path) -> None:
    df = _users(3000, rows=2)
    con = duckdb.connect()
    con.register("src", df)
    con.execute("CREATE TABLE people AS SELECT * FROM src")
    relation = con.sql("SELECT * FROM people")
    s = Session(budget=Epsilon(epsilon=1), ledger=tmp_path / "l.db")
    s.add_table("people", con, privacy_unit="uid", sample_rate=0.5, max_groups=1, max_rows=1)
    s.add_table("rel", relation, privacy_unit="uid", sample_rate=0.5, max_groups=1, max_rows=1)
    for table in ("people", "rel"):
        sample = _sample_rows(s, table)
        assert set(sample.groupby("uid").size().tolist()) == {2}
        assert 1200 <= sample["uid"].nunique() <= 1800  # Binomial(3000, ½): P(outside) < 1e-27
    # Nothing was created in the caller's connection.
    assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE temporary").fetchone() == (0,)
    s.close()
    con.close()


def test_independent_samples_per_session(tmp_path: Path) -> None:
    kept = []
    for i in range(2):
        s = Session(budget=Epsilon(epsilon=1), ledger=tmp_path / f"l{i}.db")
        s.add_table(
            "t", _users(2000, rows=1), privacy_unit="uid", sample_rate=0.5, max_groups=1, max_rows=1
        )
        kept.append(set(_sample_rows(s, "t")["uid"]))
        s.close()
    assert kept[0] != kept[1]  # equal with probability 2^-2000


@pytest.mark.parametrize("rate", [0, -0.1, 1.5, float("nan"), "0.5"])
def test_bad_rates_are_refused(tmp_path: Path, rate: object) -> None:
    s = Session(budget=Epsilon(epsilon=1), ledger=tmp_path / "l.db")
    with pytest.raises(InvalidParameter):
        s.add_table("t", _users(10), privacy_unit="uid", sample_rate=rate, max_groups=1, max_rows=1)  # type: ignore[arg-type]
    assert "t" not in s.tables
    s.close()


def test_zcdp_budgets_refuse_sampling(tmp_path: Path) -> None:
    s = Session(budget=Rho(rho=1), ledger=tmp_path / "l.db")
    with pytest.raises(InvalidParameter, match="Epsilon or EpsilonDelta"):
        s.add_table("t", _users(10), privacy_unit="uid", sample_rate=0.5, max_groups=1, max_rows=1)
    s.close()


def test_rate_one_costs_the_plain_loss(tmp_path: Path) -> None:
    s = Session(budget=Epsilon(epsilon=1), ledger=tmp_path / "l.db")
    s.add_table("t", _users(100), privacy_unit="uid", sample_rate=1, max_groups=1, max_rows=1)
    a = s.sql("SELECT COUNT(*) AS n FROM t", epsilon=Fraction(1, 2))
    assert a.loss == Epsilon(epsilon=Fraction(1, 2))
    assert len(_sample_rows(s, "t")) == 300
    s.close()


def test_stored_answer_keeps_the_sampling_metadata(tmp_path: Path) -> None:
    s = Session(budget=Epsilon(epsilon=1), ledger=tmp_path / "l.db")
    s.add_table("t", _users(100), privacy_unit="uid", sample_rate=0.2, max_groups=1, max_rows=1)
    a = s.sql("SELECT COUNT(*) AS n FROM t", epsilon=Fraction(1, 2))
    assert "0.2 sample" in a.summary()
    entry = s.budget.history[-1]
    assert entry.details["sampling"]["rate"] == "1/5"
    s.close()
