"""``deniable anonymize`` end to end on generated CSV/Parquet files."""

from __future__ import annotations

import csv
import random
import subprocess
import sys
from pathlib import Path

import duckdb
import pandas as pd
import pytest
from click.testing import CliRunner

from deniable.cli.main import main

RECODING = """\
columns:
  age: {type: interval, lower: 0, upper: 120, widths: [10, 20], level: 2}
  zip: {type: prefix, length: 5, keep: [3, 1], level: 1}
  admitted:
    type: date
    lower: 2000-01-01
    upper: 2030-01-01
    levels: [month, year]
    level: year
  diagnosis:
    type: categorical
    maps:
      - {flu: respiratory, asthma: respiratory, cut: injury, fracture: injury}
    level: 1
"""


def write_data(path: Path, rows: int = 4000, *, bad_zip: bool = False) -> None:
    rng = random.Random(0)  # test data only
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["name", "age", "zip", "admitted", "diagnosis"])
        for i in range(rows):
            zip_code = rng.choice(["02139", "02138", "47906", "47907", "10001"])
            if bad_zip and i == rows // 2:
                zip_code = "4790"
            w.writerow(
                [
                    f"person{i}",
                    rng.randint(0, 99),
                    zip_code,
                    f"20{rng.randint(10, 12)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
                    rng.choice(["flu", "asthma", "cut", "fracture"]),
                ]
            )


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    data, recoding = tmp_path / "data.csv", tmp_path / "recoding.yaml"
    write_data(data)
    recoding.write_text(RECODING)
    return data, recoding


def published(path: Path) -> list[tuple[object, ...]]:
    con = duckdb.connect()
    return con.execute(f"SELECT * FROM read_parquet('{path}')").fetchall()


