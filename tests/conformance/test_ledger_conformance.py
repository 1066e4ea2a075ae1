"""One ledger suite, every backend: SQLite (a file) and PostgreSQL (a real server).

Each test runs the same ledger behaviour through the public :class:`deniable.ledger.Ledger`
on each backend: exact rational totals, admission that refuses what does not fit (and
writes nothing), allowances as slices of the one cap, idempotency, the answer cache,
analysts' tokens, append-only tables enforced by the database itself, the hash chain and
its anchor (hand edits and rollbacks found on open, writes refused until a curator
acknowledges, budget never given back), checkpoints, backups that verify, and no overspend
when several processes charge at once. PostgreSQL runs on the throwaway server of
``tests/conformance/_postgres.py`` (initdb + pg_ctl), one fresh database per test.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from _postgres import PostgresServer, shared_server, stop_shared_server

from deniable.accounting.loss import Epsilon, EpsilonDelta, Rho
from deniable.errors import BudgetExceeded, DuplicateRequest, LedgerError, LedgerTampered
from deniable.ledger import LOST_BY_ROLLBACK, Ledger, chain

psycopg = pytest.importorskip("psycopg")

F = Fraction
_databases = itertools.count()


@dataclass
class Backend:
    """One ledger location on one backend, and raw access to its database for tampering."""

    kind: str
    location: str
    anchor: Path
    dsn: str | None = None  # PostgreSQL: the owner's URL (superuser on the test server)

    def open(self, **kw: Any) -> Ledger:
        return Ledger(self.location, anchor=self.anchor, **kw)

    def raw(self, statement: str, *params: object, triggers: bool = True) -> list[Any]:
        """Run ``statement`` (``?`` placeholders) as the owner; optionally bypass triggers."""
        if self.kind == "sqlite":
            conn = sqlite3.connect(self.location)
            try:
                if not triggers:
                    names = conn.execute("SELECT name FROM sqlite_master WHERE type='trigger'")
                    for (name,) in names.fetchall():
                        conn.execute(f"DROP TRIGGER {name}")
                rows = conn.execute(statement, params).fetchall()
                conn.commit()
                return rows
            finally:
                conn.close()
        assert self.dsn is not None
        with psycopg.connect(self.dsn) as conn:
            if not triggers:
                conn.execute("SET session_replication_role = replica")
            cur = conn.execute(statement.replace("?", "%s"), params)
            return cur.fetchall() if cur.description else []


@pytest.fixture(scope="module")
def pg_server() -> Iterator[PostgresServer]:
    yield shared_server()
    stop_shared_server()  # xdist workers may skip atexit: never leave a server behind


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        return Backend("sqlite", str(tmp_path / "ledger.db"), tmp_path / "ledger.db.anchor")
    server: PostgresServer = request.getfixturevalue("pg_server")
    name = f"ledger_{next(_databases)}_{tmp_path.name[-12:].lower().replace('-', '_')}"
    with psycopg.connect(server.dsn(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    dsn = server.dsn(database=name)
    return Backend("postgresql", dsn, tmp_path / "pg.anchor", dsn=dsn)


def spend(led: Ledger, eps: Fraction | float, key: str, analyst: str = "ann", **kw: Any) -> int:
    return led.charge(
        "d", Epsilon(epsilon=eps), analyst=analyst, query_key=key, query_text="SELECT 1", **kw
    ).id


# -- budgets ---------------------------------------------------------------------------------


def test_exact_rational_totals_survive_reopening(backend: Backend) -> None:
    with backend.open() as led:
        led.register("d", Epsilon(epsilon=1))
        for i in range(10):
            spend(led, 0.1, f"k{i}")  # 0.1 is exactly 1/10: ten of them are exactly 1
        assert led.remaining("d") == Epsilon(epsilon=0)
        with pytest.raises(BudgetExceeded):
            spend(led, 5e-324, "tiny")
    with backend.open() as led:
        assert led.spent("d") == Epsilon(epsilon=1)
        assert len(led.history("d")) == 10
    stored = backend.raw("SELECT epsilon FROM charges ORDER BY id")
    assert [r[0] for r in stored] == ["1/10"] * 10  # exact text, never a float


def test_a_refused_charge_writes_nothing_and_says_what_is_left(backend: Backend) -> None:
    with backend.open() as led:
        led.register("d", EpsilonDelta(epsilon=1, delta=F(1, 10**6)))
        led.charge(
            "d", EpsilonDelta(epsilon=F(2, 3), delta=0), analyst="a", query_key="k", query_text=""
        )
        before = backend.raw("SELECT COUNT(*) FROM chain")[0][0]
        with pytest.raises(BudgetExceeded) as info:
            spend(led, F(1, 2), "over")
        assert info.value.remaining == EpsilonDelta(epsilon=F(1, 3), delta=F(1, 10**6))
        assert backend.raw("SELECT COUNT(*) FROM chain")[0][0] == before
        assert len(led.history("d")) == 1


def test_allowances_are_slices_of_the_one_cap(backend: Backend) -> None:
    with backend.open() as led:
        led.register("d", Epsilon(epsilon=1))
        led.set_allowance("d", "ann", Epsilon(epsilon=F(1, 2)))
        led.set_allowance("d", "bob", Epsilon(epsilon=F(3, 4)))
        spend(led, F(1, 2), "a1", "ann")
        with pytest.raises(BudgetExceeded):
            spend(led, F(1, 100), "a2", "ann")
        spend(led, F(1, 2), "b1", "bob")
        with pytest.raises(BudgetExceeded):  # bob's slice has 1/4 left, the cap nothing
            spend(led, F(1, 100), "b2", "bob")
        assert led.remaining("d", analyst="bob") == Epsilon(epsilon=0)
        assert [e.action for e in led.curator_events("d")] == [
            "register",
            "set_allowance",
            "set_allowance",
        ]


def test_rho_and_zcdp_accountants(backend: Backend) -> None:
    with backend.open() as led:
        led.register("r", Rho(rho=F(1, 2)))
        led.charge("r", Rho(rho=F(1, 8)), analyst="a", query_key="k", query_text="")
        assert led.remaining("r") == Rho(rho=F(3, 8))
        led.register("z", EpsilonDelta(epsilon=1, delta=F(1, 10**6)), accountant="zcdp")
        led.charge("z", Rho(rho=F(1, 100)), analyst="a", query_key="k", query_text="")
        assert led.accountant("z") != "basic"
    with backend.open() as led:
        assert led.spent("r") == Rho(rho=F(1, 8))
        assert led.budget_filter("z").used.rho == F(1, 100)  # type: ignore[union-attr]


def test_idempotency_answers_and_samples(backend: Backend) -> None:
    with backend.open() as led:
        led.register("d", Epsilon(epsilon=1))
        first = spend(led, F(1, 4), "k", idempotency_key="req-1")
        with pytest.raises(DuplicateRequest) as info:
            spend(led, F(1, 4), "k", idempotency_key="req-1")
        assert info.value.charge_id == first
        led.store_answer(first, b"\x00answer\xff")
        led.store_answer(first, b"\x00answer\xff")  # the same bytes: a no-op
        with pytest.raises(LedgerError, match="different stored answer"):
            led.store_answer(first, b"other")
        assert led.cached_answer("d", "k") == b"\x00answer\xff"
        assert led.history("d")[0].status == "answered"
        sample = "sample-0001"
        led.record_sample_release(
            "d", Epsilon(epsilon=F(1, 4)), sample=sample, rate=F(1, 2), analyst="a", query_text=""
        )
        assert led.sample_consumed("d", sample)
        assert [s.rate for s in led.sample_releases("d")] == [F(1, 2)]
        assert led.spent("d") == Epsilon(epsilon=F(1, 2))


def test_analysts_tokens_are_stored_hashed(backend: Backend) -> None:
    with backend.open() as led:
        token = led.add_analyst("ann", role="analyst")
        assert led.authenticate(token) is not None
        assert led.authenticate(token + "x") is None
        digests = [r[0] for r in backend.raw("SELECT digest FROM analysts")]
        assert token not in digests and len(digests) == 1
        led.revoke_analyst("ann")
        assert led.authenticate(token) is None


# -- append-only, chain, anchor ----------------------------------------------------------------


def test_the_database_itself_refuses_deletes_and_edits(backend: Backend) -> None:
    with backend.open() as led:
        led.register("d", Epsilon(epsilon=1))
        spend(led, F(1, 2), "k")
    for statement in (
        "DELETE FROM charges",
        "UPDATE charges SET epsilon = '0/1'",
        "DELETE FROM chain",
        "UPDATE datasets SET registered_at = 'x'",
    ):
        with pytest.raises(Exception, match="append-only"):
            backend.raw(statement)
    backend.raw("UPDATE charges SET status = 'answered'")  # the one change the ledger makes
    with backend.open() as led:
        assert led.spent("d") == Epsilon(epsilon=F(1, 2))


def test_a_hand_edited_charge_is_found_on_open_and_blocks_writes(backend: Backend) -> None:
    with backend.open() as led:
        led.register("d", Epsilon(epsilon=1))
        spend(led, F(1, 2), "k")
    backend.raw("UPDATE charges SET epsilon = '0/1'", triggers=False)
    with backend.open() as led:
        assert led.tampered
        assert any("table charges" in p for p in led.verify().problems)
        with pytest.raises(LedgerTampered):
            spend(led, F(1, 100), "more")


def test_a_rollback_behind_the_anchor_is_found_and_acknowledged_without_refund(
    backend: Backend,
) -> None:
    with backend.open() as led:
        led.register("d", Epsilon(epsilon=1))
        spend(led, F(1, 4), "k1")
        last = spend(led, F(1, 2), "k2")
    # What restoring an older copy does: the last charge and its chain entry are gone.
    (top,) = backend.raw("SELECT MAX(seq) FROM chain")[0]
    backend.raw("DELETE FROM chain WHERE seq = ?", top, triggers=False)
    backend.raw("DELETE FROM charges WHERE id = ?", last, triggers=False)
    with backend.open() as led:
        assert led.tampered
        assert any("older copy" in p for p in led.verify().problems)
        led.acknowledge(curator="cur", reason="restored from backup")
        assert not led.tampered
        assert led.spent("d") == Epsilon(epsilon=F(3, 4))  # the lost half is charged again
        assert LOST_BY_ROLLBACK in {c.analyst for c in led.history("d")}


def test_checkpoints_open_from_the_anchor_and_full_verification_finds_older_edits(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chain, "CHECKPOINT_EVERY", 8)
    with backend.open() as led:
        led.register("d", Epsilon(epsilon=10))
        ids = [spend(led, F(1, 10), f"k{i}") for i in range(30)]
    assert len(backend.raw("SELECT seq FROM checkpoints")) >= 3
    with backend.open() as led:
        late = spend(led, F(1, 10), "late")
    (body,) = backend.raw("SELECT body FROM checkpoints ORDER BY seq DESC LIMIT 1")[0]
    assert json.loads(body)["marks"]["charges"] < late
    backend.raw("UPDATE charges SET epsilon = '0/1' WHERE id = ?", ids[0], triggers=False)
    with backend.open() as led:
        assert not led.tampered  # before the checkpoint: counted from it, not re-read
        assert led.spent("d") == Epsilon(epsilon=F(31, 10))
        assert not led.verify(full=True).ok
    backend.raw("UPDATE charges SET epsilon = '0/1' WHERE id = ?", late, triggers=False)
    with backend.open() as led:
        assert led.tampered  # after the checkpoint: found on open


def test_backup_is_a_verified_sqlite_ledger(backend: Backend, tmp_path: Path) -> None:
    with backend.open() as led:
        led.register("d", Epsilon(epsilon=1))
        c = spend(led, F(1, 3), "k")
        led.store_answer(c, b"released")
        token = led.add_analyst("ann", role="analyst")
        report = led.backup(tmp_path / "copy.db")
        assert report.ok and report.seq == led.verify().seq
        history = led.history("d")
    with Ledger(tmp_path / "copy.db") as copy:
        assert copy.history("d") == history
        assert copy.answer_for(c) == b"released"
        assert copy.authenticate(token) is not None
        assert copy.tampered  # a fork with no anchor: refused until acknowledged


# -- concurrency -------------------------------------------------------------------------------

WORKER = textwrap.dedent(
    """
    import sys
    from fractions import Fraction
    from deniable.accounting.loss import Epsilon
    from deniable.errors import BudgetExceeded
    from deniable.ledger import Ledger
    location, anchor, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
    admitted = 0
    with Ledger(location, anchor=anchor) as led:
        for i in range(20):
            try:
                led.charge("d", Epsilon(epsilon=Fraction(1, 10)), analyst=f"p{k}",
                           query_key=f"{k}-{i}", query_text="")
                admitted += 1
            except BudgetExceeded:
                pass
    print(admitted)
    """
)


def test_processes_charging_at_once_spend_exactly_the_cap(backend: Backend) -> None:
    with backend.open() as led:
        led.register("d", Epsilon(epsilon=3))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, backend.location, str(backend.anchor), str(k)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in range(4)
    ]
    admitted = 0
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        admitted += int(out)
    assert admitted == 30  # 4 × 20 asked, the cap holds exactly 30 tenths
    with backend.open() as led:
        assert not led.tampered
        assert led.spent("d") == Epsilon(epsilon=3)
        assert len(led.history("d")) == 30
