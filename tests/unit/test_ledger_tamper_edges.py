"""The edges of the ledger's tamper evidence (issue 22): copies, restores, edits, names.

Each test tampers with the files the way an operator (or a VM snapshot) would, and checks
that the ledger says so — or, where the threat model says it cannot, that the documented
defence (an anchor elsewhere) holds.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from fractions import Fraction
from pathlib import Path

import pytest
from _service_fixture import copy_example
from click.testing import CliRunner, Result

from deniable.accounting.loss import Epsilon
from deniable.cli.main import main
from deniable.errors import LedgerError
from deniable.ledger import Ledger


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [*map(str, args)])


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def charged(path: Path, *amounts: Fraction, cap: int = 1) -> None:
    with Ledger(path) as led:
        led.register("d", Epsilon(epsilon=cap))
        for i, eps in enumerate(amounts):
            led.charge("d", Epsilon(epsilon=eps), analyst="ann", query_key=f"k{i}",
                       query_text="q")  # fmt: skip


# -- a copy of the main file without its -wal ------------------------------------------------


def test_a_main_file_copied_without_its_wal_is_reported_and_verify_never_writes(
    tmp_path: Path,
) -> None:
    live, copy = tmp_path / "live" / "ledger.db", tmp_path / "copy" / "ledger.db"
    live.parent.mkdir()
    copy.parent.mkdir()
    with Ledger(live) as led:  # open: the charges stay in ledger.db-wal
        led.register("d", Epsilon(epsilon=1))
        led.charge("d", Epsilon(epsilon=Fraction(7, 10)), analyst="ann", query_key="k",
                   query_text="q")  # fmt: skip
        assert Path(f"{live}-wal").stat().st_size > 0
        shutil.copyfile(live, copy)
    before = digest(copy)
    result = run("ledger", "verify", "--ledger", copy, "--json")
    assert result.exit_code == 4, result.output
    report = json.loads(result.stdout)
    assert not report["ok"] and "copy of a ledger" in report["problems"][0]
    assert digest(copy) == before  # verification never writes
    assert not Path(f"{copy}.anchor").exists() and not Path(f"{copy}.anchor.lock").exists()
    with Ledger(copy) as led:  # the service's open: tampered, not a fresh ledger
        assert led.tampered
        with pytest.raises(LedgerError):
            led.charge("d", Epsilon(epsilon=Fraction(1, 10)), analyst="ann", query_key="x",
                       query_text="q")  # fmt: skip


def test_a_wal_mode_file_without_tables_is_never_made_a_new_ledger(tmp_path: Path) -> None:
    """What the main file of a ledger made by earlier releases (WAL before the schema) is."""
    path = tmp_path / "ledger.db"
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    conn.close()
    before = digest(path)
    with pytest.raises(LedgerError, match="without its write-ahead log"):
        Ledger(path)
    assert run("ledger", "verify", "--ledger", path).exit_code == 4
    assert digest(path) == before
    with Ledger(tmp_path / "new.db") as led:  # a genuinely new file is still a new ledger
        assert led.verify().ok


def test_verify_opens_read_only_and_changes_no_byte(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    charged(path, Fraction(1, 4))
    copy = tmp_path / "backup.db"
    with Ledger(path) as led:
        led.backup(copy)  # rollback-journal mode; opening it for writing switches it to WAL
    before = digest(copy)
    assert run("ledger", "verify", "--ledger", copy).exit_code == 4  # no anchor: a fork
    assert run("ledger", "history", "--ledger", copy).exit_code == 0
    assert digest(copy) == before
    with Ledger(path, read_only=True) as led:
        assert led.verify(full=True).ok and led.read_only
        with pytest.raises(LedgerError, match="read-only"):
            led.register("e", Epsilon(epsilon=1))
    missing = run("ledger", "verify", "--ledger", tmp_path / "gone.db")
    assert missing.exit_code == 4


# -- the ledger and its anchor restored together ---------------------------------------------


def _snapshot(directory: Path, to: Path) -> None:
    """What a VM snapshot or a directory restore does: every file of the directory."""
    shutil.rmtree(to, ignore_errors=True)
    shutil.copytree(directory, to)


def test_a_session_puts_the_anchor_elsewhere_so_a_directory_restore_is_caught(
    tmp_path: Path,
) -> None:
    import pandas as pd

    from deniable import ROW
    from deniable.curator.session import Session

    data, anchors, snap = tmp_path / "data", tmp_path / "anchors", tmp_path / "snap"
    data.mkdir()
    anchors.mkdir()
    frame = pd.DataFrame({"x": range(100)})

    def session() -> Session:
        s = Session(budget=Epsilon(epsilon=1), ledger=data / "ledger.db",
                    anchor=anchors / "ledger.anchor")  # fmt: skip
        s.add_table("t", frame, privacy_unit=ROW)
        return s

    s = session()
    s.sql("SELECT COUNT(*) AS n FROM t", epsilon=0.25)
    s.close()
    assert (anchors / "ledger.anchor").is_file() and not (data / "ledger.db.anchor").exists()
    _snapshot(data, snap)
    s = session()
    s.sql("SELECT COUNT(*) AS n FROM t", epsilon=0.5)
    s.close()
    _snapshot(snap, data)  # the data directory rolled back; the anchor elsewhere was not
    with Ledger(data / "ledger.db", anchor=anchors / "ledger.anchor") as led:
        assert led.tampered and "older copy" in led.verify().problems[0]


def test_the_stated_limit_a_consistent_restore_of_both_files_is_not_detected(
    tmp_path: Path,
) -> None:
    """README's threat model: with the anchor beside the ledger (the default), a snapshot of
    the directory restores both consistently and nothing can tell. This pins the documented
    limit; the test above is the defence."""
    data, snap = tmp_path / "data", tmp_path / "snap"
    data.mkdir()
    charged(data / "ledger.db", Fraction(1, 4))
    _snapshot(data, snap)
    with Ledger(data / "ledger.db") as led:
        led.charge("d", Epsilon(epsilon=Fraction(1, 2)), analyst="ann", query_key="k9",
                   query_text="q")  # fmt: skip
    _snapshot(snap, data)
    with Ledger(data / "ledger.db") as led:
        assert not led.tampered and led.spent("d") == Epsilon(epsilon=Fraction(1, 4))


# -- a deleted ledger, acknowledged --------------------------------------------------------


def test_after_a_deletion_is_acknowledged_the_cap_and_the_lost_charge_remain(
    tmp_path: Path,
) -> None:
    from deniable.errors import CapConflict

    path = tmp_path / "ledger.db"
    charged(path, Fraction(1, 2), Fraction(1, 4))
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    with Ledger(path) as led:
        assert led.tampered
        led.acknowledge(curator="carol", reason="the disk was wiped")
        assert led.cap("d") == Epsilon(epsilon=1)  # the anchor remembered it
        with pytest.raises(CapConflict):
            led.register("d", Epsilon(epsilon=100))
        assert led.remaining("d") == Epsilon(epsilon=Fraction(1, 4))
    history = run("ledger", "history", "--ledger", path, "--json")
    assert history.exit_code == 0, history.output
    (lost,) = json.loads(history.stdout)["charges"]
    assert lost["analyst"] == "(lost by rollback)" and lost["loss"]["epsilon"] == "3/4"


# -- rows edited or deleted by hand, acknowledged ------------------------------------------


def _hand_edit(path: Path, *statements: str) -> None:
    """What someone with the file does: drop the append-only triggers, then edit."""
    conn = sqlite3.connect(path)
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'"):
        conn.execute(f"DROP TRIGGER {name}")
    for statement in statements:
        conn.execute(statement)
    conn.commit()
    conn.close()


@pytest.mark.parametrize(
    ("edit", "spent"),
    [
        # charge 2 (ε = 1/2) edited down to 1/10: it counts at 1/2 again
        ("UPDATE charges SET epsilon = '1/10' WHERE id = 2", Fraction(3, 4)),
        # edited up to 3/5: it counts at 3/5 (the larger amount), nothing is given back
        ("UPDATE charges SET epsilon = '3/5' WHERE id = 2", Fraction(17, 20)),
        # deleted: charged again in full
        ("DELETE FROM charges WHERE id = 2", Fraction(3, 4)),
        # the cap raised by hand: written back as the chain records it
        ("UPDATE datasets SET epsilon = '100' WHERE name = 'd'", Fraction(3, 4)),
    ],
)
def test_acknowledge_settles_a_hand_edited_row_without_giving_budget_back(
    tmp_path: Path, edit: str, spent: Fraction
) -> None:
    path = tmp_path / "ledger.db"
    charged(path, Fraction(1, 4), Fraction(1, 2))
    _hand_edit(path, edit)
    assert run("ledger", "verify", "--ledger", path).exit_code == 4
    ack = run("ledger", "acknowledge", "--ledger", path, "--curator", "carol",
              "--reason", "found an edited row")  # fmt: skip
    assert ack.exit_code == 0, ack.output
    for full in ("", "--full"):
        result = run("ledger", "verify", "--ledger", path, *([full] if full else []))
        assert result.exit_code == 0, result.output
    with Ledger(path) as led:
        assert led.cap("d") == Epsilon(epsilon=1)
        assert led.spent("d") == Epsilon(epsilon=spent)
        led.charge(
            "d", Epsilon(epsilon=Fraction(1, 100)), analyst="ann", query_key="after", query_text="q"
        )  # fmt: skip  (writes are allowed again)
    with Ledger(path) as led:  # reopened from the acknowledgement's checkpoint
        assert led.verify().ok and led.verify(full=True).ok
        assert led.spent("d") == Epsilon(epsilon=spent + Fraction(1, 100))


def test_an_edit_before_a_checkpoint_is_settled_and_every_replay_agrees(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from deniable.ledger import chain

    monkeypatch.setattr(chain, "CHECKPOINT_EVERY", 4)
    path = tmp_path / "ledger.db"
    charged(path, *[Fraction(1, 20)] * 12)  # checkpoints along the way
    _hand_edit(path, "DELETE FROM charges WHERE id = 1", "UPDATE charges SET epsilon = '0/1' "
               "WHERE id = 2", "UPDATE charges SET query_text = 'x' WHERE id = 11")  # fmt: skip
    with Ledger(path) as led:
        assert not led.verify(full=True).ok
        led.acknowledge(curator="carol", reason="edited rows")
        assert led.verify(full=True).ok
        assert led.spent("d") == Epsilon(epsilon=Fraction(12, 20))
        for i in range(6):  # later checkpoints, built from the acknowledgement's
            led.charge("d", Epsilon(epsilon=Fraction(1, 100)), analyst="ann",
                       query_key=f"n{i}", query_text="q")  # fmt: skip
    with Ledger(path) as led:
        assert led.verify().ok and led.verify(full=True).ok
        assert led.spent("d") == Epsilon(epsilon=Fraction(12, 20) + Fraction(6, 100))


def test_an_edited_chain_cannot_be_acknowledged_and_the_advice_says_restore(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ledger.db"
    charged(path, Fraction(1, 4))
    _hand_edit(path, "UPDATE chain SET payload = replace(payload, '1/4', '1/8') WHERE seq = 3")
    ack = run("ledger", "acknowledge", "--ledger", path, "--curator", "carol", "--reason", "r")
    assert ack.exit_code == 4
    assert "restore the last backup" in ack.stderr
    advice = run("ledger", "verify", "--ledger", path)
    assert advice.exit_code == 4 and "backup" in advice.stdout


# -- analyst identities are unique for ever ---------------------------------------------------


def test_a_revoked_name_is_never_given_to_someone_else(tmp_path: Path) -> None:
    from deniable.errors import InvalidParameter

    path = tmp_path / "ledger.db"
    with Ledger(path) as led:
        led.register("d", Epsilon(epsilon=1))
        led.add_analyst("ann", role="analyst")
        c = led.charge("d", Epsilon(epsilon=Fraction(1, 4)), analyst="ann", query_key="k",
                       query_text="q")  # fmt: skip
        led.store_answer(c.id, b"ann's answer")
        led.revoke_analyst("ann")
        with pytest.raises(InvalidParameter, match="never given to anyone else"):
            led.add_analyst("ann", role="analyst")  # a newcomer would inherit k's answer
    refused = run("analyst", "add", "ann", "--ledger", path)
    assert refused.exit_code == 1 and "rotate" in refused.stderr
    rotated = run("analyst", "rotate", "ann", "--ledger", path, "--json")
    assert rotated.exit_code == 0, rotated.output
    token = json.loads(rotated.stdout)["token"]
    with Ledger(path) as led:  # the same person, reinstated: same name, same role
        principal = led.authenticate(token)
        assert principal is not None and principal.name == "ann"
        assert led.verify(full=True).ok
        with pytest.raises(InvalidParameter):
            led.rotate_token("nobody")


def test_the_http_service_refuses_an_allowance_for_an_unknown_analyst(tmp_path: Path) -> None:
    from deniable.ledger import Principal
    from deniable.server.config import load_config
    from deniable.server.errors import UnknownResource
    from deniable.server.service import Service

    config = load_config(copy_example(tmp_path))
    with Ledger(config.ledger) as led:
        led.add_analyst("ann", role="analyst")
        led.add_analyst("bob", role="analyst")
        led.revoke_analyst("bob")
    with Service(config) as service:
        who = Principal(name="cur", role="curator")
        for name in ("ghost", "bob"):
            with pytest.raises(UnknownResource):
                service.set_allowance(who, "students", name, Epsilon(epsilon=Fraction(1, 2)))
        view = service.set_allowance(who, "students", "ann", Epsilon(epsilon=Fraction(1, 2)))
        assert view.allowance == Epsilon(epsilon=Fraction(1, 2))
        assert service.ledger.allowance("students", "ghost") is None


def test_a_new_ledger_whose_first_anchor_failed_gets_it_on_the_next_open(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    blocker = tmp_path / "ledger.db.anchor.tmp"
    blocker.mkdir()  # the anchor's temporary file cannot be written: the first open fails
    with pytest.raises(LedgerError):
        Ledger(path)
    with sqlite3.connect(path) as raw:  # after its schema and first entry were committed
        assert raw.execute("SELECT COUNT(*) FROM chain").fetchone() == (1,)
    blocker.rmdir()
    for _ in range(2):  # the second open sees a WAL-mode file: it must have had its anchor
        with Ledger(path) as led:
            assert led.verify().ok, led.verify().problems
    assert Path(f"{path}.anchor").is_file()