def test_module_runs_end_to_end(files: tuple[Path, Path], tmp_path: Path) -> None:
    data, recoding = files
    out = tmp_path / "out.parquet"
    proc = subprocess.run(
        [sys.executable, "-m", "deniable.cli.anonymize", str(data), "--unit", "row", "--k", "10", "--beta", "0.2",
         "--recoding", str(recoding), "-o", str(out)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "Theorem 3.9" in text and "δ" in text and "loss metric" in text
    assert "not published (not in the recoding): ['name']" in text
    assert "curator-only" in text
    rows = published(out)
    assert rows, "a coarse recoding of 4000 rows at β = 0.2 publishes something"
    con = duckdb.connect()
    cols = [d[0] for d in con.execute(f"SELECT * FROM read_parquet('{out}') LIMIT 0").description]
    assert cols == ["age", "zip", "admitted", "diagnosis"]
    sizes = con.execute(f"SELECT COUNT(*) FROM read_parquet('{out}') GROUP BY ALL").fetchall()
    assert min(n for (n,) in sizes) >= 10
    assert f"wrote {len(rows)} rows" in text
    assert {r[1] for r in rows} <= {"021**", "479**", "100**"}  # leading zeros kept


def test_group_command_epsilon_safe_with_delta(files: tuple[Path, Path], tmp_path: Path) -> None:
    data, _ = files
    parquet = tmp_path / "data.parquet"
    duckdb.connect().execute(
        f"COPY (SELECT * FROM read_csv('{data}', all_varchar = true)) "
        f"TO '{parquet}' (FORMAT parquet)"
    )
    out = tmp_path / "out.parquet"
    narrow = tmp_path / "narrow.yaml"  # 2 × 2 × 2 × 2 candidates keep the test short
    narrow.write_text(
        RECODING.replace("level: 2}", "level: 2, candidates: [1, 2]}")
        .replace("level: 1}", "level: 1, candidates: [1, 2]}")
        .replace("level: year\n", "level: year\n    candidates: [year, '*']\n")
        .replace("    level: 1\n", "    level: 1\n    candidates: [0, 1]\n")
    )
    result = CliRunner().invoke(
        main,
        ["anonymize", str(parquet), "--unit", "row", "--k", "12", "--beta", "0.3", "--recoding", str(narrow),
         "-o", str(out), "--select-epsilon", "1.0", "--delta", "1e-6", "--no-progress"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "Theorem 3.11" in result.output
    assert "chosen among 16 candidates by the exponential mechanism" in result.output
    sizes = (
        duckdb.connect()
        .execute(f"SELECT COUNT(*) FROM read_parquet('{out}') GROUP BY ALL")
        .fetchall()
    )
    assert sizes and min(n for (n,) in sizes) >= 12


def test_progress_bar_does_not_break_output(files: tuple[Path, Path], tmp_path: Path) -> None:
    data, recoding = files
    out = tmp_path / "out.parquet"
    result = CliRunner().invoke(
        main,
        ["anonymize", str(data), "--unit", "row", "--k", "10", "--beta", "0.2", "--recoding", str(recoding),
         "-o", str(out), "--epsilon", "1.0", "--progress"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "(β=0.2, ε=1," in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--k", "1", "--beta", "0.2"], "k must be ≥ 2"),
        (["--k", "10", "--beta", "1.2"], "in (0, 1)"),
        (["--k", "10", "--beta", "0.5", "--epsilon", "0.5"], "−ln(1 − β)"),
        (["--k", "10", "--beta", "0.2", "--epsilon", "1", "--delta", "1e-6"], "not both"),
    ],
)
def test_bad_parameters_are_refused_and_nothing_is_written(
    files: tuple[Path, Path], tmp_path: Path, args: list[str], message: str
) -> None:
    data, recoding = files
    out = tmp_path / "out.parquet"
    result = CliRunner().invoke(
        main,
        [
            "anonymize",
            str(data),
            "--unit",
            "row",
            "--recoding",
            str(recoding),
            "-o",
            str(out),
            *args,
        ],
    )
    assert result.exit_code != 0
    assert message in result.output
    assert "Traceback" not in result.output
    assert not out.exists()


def test_unknown_column_is_refused_and_an_uncovered_value_is_published_as_star(
    tmp_path: Path,
) -> None:
    """An unknown column is refused (the schema is public); a value outside the recoding's
    domain is not (whether one exists is private): the release succeeds, that row's zip
    recoded to '*'."""
    data, recoding = tmp_path / "data.csv", tmp_path / "r.yaml"
    write_data(data, 4000, bad_zip=True)
    out = tmp_path / "out.parquet"
    recoding.write_text(RECODING)
    result = CliRunner().invoke(
        main,
        [
            "anonymize",
            str(data),
            "--unit",
            "row",
            "--k",
            "5",
            "--beta",
            "0.5",
            "--recoding",
            str(recoding),
            "-o",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "does not cover" not in result.output
    assert "4790" not in result.output.replace("47906", "").replace("47907", "")
    published = pd.read_parquet(out)
    assert len(published) > 0 and set(published["zip"]) <= {"021**", "479**", "100**", "*"}
    out.unlink()
    recoding.write_text(RECODING + "  income: {type: identity, level: 0}\n")
    result = CliRunner().invoke(
        main,
        [
            "anonymize",
            str(data),
            "--unit",
            "row",
            "--k",
            "5",
            "--beta",
            "0.5",
            "--recoding",
            str(recoding),
            "-o",
            str(out),
        ],
    )
    assert result.exit_code == 1 and "unknown columns ['income']" in result.output
    assert not out.exists()


def test_the_unit_is_stated_and_a_person_column_keeps_one_row_each(tmp_path: Path) -> None:
    """A person with 60 identical rows is published under --unit row, never under --unit name.

    Under --unit row, person0's 60 rows (age 50, zip 99999, one date, one diagnosis: a
    combination nobody else has) are sampled at β = 0.5: about 30 survive, at least 10 with
    probability 1 − P[Bin(60, 0.5) < 10] > 1 − 1e-7, so the combination passes k = 10 and is
    published — one person, visible. Under --unit name, person0 keeps one row, below k:
    suppressed whatever the sample.
    """
    data, recoding = tmp_path / "data.csv", tmp_path / "recoding.yaml"
    write_data(data)
    with data.open("a", newline="") as f:
        w = csv.writer(f)
        for _ in range(60):
            w.writerow(["person0", 55, "99999", "2011-05-05", "flu"])
    recoding.write_text(RECODING)
    base = ["anonymize", str(data), "--k", "10", "--beta", "0.5", "--recoding", str(recoding)]

    missing = CliRunner().invoke(main, [*base, "-o", str(tmp_path / "x.parquet")])
    assert missing.exit_code == 2 and "--unit" in missing.output

    def heavy_rows(unit: str) -> tuple[int, str]:
        out = tmp_path / f"{unit}.parquet"
        result = CliRunner().invoke(main, [*base, "--unit", unit, "-o", str(out)])
        assert result.exit_code == 0, result.output
        rows = (
            duckdb.connect()
            .execute(f"SELECT COUNT(*) FROM read_parquet('{out}') WHERE zip LIKE '999%'")
            .fetchone()
        )
        assert rows is not None
        return int(rows[0]), result.output

    by_row, said_row = heavy_rows("row")
    by_person, said_person = heavy_rows("name")
    assert by_row >= 10 and by_person == 0
    assert "each row is its own unit" in said_row
    assert "one of each name's rows was kept" in said_person
