"""``deniable synth``: writes the synthetic rows, charges once, refuses before spending."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from deniable.cli.main import main
from deniable.ledger import Ledger


@pytest.fixture
def people(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    n = 2000
    frame = pd.DataFrame(
        {
            "id": rng.integers(0, 700, n),
            "age": rng.integers(0, 100, n),
            "sex": rng.choice(["F", "M"], n),
            "income": rng.normal(50, 10, n),
        }
    )
    path = tmp_path / "people.csv"
    frame.to_csv(path, index=False)
    return path


BASE = ["--unit", "id", "--max-rows", "2", "--bounds", "age=0:99", "--keys", "sex=F,M"]


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_synth_writes_rows_and_charges_once(people: Path, tmp_path: Path, suffix: str) -> None:
    out, ledger = tmp_path / f"s{suffix}", tmp_path / "p.ledger"
    args = ["synth", "--data", str(people), *BASE, "--bounds", "income=0:100"]
    args += ["--epsilon", "1", "--delta", "1e-6", "--method", "mst", "--rows", "300"]
    args += ["--out", str(out), "--ledger", str(ledger), "--budget", "3"]
    args += ["--budget-delta", "1e-5", "--json", "--utility"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["rows"] == 300 and doc["utility_non_private"]
    frame = pd.read_csv(out) if suffix == ".csv" else pd.read_parquet(out)
    assert list(frame.columns) == ["age", "sex", "income"] and len(frame) == 300
    with Ledger(ledger) as opened:
        history = opened.history("people")
    assert len(history) == 1 and cast(Any, history[0].details["synth"])["method"] == "mst"


def test_synth_refuses_an_unbounded_column_without_spending(people: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "p.ledger"
    args = ["synth", "--data", str(people), *BASE, "--epsilon", "1", "--delta", "1e-6"]
    args += ["--out", str(tmp_path / "s.csv"), "--ledger", str(ledger), "--budget", "3"]
    args += ["--budget-delta", "1e-5"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 5 and "'income' has no declared bounds" in result.output
    assert not (tmp_path / "s.csv").exists()
    with Ledger(ledger) as opened:
        assert opened.history("people") == []


def test_synth_needs_max_rows_with_a_unit_column(people: Path, tmp_path: Path) -> None:
    args = ["synth", "--data", str(people), "--unit", "id", "--epsilon", "1"]
    args += ["--delta", "1e-6", "--out", str(tmp_path / "s.csv"), "--ledger", str(tmp_path / "l")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code != 0 and "--max-rows" in result.output


def test_synth_measures_quantile_bins_and_keys_in_the_release(people: Path, tmp_path: Path) -> None:
    """``--quantiles`` (no declared bounds: a public search range) and ``--select-keys``
    (no declared keys): one charge of (ε, δ), the domain's measurements among the events."""
    out, ledger = tmp_path / "s.csv", tmp_path / "p.ledger"
    args = ["synth", "--data", str(people), "--unit", "id", "--max-rows", "2"]
    args += ["--quantiles", "income=4:0:100", "--quantiles", "age=3:0:99:log"]
    args += ["--select-keys", "sex=5", "--epsilon", "2", "--delta", "1e-6", "--method", "mst"]
    args += ["--rows", "200", "--out", str(out), "--ledger", str(ledger), "--budget", "3"]
    args += ["--budget-delta", "1e-5", "--json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    kinds = [m["kind"] for m in doc["measurements"]]
    assert kinds[:3] == ["bins", "keys", "bins"], kinds  # column order: age, sex, income
    assert "2" in doc["charged"] and "1e-06" in doc["charged"], doc["charged"]
    frame = pd.read_csv(out)
    assert list(frame.columns) == ["age", "sex", "income"] and len(frame) == 200
    assert set(frame["sex"].dropna()) <= {"F", "M"}
    with Ledger(ledger) as opened:
        (charge,) = opened.history("people")
    assert cast(Any, charge.details["synth"])["domain"]["selection_columns"] == ["sex"]
    bad = CliRunner().invoke(main, [*args[:6], "--quantiles", "income=4:0", *args[8:]])
    assert bad.exit_code != 0 and "--quantiles" in bad.output
