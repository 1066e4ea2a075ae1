"""Session.anonymize: safe k-anonymization of a registered table, charged to the ledger."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

import deniable.curator.publish as publish
from deniable import ROW
from deniable.accounting.loss import EpsilonDelta
from deniable.anonymize import UnknownColumn
from deniable.curator.session import Session
from deniable.errors import BudgetExceeded, InvalidParameter

RECODING = {
    "columns": {
        "age": {"type": "interval", "lower": 0, "upper": 120, "widths": [10, 20], "level": 2},
        "zip": {"type": "prefix", "length": 5, "keep": [3, 1], "level": 1},
    }
}


def _people(n: int = 3000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "person": [f"p{i}" for i in range(n)],
            "age": rng.integers(0, 100, n),
            "zip": rng.choice(["02139", "02138", "47906", "10001"], n),
        }
    )


def _session(tmp_path: Path, frame: pd.DataFrame, unit: object = "person") -> Session:
    tmp_path.mkdir(parents=True, exist_ok=True)
    s = Session(budget=EpsilonDelta(epsilon=10, delta=1e-2), ledger=tmp_path / "a.db")
    if unit is ROW:
        s.add_table("people", frame, privacy_unit=ROW)
    else:
        s.add_table("people", frame, privacy_unit="person", max_groups=1, max_rows=1)
    return s


def test_the_release_is_charged_once_with_its_guarantee(tmp_path: Path) -> None:
    s = _session(tmp_path, _people())
    result = s.anonymize("people", RECODING, k=10, beta=0.5, epsilon=2.0)
    assert s.budget.spent == result.guarantee.loss()
    (charge,) = s.budget.history
    assert charge.details["kind"] == "safe k-anonymization"
    assert charge.details["unit"] == "person"
    published = result.to_arrow().to_pandas()
    assert len(published) > 0 and set(published.columns) == {"age", "zip"}
    assert published.groupby(["age", "zip"]).size().min() >= 10  # k-anonymous


def test_a_person_with_many_rows_is_protected_under_a_unit(tmp_path: Path) -> None:
    """Person p0's 60 identical rows (age 115, a combination nobody else has) pass k = 10
    at β = 0.5, ε = 2, under row-level protection (at least 10 of 60 sampled with probability
    1 − P[Bin(60, 0.5) < 10] > 1 − 1e-7), and never under the unit (one row a person)."""
    frame = _people()
    heavy = pd.DataFrame({"person": "p0", "age": 115, "zip": "99999"}, index=range(60))
    frame = pd.concat([frame, heavy], ignore_index=True)
    rows = _session(tmp_path / "r", frame, unit=ROW)
    per_row = rows.anonymize("people", RECODING, k=10, beta=0.5, epsilon=2.0)
    assert (per_row.to_arrow().to_pandas()["age"] == "[100, 120)").sum() >= 10
    people = _session(tmp_path / "p", frame)
    per_person = people.anonymize("people", RECODING, k=10, beta=0.5, epsilon=2.0)
    assert (per_person.to_arrow().to_pandas()["age"] == "[100, 120)").sum() == 0


def test_refusals_come_before_the_engine_and_spend_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = _session(tmp_path, _people(500))

    def boom(*_: object, **__: object) -> None:
        raise AssertionError("the toolkit ran before the refusal")

    monkeypatch.setattr(publish, "strongly_safe", boom)
    with pytest.raises(BudgetExceeded, match="nothing was spent"):
        s.anonymize("people", RECODING, k=10, beta=0.5, epsilon=11.0)
    with pytest.raises(InvalidParameter, match="k must be"):
        s.anonymize("people", RECODING, k=1, beta=0.5, epsilon=2.0)
    monkeypatch.undo()
    bad = {"columns": {**RECODING["columns"], "income": {"type": "identity", "level": 0}}}
    with pytest.raises(UnknownColumn, match="income"):
        s.anonymize("people", bad, k=10, beta=0.5, epsilon=2.0)
    assert list(s.budget.history) == []


def test_a_relation_bound_table_is_refused_with_a_way_out(tmp_path: Path) -> None:
    con = duckdb.connect()
    rel = con.from_df(_people(100))
    s = Session(budget=EpsilonDelta(epsilon=10, delta=1e-2), ledger=tmp_path / "rel.db")
    s.add_table("people", rel, privacy_unit="person", max_groups=1, max_rows=1)
    with pytest.raises(InvalidParameter, match="register it from a file, a data frame"):
        s.anonymize("people", RECODING, k=10, beta=0.5, epsilon=2.0)
    assert list(s.budget.history) == []
