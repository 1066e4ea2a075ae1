"""``deniable query`` on a local file (CliRunner): tables, JSON, budgets and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from deniable.cli.main import main
from deniable.ledger import Ledger

N = 400


@pytest.fixture(scope="module")
def people(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("data") / "people.csv"
    lines = ["id,age,region"]
    lines += [f"{i % 100},{20 + i % 60},{'north' if i % 3 else 'south'}" for i in range(N)]
    path.write_text("\n".join(lines) + "\n")
    return path


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(main, ["query", *map(str, args)])


def test_a_count_prints_the_table_with_its_interval_and_the_charge(people: Path) -> None:
    result = run(
        "SELECT COUNT(*) AS n FROM people", "--data", people, "--unit", "row", "--epsilon", "0.5"
    )
    assert result.exit_code == 0, result.output
    for text in ("n_low", "n_high", "charged ε = 0.5", "remaining ε = 0", "95% intervals"):
        assert text in result.stdout
    assert "noise only — covers the value after bounding" in result.stdout
    assert "rows: row-level: each row is its own unit" in result.stdout
    assert "no --ledger" in result.stderr  # nothing recorded: said so


def test_the_privacy_unit_is_always_stated(people: Path) -> None:
    sql = "SELECT COUNT(*) AS n FROM people"
    missing = run(sql, "--data", people, "--epsilon", "1")
    assert missing.exit_code == 2
    assert "--unit COLUMN" in missing.output and "--unit row" in missing.output
    no_bounds = run(sql, "--data", people, "--unit", "id", "--max-rows", "4", "--epsilon", "1")
    assert no_bounds.exit_code == 2 and "--unit id needs --max-groups" in no_bounds.output


def test_the_row_policy_line_is_printed_and_in_the_json(people: Path) -> None:
    args = ["--data", people, "--unit", "id", "--max-groups", "2", "--max-rows", "4"]
    args += ["--bounds", "age=0:100", "--keys", "region=north,south", "--epsilon", "1"]
    sql = "SELECT region, SUM(age) AS total FROM people GROUP BY region"
    line = "per id: at most 2 groups, 4 rows per group; total clamped to [0, 100]"
    table = run(sql, *args)
    assert table.exit_code == 0, table.output
    assert f"rows: {line}" in table.stdout
    doc = json.loads(run(sql, *args, "--json").stdout)
    assert doc["row_policy"] == line
    assert doc["interval_coverage"] == "95% intervals: noise only — covers the value after bounding"


def test_json_gives_values_intervals_charge_and_remaining(people: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "l.db"
    result = run(
        "SELECT region, COUNT(*) AS n, AVG(age) AS a FROM people GROUP BY region",
        "--data",
        people,
        "--unit",
        "id",
        "--bounds",
        "age=0:100",
        "--keys",
        "region=north,south",
        "--max-groups",
        "1",
        "--max-rows",
        "4",
        "--epsilon",
        "1/2",
        "--ledger",
        ledger,
        "--budget",
        "2",
        "--json",
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["columns"] == ["region", "n", "n_low", "n_high", "a", "a_low", "a_high"]
    assert sorted(r[0] for r in doc["rows"]) == ["north", "south"]
    for row in doc["rows"]:
        assert row[2] <= row[1] <= row[3] and row[5] <= row[4] <= row[6]
    assert doc["charged"] == {"type": "epsilon", "epsilon": "1/2"}
    assert doc["remaining"] == {"type": "epsilon", "epsilon": "3/2"}
    assert doc["privacy_unit"] == "id" and doc["bounds"]["a"] == [0.0, 100.0]
    assert doc["ledger"] == str(ledger) and doc["cached"] is False
    with Ledger(ledger) as led:  # the charge is in the ledger, under the dataset's name
        assert led.spent("people").epsilon == 0.5


def test_the_ledger_keeps_the_budget_across_commands(people: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "l.db"
    base = ("--data", people, "--unit", "row", "--ledger", ledger)
    first = run("SELECT COUNT(*) AS n FROM people", *base, "--epsilon", "0.75", "--budget", "1")
    assert first.exit_code == 0, first.output
    # the cap is read from the ledger; the identical query is replayed for free
    again = run("SELECT COUNT(*) AS n FROM people", *base, "--epsilon", "0.75", "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["cached"] is True
    over = run(
        "SELECT SUM(age) AS s FROM people", *base, "--bounds", "age=0:100", "--epsilon", "0.5"
    )
    assert over.exit_code == 3
    assert over.stderr.startswith("error: ") and "nothing was spent" in over.stderr
    other_cap = run("SELECT COUNT(*) AS n FROM people", *base, "--epsilon", "0.1", "--budget", "5")
    assert other_cap.exit_code == 1  # a cap is never changed silently


def test_a_new_dataset_in_a_ledger_needs_its_budget(people: Path, tmp_path: Path) -> None:
    result = run(
        "SELECT COUNT(*) AS n FROM people",
        "--data",
        people,
        "--unit",
        "row",
        "--ledger",
        tmp_path / "l.db",
        "--epsilon",
        "1",
    )
    assert result.exit_code == 1
    assert "--budget" in result.stderr


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT age FROM people",  # releases rows
        "SELECT SUM(age) AS s FROM people",  # no bounds
        "SELEC COUNT(*) FROM people",  # does not parse
        "SELECT COUNT(*) AS n FROM nowhere",  # unknown table
    ],
)
def test_refused_queries_exit_5_and_spend_nothing(people: Path, tmp_path: Path, sql: str) -> None:
    ledger = tmp_path / "l.db"
    result = run(
        sql, "--data", people, "--unit", "row", "--ledger", ledger, "--budget", "1",
        "--epsilon", "1", "--json",
    )  # fmt: skip
    assert result.exit_code == 5, result.output
    assert json.loads(result.stdout)["error"]["code"] in ("unsafe_query", "sql_error")
    with Ledger(ledger) as led:
        assert led.spent("people").epsilon == 0


def test_an_unreadable_file_is_a_one_line_error_without_its_contents(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    rows = "".join(f"{i},{i}\n" for i in range(30_000))  # beyond DuckDB's type sniffing
    bad.write_text(f"id,x\n{rows}30001,SECRET-VALUE\n")
    result = run("SELECT COUNT(*) AS n FROM bad", "--data", bad, "--unit", "row", "--epsilon", "1")
    assert result.exit_code == 1
    assert "SECRET" not in result.output
    assert result.stderr.count("error:") == 1


@pytest.mark.parametrize(
    "args",
    [
        ["SELECT COUNT(*) AS n FROM people"],  # no source
        ["SELECT COUNT(*) AS n FROM people", "--data", "{people}"],  # no ε: no default
        ["SELECT COUNT(*) AS n FROM people", "--data", "{people}", "--epsilon", "x"],
        ["SELECT COUNT(*) AS n FROM people", "--data", "{people}", "--epsilon", "1", "--rho", "1"],
        [
            "SELECT COUNT(*) AS n FROM people",
            "--data",
            "{people}",
            "--unit",
            "row",
            "--epsilon",
            "1",
            "--bounds",
            "age",
        ],
        [
            "SELECT COUNT(*) AS n FROM people",
            "--data",
            "{people}",
            "--config",
            "c.toml",
            "--epsilon",
            "1",
        ],
        [
            "SELECT COUNT(*) AS n FROM people",
            "--config",
            "c.toml",
            "--dataset",
            "d",
            "--unit",
            "id",
            "--epsilon",
            "1",
        ],
    ],
)
def test_usage_errors_exit_2(people: Path, args: list[str]) -> None:
    result = run(*(a.format(people=people) for a in args))
    assert result.exit_code == 2, result.output


def test_rho_and_epsilon_delta_budgets(people: Path, tmp_path: Path) -> None:
    rho = run(
        "SELECT COUNT(*) AS n FROM people", "--data", people, "--unit", "row", "--rho", "0.1",
        "--json",
    )  # fmt: skip
    assert rho.exit_code == 0, rho.output
    assert json.loads(rho.stdout)["charged"] == {"type": "rho", "rho": "1/10"}
    approx = run(
        "SELECT COUNT(*) AS n FROM people", "--data", people, "--unit", "row",
        "--ledger", tmp_path / "l.db",
        "--epsilon", "1", "--budget", "2", "--budget-delta", "1e-5", "--json",
    )  # fmt: skip
    assert approx.exit_code == 0, approx.output
    assert json.loads(approx.stdout)["remaining"]["delta"] == "1/100000"


@pytest.fixture(scope="module")
def friends(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ring of 30 nodes plus chords: every node has degree 3 or 4."""
    path = tmp_path_factory.mktemp("graph") / "friends.csv"
    edges = {(i, (i + 1) % 30) for i in range(30)} | {(i, (i + 7) % 30) for i in range(0, 30, 2)}
    path.write_text("a,b\n" + "".join(f"{a},{b}\n" for a, b in sorted(edges)))
    return path


