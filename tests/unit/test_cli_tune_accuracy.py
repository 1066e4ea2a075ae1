"""``deniable accuracy`` and ``deniable tune`` (issue 21 §2–3): the CLI surfaces."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from deniable.cli.main import main
from deniable.ledger import Ledger


@pytest.fixture
def visits(tmp_path: Path) -> Path:
    rng = np.random.default_rng(3)
    rows = []
    for p in range(2000):
        for _ in range(1 + int(rng.integers(0, 6))):
            rows.append((p, f"d{int(rng.integers(0, 4))}"))
    path = tmp_path / "visits.csv"
    pd.DataFrame(rows, columns=["patient_id", "dept"]).to_csv(path, index=False)
    return path


UNIT = ["--unit", "patient_id", "--max-groups", "2", "--max-rows", "3"]
SQL = "SELECT dept, COUNT(*) AS n FROM visits GROUP BY dept"
KEYS = ["--keys", "dept=d0,d1,d2,d3"]


def test_accuracy_prints_widths_and_charges_nothing(visits: Path) -> None:
    r = CliRunner().invoke(
        main, ["accuracy", SQL, "--data", str(visits), *UNIT, *KEYS, "--epsilon", "0.5", "--json"]
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    [n] = doc["outputs"]
    assert n["output"] == "n" and n["half_width"] > 0 and doc["charged"] is None
    text = CliRunner().invoke(main, ["accuracy", SQL, "--data", str(visits), *UNIT, *KEYS,
                                     "--epsilon", "0.5"])  # fmt: skip
    assert text.exit_code == 0 and "covers the value after bounding" in text.output


def test_accuracy_target_gives_the_least_epsilon(visits: Path) -> None:
    r = CliRunner().invoke(
        main, ["accuracy", SQL, "--data", str(visits), *UNIT, *KEYS, "--target", "n=25", "--json"]
    )
    assert r.exit_code == 0, r.output
    eps = float(Fraction(json.loads(r.output)["least_loss"]["epsilon"]))
    check = CliRunner().invoke(main, ["accuracy", SQL, "--data", str(visits), *UNIT, *KEYS,
                                      "--epsilon", str(eps), "--json"])  # fmt: skip
    assert json.loads(check.output)["outputs"][0]["half_width"] <= 25


def test_accuracy_needs_a_unit_and_a_loss(visits: Path) -> None:
    r = CliRunner().invoke(main, ["accuracy", SQL, "--data", str(visits), "--epsilon", "1"])
    assert r.exit_code == 2 and "--unit" in r.output
    r = CliRunner().invoke(main, ["accuracy", SQL, "--data", str(visits), *UNIT, *KEYS])
    assert r.exit_code == 2 and "--epsilon" in r.output
    r = CliRunner().invoke(main, ["accuracy", SQL, "--data", str(visits), *UNIT, *KEYS,
                                  "--target", "n=-1"])  # fmt: skip
    assert r.exit_code == 2 and "positive half-width" in r.output


def test_tune_charges_the_ledger_and_proposes(visits: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "v.ledger"
    args = ["tune", "--data", str(visits), "--unit", "patient_id", "--group-by", "dept",
            "--groups", "4", "--epsilon", "0.3", "--ledger", str(ledger), "--budget", "3"]  # fmt: skip
    plot = tmp_path / "trade-off.png"
    r = CliRunner().invoke(main, [*args, "--json", "--plot", str(plot)])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["charged"]["epsilon"] == "3/10" and len(doc["candidates"]) == 10
    assert {"max_groups", "max_rows"} <= set(doc["best"])
    assert plot.exists() and plot.stat().st_size > 1000
    with Ledger(ledger) as led:
        [charge] = led.history("visits")
        assert "contribution histograms" in charge.query_text


def test_tune_non_private_is_labelled_and_free(visits: Path, tmp_path: Path) -> None:
    args = ["tune", "--data", str(visits), "--unit", "patient_id", "--group-by", "dept",
            "--non-private"]  # fmt: skip
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert r.output.startswith("NON-PRIVATE")
    doc = json.loads(CliRunner().invoke(main, [*args, "--json"]).output)
    assert doc["non_private"] is True and doc["rows"] > 2000
    refused = CliRunner().invoke(main, [*args, "--epsilon", "1"])
    assert refused.exit_code == 2 and "spends nothing" in refused.output
