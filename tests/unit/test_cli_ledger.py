"""``deniable analyst``, ``budget``, ``ledger`` and ``query --config`` (CliRunner)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from deniable.cli.main import main
from deniable.ledger import Ledger

CONFIG = """\
ledger = "ledger.db"

[datasets.people]
source = "people.csv"
privacy_unit = "id"
max_groups = 1
max_rows = 1
bounds = {{ age = [0, 100] }}
public_keys = {{ region = ["north", "south"] }}
budget = {{ epsilon = {cap} }}
"""


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [*map(str, args)])


def ok(*args: str | Path) -> Result:
    result = run(*args)
    assert result.exit_code == 0, result.output
    return result


def js(*args: str | Path) -> object:
    return json.loads(ok(*args, "--json").stdout)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    rows = "".join(f"{i % 50},{20 + i % 60},{'north' if i % 3 else 'south'}\n" for i in range(300))
    (tmp_path / "people.csv").write_text("id,age,region\n" + rows)
    path = tmp_path / "service.toml"
    path.write_text(CONFIG.format(cap=2))
    return path


def _query(config: Path, *extra: str) -> Result:
    return run(
        "query", "SELECT region, COUNT(*) AS n FROM people GROUP BY region",
        "--config", config, "--dataset", "people", *extra,
    )  # fmt: skip


def test_analyst_add_prints_the_token_once_and_list_never_shows_it(config: Path) -> None:
    out = ok("analyst", "add", "ann", "--config", config).stdout
    token = next(w for w in out.split() if w.startswith("dnb_"))
    assert len(token) > 40
    assert "will not be shown again" in out
    doc = js("analyst", "add", "bob", "--role", "curator", "--config", config)
    assert isinstance(doc, dict) and doc["role"] == "curator" and doc["token"].startswith("dnb_")
    listing = ok("analyst", "list", "--config", config).stdout
    assert "ann" in listing and "bob" in listing and "dnb_" not in listing
    with Ledger(config.parent / "ledger.db") as ledger:  # only the hash is stored
        principal = ledger.authenticate(token)
        assert principal is not None and principal.name == "ann"
    assert run("analyst", "add", "ann", "--config", config).exit_code == 1  # no duplicate
    ok("analyst", "revoke", "ann", "--config", config)
    with Ledger(config.parent / "ledger.db") as ledger:
        assert ledger.authenticate(token) is None
    listed = js("analyst", "list", "--ledger", config.parent / "ledger.db")
    assert isinstance(listed, dict)
    assert [a["revoked_at"] is not None for a in listed["analysts"]] == [True, False]


def test_query_through_the_service_charges_the_analyst_and_budget_shows_it(
    config: Path,
) -> None:
    ok("analyst", "add", "ann", "--config", config)
    assert (
        run(
            "analyst", "allow", "zed", "--dataset", "people", "--epsilon", "1", "--config", config
        ).exit_code
        == 1
    )
    doc = js(
        "analyst", "allow", "ann", "--dataset", "people", "--epsilon", "1/2", "--config", config
    )
    assert isinstance(doc, dict) and doc["allowance"] == {"type": "epsilon", "epsilon": "1/2"}

    answer = _query(config, "--as", "ann", "--epsilon", "0.4", "--json")
    assert answer.exit_code == 0, answer.output
    got = json.loads(answer.stdout)
    assert got["charged"] == {"type": "epsilon", "epsilon": "2/5"}
    assert got["remaining"] == {"type": "epsilon", "epsilon": "1/10"}  # her slice's rest
    over = _query(config, "--as", "ann", "--epsilon", "0.2")
    assert over.exit_code == 3, over.output
    assert _query(config, "--as", "nobody", "--epsilon", "0.1").exit_code == 1
    ok(
        "query",
        "SELECT COUNT(*) AS n FROM people",
        "--config",
        config,
        "--dataset",
        "people",
        "--epsilon",
        "1",
    )

    budget = js("budget", "--config", config)
    assert isinstance(budget, dict)
    (people,) = budget["datasets"]
    assert people["cap"]["epsilon"] == "2" and people["spent"]["epsilon"] == "7/5"
    ann = next(a for a in people["analysts"] if a["analyst"] == "ann")
    assert ann["allowance"]["epsilon"] == "1/2" and ann["spent"]["epsilon"] == "2/5"
    table = ok("budget", "--config", config, "--dataset", "people").stdout
    assert "ann" in table and "ε = 0.6" in table  # the dataset's remaining

    history = js("ledger", "history", "--config", config, "--analyst", "ann")
    assert isinstance(history, dict)
    assert [c["analyst"] for c in history["charges"]] == ["ann"]
    everyone = js("ledger", "history", "--config", config)
    assert isinstance(everyone, dict) and len(everyone["charges"]) == 2


def test_verify_backup_and_a_rollback_detected(config: Path, tmp_path: Path) -> None:
    ok("analyst", "add", "ann", "--config", config)
    ok(
        "query",
        "SELECT COUNT(*) AS n FROM people",
        "--config",
        config,
        "--dataset",
        "people",
        "--epsilon",
        "0.5",
    )
    report = js("ledger", "verify", "--config", config)
    assert isinstance(report, dict) and report["ok"] is True and report["problems"] == []
    assert "intact" in ok("ledger", "verify", "--config", config).stdout

    copy = tmp_path / "copy.db"
    ok("ledger", "backup", copy, "--config", config)
    assert run("ledger", "backup", copy, "--config", config).exit_code == 1  # exists
    ok("ledger", "backup", copy, "--config", config, "--force")
    ok(
        "query",
        "SELECT COUNT(*) AS n FROM people",
        "--config",
        config,
        "--dataset",
        "people",
        "--epsilon",
        "1",
    )

    # the operator restores yesterday's copy: 1 of the 1.5 spent would come back
    ledger = config.parent / "ledger.db"
    for suffix in ("-wal", "-shm"):
        Path(f"{ledger}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(copy, ledger)
    bad = run("ledger", "verify", "--config", config)
    assert bad.exit_code == 4, bad.output
    assert "TAMPERED" in bad.stdout and "acknowledge" in bad.stdout
    refused = run(
        "query",
        "SELECT COUNT(*) AS n FROM people",
        "--config",
        config,
        "--dataset",
        "people",
        "--epsilon",
        "0.1",
        "--json",
    )
    assert refused.exit_code == 4, refused.output
    assert json.loads(refused.stdout)["error"]["code"] == "ledger_tampered"

    ok(
        "ledger",
        "acknowledge",
        "--config",
        config,
        "--curator",
        "carol",
        "--reason",
        "restored by mistake",
    )
    ok("ledger", "verify", "--config", config)
    budget = js("budget", "--config", config)
    assert isinstance(budget, dict)
    assert budget["datasets"][0]["spent"]["epsilon"] == "3/2"  # nothing given back


def test_a_deleted_ledger_is_reported_not_silently_recreated(config: Path) -> None:
    ok(
        "query",
        "SELECT COUNT(*) AS n FROM people",
        "--config",
        config,
        "--dataset",
        "people",
        "--epsilon",
        "0.5",
    )
    ledger = config.parent / "ledger.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{ledger}{suffix}").unlink(missing_ok=True)
    assert run("ledger", "verify", "--config", config).exit_code == 4


def test_missing_ledger_and_config(tmp_path: Path) -> None:
    missing = run("ledger", "verify", "--ledger", tmp_path / "none.db")
    assert missing.exit_code == 4 and "no ledger" in missing.stderr
    assert not (tmp_path / "none.db").exists()  # reading never creates a ledger
    assert run("budget", "--config", tmp_path / "none.toml").exit_code == 1
    assert run("budget").exit_code == 2  # neither --config nor --ledger
    bad = tmp_path / "bad.toml"
    bad.write_text("ledger = 3\n")
    result = run("budget", "--config", bad, "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["error"]["code"] == "config_error"


def test_a_configured_anchor_elsewhere_catches_the_deletion_of_the_ledger_directory(
    tmp_path: Path,
) -> None:
    """With ``anchor`` in the configuration, the anchor lives apart from the ledger: deleting
    the ledger's whole directory leaves it, and the service and the CLI see the loss."""
    data, anchors = tmp_path / "data", tmp_path / "anchors"
    data.mkdir()
    anchors.mkdir()
    rows = "".join(f"{i % 50},{20 + i % 60},{'north' if i % 3 else 'south'}\n" for i in range(300))
    (tmp_path / "people.csv").write_text("id,age,region\n" + rows)
    config = tmp_path / "service.toml"
    config.write_text(
        CONFIG.replace(
            'ledger = "ledger.db"', 'ledger = "data/ledger.db"\nanchor = "anchors/a"'
        ).format(cap=2)
    )
    ok("query", "SELECT COUNT(*) AS n FROM people", "--config", config, "--dataset", "people",
       "--epsilon", "0.5")  # fmt: skip
    assert (anchors / "a").is_file() and not (data / "ledger.db.anchor").exists()
    report = js("ledger", "verify", "--config", config)
    assert isinstance(report, dict) and report["ok"] is True
    shutil.rmtree(data)
    data.mkdir()
    assert run("ledger", "verify", "--config", config).exit_code == 4
    # the service refuses to answer on a new, empty ledger beside a surviving anchor
    refused = _query(config, "--epsilon", "0.1")
    assert refused.exit_code == 4, refused.output
