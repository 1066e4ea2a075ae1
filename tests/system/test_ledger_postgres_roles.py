"""The PostgreSQL ledger's walls and doors: the service role's grants, triggers, URLs, config.

Runs on the throwaway server of ``tests/conformance/_postgres.py`` (initdb + pg_ctl). The
behaviours every backend shares are in ``tests/conformance/test_ledger_conformance.py``;
here only what is PostgreSQL's own.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))

from _postgres import PostgresServer, shared_server, stop_shared_server

psycopg = pytest.importorskip("psycopg")

from deniable.accounting.loss import Epsilon  # noqa: E402
from deniable.curator.session import Session  # noqa: E402
from deniable.errors import LedgerError  # noqa: E402
from deniable.ledger import Ledger  # noqa: E402
from deniable.ledger.postgres import grant_service_role  # noqa: E402
from deniable.server.config import load_config  # noqa: E402

_names = itertools.count()


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    yield shared_server()
    stop_shared_server()  # xdist workers may skip atexit: never leave a server behind


@pytest.fixture
def database(server: PostgresServer) -> str:
    """A fresh database; returns its name."""
    name = f"roles_{next(_names)}"
    with psycopg.connect(server.dsn(), autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    return name


def test_the_service_role_can_charge_but_never_delete_or_rewrite(
    server: PostgresServer, database: str, tmp_path: Path
) -> None:
    role = f"svc_{database}"
    with psycopg.connect(server.dsn(), autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN")
    owner, service = server.dsn(database=database), server.dsn(role, database)
    anchor = tmp_path / "anchor"
    with Ledger(owner, anchor=anchor) as led:
        led.register("d", Epsilon(epsilon=1))
    grant_service_role(owner, role)
    with Ledger(service, anchor=anchor) as led:  # everything the service does still works
        c = led.charge("d", Epsilon(epsilon=Fraction(1, 4)), analyst="a", query_key="k",
                       query_text="")  # fmt: skip
        led.store_answer(c.id, b"answer")  # UPDATE charges SET status
        led.set_allowance("d", "a", Epsilon(epsilon=Fraction(1, 2)))  # upsert
        led.set_allowance("d", "a", Epsilon(epsilon=Fraction(3, 4)))
        led.register("d", Epsilon(epsilon=2), allow_change=True)  # UPDATE datasets
        led.add_analyst("ann", role="analyst")
        led.revoke_analyst("ann")  # UPDATE analysts SET revoked_at
        assert led.verify(full=True).ok
    with psycopg.connect(service, autocommit=True) as conn:
        for statement in (
            "DELETE FROM charges",
            "UPDATE charges SET epsilon = '0/1'",
            "UPDATE chain SET payload = 'x'",
            "TRUNCATE charges",
            "DELETE FROM checkpoints",
            "UPDATE datasets SET registered_at = 'x'",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
    with psycopg.connect(owner, autocommit=True) as conn:  # the owner meets the triggers
        for statement in (
            "DELETE FROM charges",
            "TRUNCATE chain",
            "TRUNCATE charges CASCADE",
            "UPDATE chain SET op = 'x'",
        ):
            with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
                conn.execute(statement)
    with Ledger(owner, anchor=anchor) as led:
        assert led.spent("d") == Epsilon(epsilon=Fraction(1, 4))


def test_a_password_in_the_url_is_never_shown(tmp_path: Path) -> None:
    with pytest.raises(LedgerError) as info:
        Ledger("postgresql://someone:s3cret-pw@127.0.0.1:1/nowhere", anchor=tmp_path / "a")
    assert "s3cret-pw" not in str(info.value)
    assert info.value.__cause__ is None  # psycopg's error may repeat the URL: not chained


def test_the_ledger_location_hides_the_password(
    server: PostgresServer, database: str, tmp_path: Path
) -> None:
    with psycopg.connect(server.dsn(), autocommit=True) as admin:
        admin.execute(f"ALTER ROLE postgres PASSWORD 'pw-{database}'")
    url = server.dsn(database=database).replace("postgres@", f"postgres:pw-{database}@")
    with Ledger(url, anchor=tmp_path / "a") as led:
        assert f"pw-{database}" not in led.path
        assert led.path == f"postgresql://postgres@127.0.0.1:{server.port}/{database}"


def test_session_and_config_take_a_postgresql_ledger(
    server: PostgresServer, database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    url = server.dsn(database=database)
    with Session(budget=Epsilon(epsilon=1), ledger=url, dataset="people") as session:
        assert session is not None
    anchors = list((tmp_path / "state" / "deniable" / "anchors").glob("*.anchor"))
    assert len(anchors) == 1  # the default anchor: a file on this host, named after the URL
    with Ledger(url) as led:
        assert led.cap("people") == Epsilon(epsilon=1)
        assert led.anchor_path == str(anchors[0])
        assert not led.tampered

    (tmp_path / "t.csv").write_text("x\n1\n")
    config = tmp_path / "service.toml"
    config.write_text(
        f'ledger = "{url}"\nanchor = "ledger.anchor"\n'
        '[datasets.t]\nsource = "t.csv"\nprivacy_unit = "row"\nbudget = { epsilon = 1 }\n'
    )
    loaded = load_config(config)
    assert loaded.ledger == url  # kept as a URL, not resolved as a relative path
    assert loaded.anchor == tmp_path / "ledger.anchor"
