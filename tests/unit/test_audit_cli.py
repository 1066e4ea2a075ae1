"""``deniable audit``: neighbouring datasets from a file, the bound, the verdict, --json."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from click.testing import CliRunner

from deniable.cli.main import main


def _data(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)  # test data only
    rows = [
        (f"u{u}", ["a", "b", "c"][int(rng.integers(0, 3))], float(rng.uniform(0, 100)))
        for u in range(80)
        for _ in range(int(rng.integers(1, 4)))
    ]
    rows += [("heavy", k, 1e6) for k in "abc" for _ in range(10)]
    path = tmp_path / "visits.csv"
    pd.DataFrame(rows, columns=["uid", "k", "x"]).to_csv(path, index=False)
    return path


def _args(path: Path, *extra: str) -> list[str]:
    return [
        "audit",
        "--data",
        str(path),
        "--unit",
        "uid",
        "--bounds",
        "x=0:100",
        "--keys",
        "k=a,b,c",
        "--max-groups",
        "2",
        "--max-rows",
        "1",
        "--query",
        "SELECT k, COUNT(*) AS n, SUM(x) AS s FROM visits GROUP BY k",
        "--epsilon",
        "1",
        "--trials",
        "5000",
        *extra,
    ]


def test_audit_prints_bound_and_passing_verdict(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, _args(_data(tmp_path)))
    assert result.exit_code == 0, result.output
    assert "lower confidence bound" in result.output
    assert "heaviest unit removed" in result.output and "random unit removed" in result.output
    assert "verdict: PASS" in result.output
    assert "heavy" not in result.output.replace("heaviest", "")  # no unit values shown


def test_audit_json(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, _args(_data(tmp_path), "--json"))
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["verdict"] == "pass" and doc["claimed_epsilon"] == 1.0
    assert 0 <= doc["lower_bound"] <= 1.0 and doc["confidence"] == 1 - 1e-7
    assert [p["pair"] for p in doc["pairs"]] == ["heaviest unit removed", "random unit removed"]
    assert doc["max_groups"] == 2


def test_audit_usage_errors_exit_2(tmp_path: Path) -> None:
    path = _data(tmp_path)
    runner = CliRunner()
    no_unit = [a for a in _args(path) if a not in ("--unit", "uid")]
    assert runner.invoke(main, no_unit).exit_code == 2
    assert runner.invoke(main, ["audit", "--query", "SELECT 1", "--epsilon", "1"]).exit_code == 2
    no_eps = [*_args(path)[:-4], "--trials", "5000"]
    assert runner.invoke(main, no_eps).exit_code == 2
