"""Tamper evidence, analysts' tokens and idempotency of the ledger, by real file manipulation."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pytest

from deniable.accounting.loss import Epsilon
from deniable.errors import (
    BudgetExceeded,
    DuplicateRequest,
    InvalidParameter,
    LedgerError,
    LedgerTampered,
)
from deniable.ledger import LOST_BY_ROLLBACK, Ledger, Principal

F = Fraction


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "ledger.db"


def spend(led: Ledger, eps: Fraction, key: str, dataset: str = "d") -> int:
    return led.charge(
        dataset, Epsilon(epsilon=eps), analyst="ann", query_key=key, query_text="SELECT 1"
    ).id


def refuses_writes(led: Ledger) -> None:
    assert led.tampered
    with pytest.raises(LedgerTampered, match="deniable ledger verify"):
        spend(led, F(1, 100), "x")
    with pytest.raises(LedgerTampered):
        led.register("d", Epsilon(epsilon=1))
    with pytest.raises(LedgerTampered):
        led.set_allowance("d", "bob", Epsilon(epsilon=F(1, 10)))
    with pytest.raises(LedgerTampered):
        led.add_analyst("eve", role="analyst")


def anchor_of(path: Path) -> dict[str, object]:
    data = json.loads((path.parent / (path.name + ".anchor")).read_text())
    assert isinstance(data, dict)
    return data


def test_a_clean_ledger_verifies_and_its_anchor_follows_every_commit(path: Path) -> None:
    with Ledger(path) as led:
        led.register("d", Epsilon(epsilon=1))
        spend(led, F(1, 4), "a")
        report = led.verify()
        assert report.ok and report.problems == ()
        assert report.anchor_seq == report.seq == 3  # create, register, charge
        anchor = anchor_of(path)
        assert anchor["seq"] == report.seq and anchor["head"] == report.head
        assert anchor["ledger_id"] == led.ledger_id == report.ledger_id
        assert anchor["spent"] == {"d": {"type": "epsilon", "epsilon": "1/4"}}
    with Ledger(path) as led:
        assert not led.tampered


def test_deleting_the_database_is_detected_and_acknowledge_keeps_the_spend(path: Path) -> None:
    with Ledger(path) as led:
        led.register("d", Epsilon(epsilon=1))
        spend(led, F(3, 4), "a")
    os.unlink(path)
    with Ledger(path) as led:
        report = led.verify()
        assert not report.ok
        assert "deleted" in report.problems[0]
        refuses_writes(led)
        led.acknowledge(curator="carol", reason="disk replaced")
        assert not led.tampered and led.verify().ok
        led.register("d", Epsilon(epsilon=1))
        # The budget is not given back: only 1/4 is left.
        assert led.remaining("d") == Epsilon(epsilon=F(1, 4))
        [lost] = led.history("d")
        assert lost.analyst == LOST_BY_ROLLBACK and lost.loss == Epsilon(epsilon=F(3, 4))


def test_restoring_an_older_copy_is_detected_and_never_gives_budget_back(path: Path) -> None:
    old = path.parent / "yesterday.db"
    with Ledger(path) as led:
        led.register("d", Epsilon(epsilon=1))
        spend(led, F(1, 4), "a")
    shutil.copy(path, old)  # closed ledger: the file is complete
    with Ledger(path) as led:
        spend(led, F(1, 2), "b")
        before = led.remaining("d")
    os.replace(old, path)
    with Ledger(path) as led:
        report = led.verify()
        assert not report.ok and "older copy" in report.problems[0]
        assert report.anchor_seq is not None and report.seq < report.anchor_seq
        assert led.remaining("d") == Epsilon(epsilon=F(3, 4))  # what the old copy believes
        refuses_writes(led)
        led.acknowledge(curator="carol", reason="restored yesterday's backup by mistake")
        assert led.remaining("d") == before == Epsilon(epsilon=F(1, 4))
        # Acknowledging again gives nothing back and charges nothing more.
        led.acknowledge(curator="carol", reason="again")
        assert led.remaining("d") == before
        spend(led, F(1, 4), "c")
        with pytest.raises(BudgetExceeded):
            spend(led, F(1, 100), "e")


def test_a_copy_without_its_wal_file_is_detected(path: Path) -> None:
    copy = path.parent / "copy.db"
    with Ledger(path) as led:
        led.register("d", Epsilon(epsilon=1))
        spend(led, F(1, 2), "a")
        assert (path.parent / "ledger.db-wal").exists()
        shutil.copy(path, copy)  # while open: the charges are still in -wal
    # The copy alone shows nothing spent (this is why backups use the backup API): only the
    # schema and the creation entry, written before the file switched to WAL.
    raw = sqlite3.connect(copy)
    assert raw.execute("SELECT COUNT(*) FROM charges").fetchone() == (0,)
    assert raw.execute("SELECT COUNT(*) FROM chain").fetchone() == (1,)
    raw.close()
    os.replace(copy, path)
    with Ledger(path) as led:
        report = led.verify()
        assert not report.ok and "-wal" in report.problems[0]
        refuses_writes(led)
        led.acknowledge(curator="carol", reason="copied the file by hand")
        led.register("d", Epsilon(epsilon=1))
        assert led.remaining("d") == Epsilon(epsilon=F(1, 2))


def test_another_ledger_file_is_detected(path: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    with Ledger(path) as led:
        led.register("d", Epsilon(epsilon=1))
        spend(led, F(1, 2), "a")
    with Ledger(other) as led:
        led.register("d", Epsilon(epsilon=1))
        spend(led, F(1, 8), "a")
    with Ledger(other, anchor=str(path) + ".anchor") as led:
        report = led.verify()
        assert not report.ok and "another ledger file" in report.problems[0]
        refuses_writes(led)


def test_a_hand_edited_row_is_detected_even_with_the_trigger_dropped(path: Path) -> None:
    with Ledger(path) as led:
        led.register("d", Epsilon(epsilon=1))
        spend(led, F(1, 2), "a")
        spend(led, F(1, 4), "b")
    raw = sqlite3.connect(path)
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        raw.execute("UPDATE charges SET epsilon = '0/1' WHERE id = 1")
    raw.execute("DROP TRIGGER charges_append_only_update")
    raw.execute("UPDATE charges SET epsilon = '0/1' WHERE id = 1")
    raw.commit()
    raw.close()
    with Ledger(path) as led:
        report = led.verify()
        assert not report.ok
        assert any("charges" in p and "edited" in p for p in report.problems)
        refuses_writes(led)


@pytest.mark.parametrize(
    "attack",
    [
        "DELETE FROM charges WHERE id = 2",
        "DELETE FROM chain WHERE seq = (SELECT MAX(seq) FROM chain)",
        "UPDATE chain SET payload = replace(payload, '1/2', '0/1') WHERE op = 'charge'",
        "UPDATE datasets SET epsilon = '9/1'",
        "INSERT INTO allowances VALUES ('d', 'mallory', 'epsilon', '1/1', NULL, NULL, 'now')",
    ],
)
def test_other_edits_are_detected(path: Path, attack: str) -> None:
    with Ledger(path) as led:
        led.register("d", Epsilon(epsilon=1))
        spend(led, F(1, 2), "a")
        spend(led, F(1, 4), "b")
    raw = sqlite3.connect(path)
    for (name,) in raw.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        raw.execute(f"DROP TRIGGER {name}")
    raw.execute(attack)
    raw.commit()
    raw.close()
    with Ledger(path) as led:
        assert not led.verify().ok
        refuses_writes(led)


def test_a_deleted_or_corrupt_anchor_is_detected(path: Path) -> None:
    anchor = Path(str(path) + ".anchor")
    with Ledger(path) as led:
        led.register("d", Epsilon(epsilon=1))
    anchor.unlink()
    with Ledger(path) as led:
        assert "missing" in led.verify().problems[0]
        led.acknowledge(curator="carol", reason="anchor lost")
        assert led.verify().ok and anchor.exists()
    anchor.write_text("{not json")
    with Ledger(path) as led:
        assert "not a valid anchor" in led.verify().problems[0]


def test_a_rollback_while_a_ledger_is_open_is_caught_at_the_next_write(path: Path) -> None:
    with Ledger(path) as a:
        a.register("d", Epsilon(epsilon=1))
        spend(a, F(1, 4), "a")
        Path(str(path) + ".anchor").unlink()
        with pytest.raises(LedgerTampered):
            spend(a, F(1, 4), "b")
        assert len(a.history("d")) == 1


def test_another_process_acknowledging_clears_the_refusal(path: Path) -> None:
    with Ledger(path) as led:
        led.register("d", Epsilon(epsilon=1))
    Path(str(path) + ".anchor").unlink()
    with Ledger(path) as worker, Ledger(path) as curator:
        refuses_writes(worker)
        curator.acknowledge(curator="carol", reason="checked")
        spend(worker, F(1, 2), "a")  # re-verified: allowed again


def test_backup_is_consistent_while_open_and_verifies(path: Path, tmp_path: Path) -> None:
    dest = tmp_path / "backup.db"
    with Ledger(path) as led:
        led.register("d", Epsilon(epsilon=1))
        spend(led, F(1, 2), "a")
        report = led.backup(dest)
        assert report.ok and report.seq == led.verify().seq and report.anchor_seq is None
        with pytest.raises(InvalidParameter):
            led.backup(path)
    assert not Path(str(dest) + "-wal").exists()
    raw = sqlite3.connect(dest)
    assert raw.execute("SELECT epsilon FROM charges").fetchall() == [("1/2",)]
    raw.close()
    # A backup opened on its own is a fork without an anchor: a curator must accept it.
    with Ledger(dest) as copy:
        assert copy.tampered
        assert copy.spent("d") == Epsilon(epsilon=F(1, 2))


def test_backup_of_a_tampered_ledger_is_refused(path: Path, tmp_path: Path) -> None:
    with Ledger(path) as led:
        led.register("d", Epsilon(epsilon=1))
    Path(str(path) + ".anchor").unlink()
    with Ledger(path) as led, pytest.raises(LedgerTampered):
        led.backup(tmp_path / "b.db")
    assert not (tmp_path / "b.db").exists()


def test_a_version_1_file_gets_a_clear_error(path: Path) -> None:
    raw = sqlite3.connect(path)
    raw.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    raw.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    raw.commit()
    raw.close()
    with pytest.raises(LedgerError, match=r"version 1.*not converted silently"):
        Ledger(path)


# -- analysts ------------------------------------------------------------------------------


def test_tokens_are_stored_only_as_digests(path: Path) -> None:
    with Ledger(path) as led:
        token = led.add_analyst("ann", role="analyst")
        boss = led.add_analyst("carol", role="curator")
        assert token.startswith("dnb_") and len(token) > 40 and token != boss
        assert led.authenticate(token) == Principal(name="ann", role="analyst")
        assert led.authenticate(boss) == Principal(name="carol", role="curator")
        assert led.authenticate(token + "x") is None
        assert led.authenticate("") is None
        assert led.authenticate("\ud800") is None
        with pytest.raises(InvalidParameter, match="already"):
            led.add_analyst("ann", role="analyst")
        with pytest.raises(InvalidParameter):
            led.add_analyst("zed", role="root")  # type: ignore[arg-type]
        infos = led.analysts()
        assert [(i.name, i.role, i.revoked_at) for i in infos] == [
            ("ann", "analyst", None),
            ("carol", "curator", None),
        ]
        assert not any(hasattr(i, "digest") for i in infos)
    files = [p for p in path.parent.iterdir() if p.is_file()]
    for f in files:
        data = f.read_bytes()
        for t in (token, boss):
            assert t.encode() not in data and t[4:].encode() not in data


def test_revoked_tokens_no_longer_authenticate_and_a_rotated_token_keeps_the_name(
    path: Path,
) -> None:
    with Ledger(path) as led:
        token = led.add_analyst("ann", role="analyst")
        led.revoke_analyst("ann")
        assert led.authenticate(token) is None
        with pytest.raises(InvalidParameter):
            led.revoke_analyst("ann")
        with pytest.raises(InvalidParameter, match="never given to anyone else"):
            led.add_analyst("ann", role="analyst")
        again = led.rotate_token("ann")  # the same person, reinstated
        assert led.authenticate(again) == Principal(name="ann", role="analyst")
        assert led.authenticate(token) is None
        infos = led.analysts()
        assert infos[0].revoked_at is not None and infos[1].revoked_at is None
        assert led.verify().ok
    raw = sqlite3.connect(path)
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        raw.execute("UPDATE analysts SET revoked_at = NULL")
    raw.close()


# -- idempotency and history ---------------------------------------------------------------


@pytest.fixture
def ledger(path: Path) -> Iterator[Ledger]:
    with Ledger(path) as led:
        led.register("d", Epsilon(epsilon=1))
        yield led


def test_a_repeated_idempotency_key_charges_once(ledger: Ledger) -> None:
    def go(analyst: str = "ann") -> int:
        return ledger.charge(
            "d",
            Epsilon(epsilon=F(1, 4)),
            analyst=analyst,
            query_key="q",
            query_text="SELECT 1",
            idempotency_key="req-1",
        ).id

    first = go()
    ledger.store_answer(first, b"answer")
    with pytest.raises(DuplicateRequest) as info:
        go()
    assert info.value.charge_id == first
    assert ledger.answer_for(first) == b"answer"
    assert ledger.answer_for(first + 100) is None
    assert ledger.spent("d") == Epsilon(epsilon=F(1, 4))
    go("bob")  # the key is per analyst
    assert ledger.spent("d") == Epsilon(epsilon=F(1, 2))
    # Duplicate is reported even when the budget is gone.
    spend(ledger, F(1, 2), "rest")
    with pytest.raises(DuplicateRequest):
        go()
    assert [c.idempotency_key for c in ledger.history("d", analyst="ann")] == ["req-1", None]
    assert [c.analyst for c in ledger.history("d", analyst="bob")] == ["bob"]
    assert ledger.verify().ok


def test_history_finds_a_charge_by_its_idempotency_key(tmp_path: Path) -> None:
    with Ledger(tmp_path / "k.db") as ledger:
        ledger.register("d", Epsilon(epsilon=1))
        for i, key in enumerate(["a", None, "b"]):
            ledger.charge(
                "d", Epsilon(epsilon=Fraction(1, 10)), analyst="ann", query_key=f"q{i}",
                query_text="SELECT 1", idempotency_key=key,
            )  # fmt: skip
        (b,) = ledger.history("d", analyst="ann", idempotency_key="b")
        assert b.query_key == "q2" and b.idempotency_key == "b"
        assert ledger.history("d", analyst="bob", idempotency_key="b") == []
        assert ledger.history("d", idempotency_key="zzz") == []
        assert len(ledger.history("d", analyst="ann")) == 3