@pytest.mark.parametrize("unit", ["edge", "node"])
def test_a_graph_file_answers_graph_sql(friends: Path, tmp_path: Path, unit: str) -> None:
    result = run(
        "SELECT COUNT(*) AS n FROM friends",
        "--data",
        friends,
        "--edges",
        "a:b",
        "--unit",
        unit,
        "--max-degree",
        "4",
        "--epsilon",
        "2",
        "--ledger",
        tmp_path / "g.db",
        "--budget",
        "3",
        "--json",
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    (values,) = doc["rows"]
    row = dict(zip(doc["columns"], values, strict=True))
    # 45 edges; the scale is 1/2 (edge) or D/ε = 2 (node): within ±40 w.p. > 1 − 1e-8
    assert abs(row["n"] - 45) <= 40 and row["n_low"] <= row["n"] <= row["n_high"]
    assert doc["charged"] == {"type": "epsilon", "epsilon": "2"}
    with Ledger(tmp_path / "g.db") as ledger:
        assert len(ledger.history("friends")) == 1


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--edges", "a:b", "--max-degree", "4", "--bounds", "a=0:1"], "apply to tables"),
        (["--edges", "a:b"], "needs --max-degree"),
        (["--edges", "ab", "--max-degree", "4"], "SRC:DST"),
        (["--edges", "a:b", "--max-degree", "4", "--unit", "a"], "edge or node"),
        (["--max-degree", "4"], "give --edges"),
    ],
)
def test_graph_usage_errors_say_what_to_write(friends: Path, args: list[str], says: str) -> None:
    result = run("SELECT COUNT(*) AS n FROM friends", "--data", friends, *args, "--epsilon", "1")
    assert result.exit_code == 2 and says in result.output


def test_population_answers_from_a_sample(people: Path, tmp_path: Path) -> None:
    common = ["--data", people, "--unit", "id", "--max-groups", "1", "--max-rows", "1"]
    common += ["--epsilon", "1", "--json"]
    result = run(
        "SELECT COUNT(*) AS n FROM people", *common, "--sample-rate", "0.5", "--population"
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    (values,) = doc["rows"]
    row = dict(zip(doc["columns"], values, strict=True))
    assert row["n_low"] <= row["n"] <= row["n_high"]
    assert row["n_high"] - row["n_low"] > 40  # includes the sampling error of 100 people
    refused = run("SELECT COUNT(*) AS n FROM people", *common, "--population")
    assert refused.exit_code == 2 and "--population needs --sample-rate" in refused.output
