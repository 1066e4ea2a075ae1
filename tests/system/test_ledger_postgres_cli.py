"""The curator's commands on a PostgreSQL ledger named by a configuration (``--config``).

A ``postgresql://`` URL in ``ledger =`` must reach the ledger unchanged (a ``Path`` folds its
``//``) and is not checked for existence as a file. Runs on the throwaway server of
``tests/conformance/_postgres.py``.
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))

from _postgres import PostgresServer, shared_server, stop_shared_server

psycopg = pytest.importorskip("psycopg")

from deniable.accounting.loss import Epsilon  # noqa: E402
from deniable.cli.main import main  # noqa: E402
from deniable.ledger import Ledger  # noqa: E402

_names = itertools.count()

CONFIG = """\
ledger = "{url}"
anchor = "{anchor}"

[datasets.people]
source = "people.csv"
privacy_unit = "id"
max_groups = 1
max_rows = 1
bounds = {{ age = [0, 100] }}
budget = {{ epsilon = 2 }}
"""


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    yield shared_server()
    stop_shared_server()


@pytest.fixture
def url(server: PostgresServer) -> str:
    name = f"cli_{next(_names)}"
    with psycopg.connect(server.dsn(), autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    return str(server.dsn(database=name))


def test_budget_and_verify_read_a_postgresql_ledger_named_by_the_config(
    url: str, tmp_path: Path
) -> None:
    (tmp_path / "people.csv").write_text("id,age\n1,30\n2,40\n")
    anchor = tmp_path / "ledger.anchor"
    config = tmp_path / "service.toml"
    config.write_text(CONFIG.format(url=url, anchor=anchor))
    with Ledger(url, anchor=anchor) as led:
        led.register("people", Epsilon(epsilon=2))
        led.charge("people", Epsilon(epsilon=Fraction(1, 2)), analyst="ann",
                   query_key="k", query_text="q")  # fmt: skip
    runner = CliRunner()
    budget = runner.invoke(main, ["budget", "--config", str(config), "--json"])
    assert budget.exit_code == 0, budget.output
    (people,) = json.loads(budget.stdout)["datasets"]
    assert people["spent"] == {"type": "epsilon", "epsilon": "1/2"}
    verify = runner.invoke(main, ["ledger", "verify", "--config", str(config), "--json"])
    assert verify.exit_code == 0, verify.output
    report = json.loads(verify.stdout)
    assert report["ok"] and report["seq"] >= 3
    assert report["ledger"].startswith("postgresql://")
    history = runner.invoke(main, ["ledger", "history", "--config", str(config), "--json"])
    assert history.exit_code == 0, history.output
    assert [c["analyst"] for c in json.loads(history.stdout)["charges"]] == ["ann"]
    # The configured anchor is the one the ledger keeps: losing it is reported.
    anchor.unlink()
    lost = runner.invoke(main, ["ledger", "verify", "--config", str(config)])
    assert lost.exit_code == 4, lost.output


def test_ledger_grant_gives_a_host_role_what_it_needs_and_no_more(
    url: str, server: PostgresServer, tmp_path: Path
) -> None:
    database = url.rsplit("/", 1)[1]
    role = f"svc_{database}"
    with psycopg.connect(server.dsn(), autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN")
    anchor = tmp_path / "ledger.anchor"
    with Ledger(url, anchor=anchor) as led:  # the owner creates the ledger
        led.register("people", Epsilon(epsilon=2))
    runner = CliRunner()
    granted = runner.invoke(main, ["ledger", "grant", role, "--ledger", url, "--json"])
    assert granted.exit_code == 0, granted.output
    assert json.loads(granted.stdout)["granted"] is True
    host = server.dsn(role, database)
    with Ledger(host, anchor=anchor) as led:
        led.charge("people", Epsilon(epsilon=Fraction(1, 4)), analyst="ann", query_key="k",
                   query_text="q")  # fmt: skip
    with (
        psycopg.connect(host, autocommit=True) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute("DELETE FROM charges")
    sqlite_ledger = runner.invoke(
        main, ["ledger", "grant", role, "--ledger", str(tmp_path / "l.db")]
    )
    assert sqlite_ledger.exit_code == 1
