"""The service configuration: the example parses; every mistake names its key and the fix."""

from __future__ import annotations

import shutil
from fractions import Fraction
from pathlib import Path

import pytest

from deniable.accounting.loss import Epsilon, EpsilonDelta, Rho
from deniable.server.config import ConfigError, load_config

FIXTURES = Path(__file__).parent.parent / "fixtures" / "service"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    for f in FIXTURES.iterdir():
        shutil.copy(f, tmp_path)
    return tmp_path


def write(folder: Path, text: str) -> Path:
    path = folder / "c.toml"
    path.write_text(text)
    return path


BASE = (
    'ledger = "l.db"\n[datasets.s]\nsource = "students.csv"\nprivacy_unit = "row"\n'
    "budget = { epsilon = 1 }\n"
)
UNIT = BASE.replace('privacy_unit = "row"', 'privacy_unit = "student_id"')


def test_example_parses_with_paths_relative_to_the_file(folder: Path) -> None:
    cfg = load_config(folder / "example.toml")
    ds = cfg.datasets["students"]
    assert cfg.ledger == folder / "ledger.db"
    assert ds.source == folder / "students.csv"
    assert ds.budget == Epsilon(epsilon=2)
    assert ds.privacy_unit == "student_id"
    assert ds.bounds["grade"] == (Fraction(0), Fraction(100))
    assert ds.public_keys["school"] == ("north", "south", "east")
    assert ds.public_tables[0].name == "schools"
    assert ds.public_tables[0].unique_key == ("school",)
    assert cfg.allowances["ann"]["students"] == Epsilon(epsilon=1)
    assert cfg.server.share_replays is False
    assert cfg.server.cors_origins == ()
    assert cfg.server.rate_limit.burst == 50


def test_defaults_are_closed(folder: Path) -> None:
    cfg = load_config(write(folder, BASE))
    assert cfg.server.share_replays is False
    assert cfg.server.cors_origins == ()
    assert cfg.datasets["s"].table == "s"


@pytest.mark.parametrize(
    ("budget", "loss"),
    [
        ("{ epsilon = 0.1 }", Epsilon(epsilon=Fraction(1, 10))),
        (
            '{ epsilon = "1/3", delta = 1e-6 }',
            EpsilonDelta(epsilon=Fraction(1, 3), delta=Fraction(1, 10**6)),
        ),
        ("{ rho = 0.5 }", Rho(rho=Fraction(1, 2))),
    ],
)
def test_budgets_are_exact(folder: Path, budget: str, loss: object) -> None:
    text = BASE.replace("{ epsilon = 1 }", budget)
    assert load_config(write(folder, text)).datasets["s"].budget == loss


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ('[datasets.s]\nsource = "students.csv"\nbudget = { epsilon = 1 }\n', "ledger"),
        ('ledger = "l.db"\n', "datasets"),
        ('ledger = "l.db"\n[datasets.s]\nbudget = { epsilon = 1 }\n', "datasets.s.source"),
        ('ledger = "l.db"\n[datasets.s]\nsource = "students.csv"\n', "datasets.s.budget"),
        (BASE.replace("students.csv", "missing.csv"), "datasets.s.source"),
        (BASE.replace("{ epsilon = 1 }", "{ eps = 1 }"), "datasets.s.budget"),
        (BASE.replace("{ epsilon = 1 }", "{ epsilon = -1 }"), "datasets.s.budget"),
        (BASE.replace("{ epsilon = 1 }", '{ epsilon = "x" }'), "datasets.s.budget.epsilon"),
        (BASE + "bounds = { grade = [5, 1] }\n", "datasets.s.bounds.grade"),
        (BASE + "max_groups = 0\n", "datasets.s.max_groups"),
        (BASE + 'engine = "spark"\n', "datasets.s.engine"),
        (BASE + "colour = 1\n", "'colour' in datasets.s"),
        (BASE + "[server]\nshare_replays = 1\n", "server.share_replays"),
        (BASE + '[server]\ncors_origins = ["*"]\n', "server.cors_origins"),
        (BASE + "[server]\nrate_limit = { per_second = 0 }\n", "server.rate_limit.per_second"),
        (BASE + "[server]\nmax_request_bytes = 10\n", "server.max_request_bytes"),
        (
            BASE + "[analysts.ann]\nallowance = { t = { epsilon = 1 } }\n",
            "analysts.ann.allowance.t",
        ),
        (
            BASE + "[analysts.ann]\nallowance = { s = { epsilon = 2 } }\n",
            "analysts.ann.allowance.s",
        ),
        (BASE + "[analysts.ann]\nallowance = { s = { rho = 0.1 } }\n", "analysts.ann.allowance.s"),
        ('ledger = "nodir/l.db"\n' + BASE.split("\n", 1)[1], "ledger"),
        ("ledger = [", "not valid TOML"),
    ],
)
def test_mistakes_name_the_key(folder: Path, text: str, names: str) -> None:
    with pytest.raises(ConfigError, match=None) as info:
        load_config(write(folder, text))
    assert names in str(info.value)
    assert isinstance(info.value, ValueError)


def test_missing_file() -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config("/nonexistent/deniable.toml")


def test_anchor_is_optional_and_must_differ_from_the_ledger(folder: Path) -> None:
    assert load_config(write(folder, BASE)).anchor is None
    with pytest.raises(ConfigError, match="anchor: directory"):
        load_config(write(folder, 'anchor = "a/l.anchor"\n' + BASE))
    (folder / "a").mkdir()
    cfg = load_config(write(folder, 'anchor = "a/l.anchor"\n' + BASE))
    assert cfg.anchor == folder / "a" / "l.anchor"
    with pytest.raises(ConfigError, match="another file"):
        load_config(write(folder, 'anchor = "l.db"\n' + BASE))


def test_the_privacy_unit_is_always_stated(folder: Path) -> None:
    text = BASE.replace('privacy_unit = "row"\n', "")
    with pytest.raises(ConfigError, match=r"datasets\.s\.privacy_unit is missing") as info:
        load_config(write(folder, text))
    assert 'privacy_unit = "row"' in str(info.value)  # the message names both choices
    assert load_config(write(folder, BASE)).datasets["s"].privacy_unit is None  # row level


def test_a_unit_column_states_its_contribution_bounds(folder: Path) -> None:
    with pytest.raises(ConfigError, match="needs max_groups and max_rows"):
        load_config(write(folder, UNIT))
    with pytest.raises(ConfigError, match="needs max_rows"):
        load_config(write(folder, UNIT + "max_groups = 2\n"))
    ds = load_config(write(folder, UNIT + "max_groups = 2\nmax_rows = 3\n")).datasets["s"]
    assert (ds.privacy_unit, ds.max_groups, ds.max_rows) == ("student_id", 2, 3)
    with pytest.raises(ConfigError, match='with privacy_unit = "row"'):
        load_config(write(folder, BASE + "max_rows = 2\n"))
