"""CLI errors say what to fix in CLI flags, not in Python keywords (issue 21 §3).

The query layer raises its errors with a problem and remedies as parameters
(:class:`deniable.errors.Remedy`); the Python API words them as keywords, the CLI as flags.
Each case below failed before: the CLI printed ``pass bounds={'cost': (lower, upper)} to
sql()``, ``pass delta=...``, ``declare public_keys``, ``pass epsilon=..., not rho``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from deniable import ROW, Session
from deniable.accounting.loss import Epsilon
from deniable.cli.common import CLI_REMEDIES
from deniable.cli.main import main
from deniable.errors import InvalidParameter, UnsafeQuery

PYTHONISMS = re.compile(
    r"=\.\.\.|=\{|sql\(\)|add_table|register\(|allow_change|public_keys|EpsilonDelta|delta=|rho="
)


@pytest.fixture(scope="module")
def visits(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("data") / "visits.csv"
    rows = ["pid,dept,cost"] + [f"{i % 30},{'ab'[i % 2]},{i % 90}" for i in range(200)]
    path.write_text("\n".join(rows) + "\n")
    return path


BASE = ["--unit", "pid", "--max-groups", "1", "--max-rows", "2"]

CASES = {
    "sum without bounds": (
        ["SELECT SUM(cost) AS s FROM visits", "--epsilon", "1"],
        ["--bounds cost=LO:HI", "(line 1, column 12)"],
    ),
    "a row expression without bounds": (
        ["SELECT SUM(cost * 2) AS s FROM visits", "--epsilon", "1"],
        ["--bounds cost=LO:HI"],
    ),
    "private group keys without δ": (
        ["SELECT dept, COUNT(*) AS n FROM visits GROUP BY dept", "--epsilon", "1"],
        ["--delta", "--keys dept=V1,V2,…"],
    ),
    "δ on a pure-ε budget": (
        ["SELECT COUNT(*) AS n FROM visits", "--epsilon", "1", "--delta", "1e-6"],
        ["leave --delta out"],
    ),
    "another kind of --budget": (
        ["SELECT COUNT(*) AS n FROM visits", "--rho", "0.1", "--budget", "3"],
        ["leave --budget out", "cap ε = 5"],
    ),
    "ρ on an ε budget": (
        ["SELECT COUNT(*) AS n FROM visits", "--rho", "0.1"],
        ["pass --epsilon"],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_cli_names_its_own_flags(case: str, visits: Path, tmp_path: Path) -> None:
    args, wanted = CASES[case]
    ledger = ["--ledger", str(tmp_path / "l.db")]
    first = CliRunner().invoke(main, ["query", "SELECT COUNT(*) AS n FROM visits", "--data",
                                      str(visits), *BASE, "--epsilon", "0.1", *ledger,
                                      "--budget", "5"])  # fmt: skip
    assert first.exit_code == 0, first.output  # the ledger is an ε ledger from here on
    result = CliRunner().invoke(main, ["query", args[0], "--data", str(visits), *BASE,
                                       *args[1:], *ledger])  # fmt: skip
    assert result.exit_code != 0
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith("error: ")
    for text in wanted:
        assert text in error, error
    assert not PYTHONISMS.search(error), error


def test_python_keeps_its_own_words_and_the_remedies_are_attached(tmp_path: Path) -> None:
    s = Session(budget=Epsilon(epsilon=5), ledger=tmp_path / "p.db")
    s.add_table("t", pd.DataFrame({"k": ["a", "b"], "x": [1.0, 2.0]}), privacy_unit=ROW)
    with pytest.raises(UnsafeQuery) as bounds:
        s.sql("SELECT SUM(x) AS s FROM t", epsilon=1)
    assert "bounds={'x': (lower, upper)}" in str(bounds.value)
    assert [(r.parameter, r.column) for r in bounds.value.remedies] == [("bounds", "x")]
    with pytest.raises(UnsafeQuery) as keys:
        s.sql("SELECT k, COUNT(*) AS n FROM t GROUP BY k", epsilon=1)
    assert "pass delta=..." in str(keys.value)
    assert [r.parameter for r in keys.value.remedies] == ["delta", "public_keys"]
    with pytest.raises(InvalidParameter) as rho:
        s.sql("SELECT COUNT(*) AS n FROM t", rho=0.1)
    assert "pass epsilon=..., not rho" in str(rho.value)
    assert s.budget.spent == Epsilon(epsilon=0)  # nothing was spent


def test_every_remedy_has_cli_words() -> None:
    """Every parameter the query layer names as a remedy has a CLI wording."""
    src = Path(__file__).resolve().parents[2] / "src" / "deniable"
    named = set()
    for path in src.rglob("*.py"):
        named |= set(re.findall(r'Remedy\("([a-z_]+)"', path.read_text()))
    assert named and named <= set(CLI_REMEDIES), named - set(CLI_REMEDIES)
