"""The real ``python -m deniable`` in a subprocess: a query, analysts, verify, exit codes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CONFIG = """\
ledger = "ledger.db"

[datasets.people]
source = "people.csv"
privacy_unit = "id"
max_groups = 1
max_rows = 1
budget = { epsilon = 1 }
"""


def deniable(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DENIABLE_CONFIG"}
    return subprocess.run(
        [sys.executable, "-m", "deniable", *map(str, args)],
        cwd=cwd, capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip


@pytest.fixture
def site(tmp_path: Path) -> Path:
    rows = "".join(f"{i % 40},{20 + i % 60}\n" for i in range(200))
    (tmp_path / "people.csv").write_text("id,age\n" + rows)
    (tmp_path / "service.toml").write_text(CONFIG)
    return tmp_path


def test_python_m_deniable_answers_a_query_on_a_csv(site: Path) -> None:
    done = deniable(
        "query", "SELECT COUNT(*) AS n FROM people", "--data", "people.csv", "--unit", "row",
        "--epsilon", "0.5", "--ledger", "local.db", "--budget", "1", "--json", cwd=site,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["columns"] == ["n", "n_low", "n_high"]
    assert doc["remaining"] == {"type": "epsilon", "epsilon": "1/2"}
    assert done.stderr == ""  # no progress noise when not on a terminal
    people = deniable("query", "SELECT COUNT(*) AS n FROM people", "--data", "people.csv",
                      "--epsilon", "0.5", "--ledger", "local.db", "--unit", "id",
                      "--max-groups", "1", "--max-rows", "1", cwd=site)  # fmt: skip
    assert people.returncode == 0, people.stderr
    assert "n_high" in people.stdout and "remaining ε = 0" in people.stdout
    over = deniable("query", "SELECT COUNT(*) AS c FROM people", "--data", "people.csv",
                    "--epsilon", "0.1", "--ledger", "local.db", "--unit", "row", cwd=site)  # fmt: skip
    assert over.returncode == 3 and over.stderr.startswith("error:")
    assert "Traceback" not in over.stderr and over.stderr.count("\n") == 1
    refused = deniable("query", "SELECT age FROM people", "--data", "people.csv",
                       "--unit", "row", "--epsilon", "0.1", cwd=site)  # fmt: skip
    assert refused.returncode == 5
    assert deniable("query", "--nope", cwd=site).returncode == 2


def test_analyst_add_then_list(site: Path) -> None:
    added = deniable("analyst", "add", "ann", "--config", "service.toml", cwd=site)
    assert added.returncode == 0, added.stderr
    token = next(w for w in added.stdout.split() if w.startswith("dnb_"))
    listed = deniable("analyst", "list", "--config", "service.toml", "--json", cwd=site)
    assert listed.returncode == 0, listed.stderr
    (ann,) = json.loads(listed.stdout)["analysts"]
    assert (ann["name"], ann["role"], ann["revoked_at"]) == ("ann", "analyst", None)
    assert token not in listed.stdout


def test_ledger_verify_ok_then_tampered(site: Path) -> None:
    spend = ("query", "SELECT COUNT(*) AS n FROM people", "--config", "service.toml",
             "--dataset", "people")  # fmt: skip
    assert deniable(*spend, "--epsilon", "0.25", cwd=site).returncode == 0
    assert (
        deniable("ledger", "backup", "old.db", "--config", "service.toml", cwd=site).returncode == 0
    )
    assert deniable(*spend, "--epsilon", "0.5", cwd=site).returncode == 0
    verified = deniable("ledger", "verify", "--config", "service.toml", cwd=site)
    assert verified.returncode == 0 and "intact" in verified.stdout

    shutil.copyfile(site / "old.db", site / "ledger.db")  # roll back to the older copy
    for suffix in ("-wal", "-shm"):
        (site / f"ledger.db{suffix}").unlink(missing_ok=True)
    tampered = deniable("ledger", "verify", "--config", "service.toml", cwd=site)
    assert tampered.returncode == 4, tampered.stdout + tampered.stderr
    assert "TAMPERED" in tampered.stdout
    again = deniable(*spend, "--epsilon", "0.1", cwd=site)
    assert again.returncode == 4 and "ledger verify" in again.stderr
