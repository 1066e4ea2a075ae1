"""Checkpoints: opening verifies from the last anchored checkpoint; ``--full`` replays all.

Each test builds a real SQLite ledger with checkpoints every few entries (the interval is
lowered for the test) and tampers with the file by hand, as an operator could.
"""

from __future__ import annotations

import itertools
import json
import shutil
import sqlite3
from fractions import Fraction
from pathlib import Path

import pytest
from click.testing import CliRunner

from deniable.accounting.loss import Epsilon, EpsilonDelta, Rho
from deniable.accounting.renyi import ZCDPFilter
from deniable.cli.main import main
from deniable.errors import BudgetExceeded, LedgerTampered
from deniable.ledger import Ledger, chain

F = Fraction
EVERY = 10


@pytest.fixture(autouse=True)
def small_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chain, "CHECKPOINT_EVERY", EVERY)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "ledger.db"


def spend(led: Ledger, eps: Fraction, key: str, analyst: str = "ann") -> int:
    return led.charge(
        "d", Epsilon(epsilon=eps), analyst=analyst, query_key=key, query_text="SELECT 1"
    ).id


def anchor_of(path: Path) -> dict[str, object]:
    data = json.loads(Path(f"{path}.anchor").read_text())
    assert isinstance(data, dict)
    return data


def checkpoints(path: Path) -> list[int]:
    raw = sqlite3.connect(path)
    try:
        return [int(r[0]) for r in raw.execute("SELECT seq FROM checkpoints ORDER BY seq")]
    finally:
        raw.close()


def tamper(path: Path, statement: str, *args: object) -> None:
    """Drop the append-only triggers and run ``statement``, as someone with the file can."""
    raw = sqlite3.connect(path)
    try:
        triggers = [
            r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='trigger'")
        ]
        for name in triggers:
            raw.execute(f"DROP TRIGGER {name}")
        raw.execute(statement, args)
        raw.commit()
    finally:
        raw.close()


def build(path: Path, n: int) -> list[int]:
    """A ledger with cap 10 and ``n`` charges of 1/100 by ann (odd) and bob (even)."""
    with Ledger(path) as led:
        led.register("d", Epsilon(epsilon=10))
        return [spend(led, F(1, 100), f"k{i}", "ann" if i % 2 else "bob") for i in range(n)]


def test_checkpoints_are_made_and_the_anchor_vouches_for_the_last(path: Path) -> None:
    build(path, 45)
    made = checkpoints(path)
    assert len(made) >= 4 and all(b - a >= EVERY for a, b in itertools.pairwise(made))
    vouched = anchor_of(path)["checkpoint"]
    assert isinstance(vouched, dict) and vouched["seq"] == made[-1]
    with Ledger(path) as led:
        assert not led.tampered
        assert led.spent("d") == Epsilon(epsilon=F(45, 100))
        assert led.spent("d", analyst="ann") == Epsilon(epsilon=F(22, 100))
        assert led.verify(full=True).ok


def test_totals_from_a_checkpoint_plus_later_rows_admit_exactly_the_cap(path: Path) -> None:
    # The cap is spent across several checkpoints: the last charge that fits is admitted,
    # the next one refused, by the filter fed with checkpoint totals plus the later rows.
    with Ledger(path) as led:
        led.register("d", Epsilon(epsilon=F(1, 2)))
        led.set_allowance("d", "ann", Epsilon(epsilon=F(3, 10)))
        for i in range(50):
            spend(led, F(1, 100), f"k{i}", "ann" if i % 2 else "bob")
    assert len(checkpoints(path)) >= 4
    with Ledger(path) as led:
        assert led.remaining("d") == Epsilon(epsilon=0)
        assert led.remaining("d", analyst="ann") == Epsilon(epsilon=0)
        with pytest.raises(BudgetExceeded):
            spend(led, F(1, 10**9), "over")


def test_rho_and_zcdp_totals_survive_checkpoints(path: Path) -> None:
    with Ledger(path) as led:
        led.register("r", Rho(rho=1))
        led.register("z", EpsilonDelta(epsilon=4, delta=F(1, 10**5)), accountant="zcdp")
        for i in range(30):
            led.charge("r", Rho(rho=F(1, 40)), analyst="a", query_key=f"r{i}", query_text="")
            led.charge("z", Rho(rho=F(1, 100)), analyst="a", query_key=f"z{i}", query_text="")
        before = (led.spent("r"), led.budget_filter("z"))
    assert len(checkpoints(path)) >= 4
    with Ledger(path) as led:
        z = led.budget_filter("z")
        assert isinstance(z, ZCDPFilter) and isinstance(before[1], ZCDPFilter)
        assert (led.spent("r"), z.used) == (before[0], before[1].used)
        assert z.used.rho == F(30, 100)
        assert led.spent("r") == Rho(rho=F(30, 40))


def test_an_edit_after_the_checkpoint_is_caught_on_open(path: Path) -> None:
    ids = build(path, 25)
    raw = sqlite3.connect(path)
    (body,) = raw.execute("SELECT body FROM checkpoints ORDER BY seq DESC LIMIT 1").fetchone()
    raw.close()
    assert json.loads(body)["marks"]["charges"] < ids[-1]  # the last charge came after it
    tamper(path, "UPDATE charges SET epsilon = '0/1' WHERE id = ?", ids[-1])
    with Ledger(path) as led:
        assert led.tampered
        assert any("table charges" in p for p in led.verify().problems)
        with pytest.raises(LedgerTampered):
            spend(led, F(1, 100), "more")


def test_an_edit_before_the_checkpoint_is_missed_on_open_but_caught_by_full(path: Path) -> None:
    ids = build(path, 35)
    tamper(path, "UPDATE charges SET epsilon = '0/1' WHERE id = ?", ids[0])
    tamper(path, "UPDATE chain SET payload = replace(payload, 'k1\"', 'kX\"') WHERE seq = 4")
    with Ledger(path) as led:
        # Opening starts at the anchored checkpoint: the old rows are not re-read...
        assert not led.tampered
        # ...and cannot give budget back: admission counts the checkpoint's totals.
        assert led.spent("d") == Epsilon(epsilon=F(35, 100))
        full = led.verify(full=True)
        assert not full.ok
        assert any("chain entry 4" in p for p in full.problems)
        assert led.tampered  # the full verdict now refuses writes
        with pytest.raises(LedgerTampered):
            spend(led, F(1, 100), "more")
    # The command line's --full finds it too (exit 4); without --full it does not.
    runner = CliRunner()
    assert runner.invoke(main, ["ledger", "verify", "--ledger", str(path)]).exit_code == 0
    result = runner.invoke(main, ["ledger", "verify", "--full", "--ledger", str(path)])
    assert result.exit_code == 4, result.output
    assert "TAMPERED" in result.stdout


def test_a_deleted_old_charge_gives_nothing_back_and_full_finds_it(path: Path) -> None:
    ids = build(path, 25)
    tamper(path, "DELETE FROM charges WHERE id = ?", ids[1])
    with Ledger(path) as led:
        assert not led.tampered  # before the checkpoint: not re-read on open
        assert led.spent("d") == Epsilon(epsilon=F(25, 100))  # still counted
        assert any("rows were deleted" in p for p in led.verify(full=True).problems)


@pytest.mark.parametrize("how", ["delete", "edit"])
def test_the_vouched_checkpoint_itself_is_guarded(path: Path, how: str) -> None:
    build(path, 25)
    seq = checkpoints(path)[-1]
    if how == "delete":
        tamper(path, "DELETE FROM checkpoints WHERE seq = ?", seq)
    else:
        tamper(
            path,
            "UPDATE checkpoints SET body = replace(body, '\"bob\"', '\"eve\"') WHERE seq = ?",
            seq,
        )
    with Ledger(path) as led:
        assert led.tampered
        assert any("checkpoint" in p for p in led.verify().problems)


def test_a_forged_later_checkpoint_is_caught(path: Path) -> None:
    build(path, 25)
    raw = sqlite3.connect(path)
    seq, head, body, digest = raw.execute(
        "SELECT seq, head, body, hash FROM checkpoints ORDER BY seq DESC LIMIT 1"
    ).fetchone()
    (top,) = raw.execute("SELECT MAX(seq) FROM chain").fetchone()
    raw.close()
    assert top > seq
    tamper(
        path,
        "INSERT INTO checkpoints (seq, head, body, hash) VALUES (?, ?, ?, ?)",
        top,
        head,
        body,
        digest,
    )
    with Ledger(path) as led:
        assert led.tampered
        assert any(f"checkpoint at entry {top}" in p for p in led.verify().problems)


def test_a_rollback_behind_the_anchor_is_caught_with_checkpoints(
    path: Path, tmp_path: Path
) -> None:
    build(path, 22)
    old = tmp_path / "old.db"
    with Ledger(path) as led:
        led.backup(old)
        for i in range(20):
            spend(led, F(1, 100), f"later{i}")
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(old, path)
    with Ledger(path) as led:
        assert led.tampered
        assert any("older copy" in p or "checkpoint" in p for p in led.verify().problems)


def test_another_ledgers_file_is_caught_with_checkpoints(path: Path, tmp_path: Path) -> None:
    build(path, 22)
    other = tmp_path / "other.db"
    build(other, 22)
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    with sqlite3.connect(other) as src, sqlite3.connect(path) as dst:
        src.backup(dst)
    with Ledger(path) as led:
        assert led.tampered
        assert any("identity" in p for p in led.verify().problems)


def test_an_answer_for_an_old_charge_is_checked_on_open(path: Path) -> None:
    ids = build(path, 25)
    with Ledger(path) as led:
        led.store_answer(ids[0], b"first answer")
        assert led.answer_for(ids[0]) == b"first answer"
    with Ledger(path) as led:
        assert not led.tampered
    tamper(path, "UPDATE answers SET payload = ? WHERE charge_id = ?", b"forged", ids[0])
    with Ledger(path) as led:
        assert led.tampered
        assert any("table answers" in p for p in led.verify().problems)


def test_backup_verifies_in_full(path: Path, tmp_path: Path) -> None:
    ids = build(path, 25)
    tamper(path, "UPDATE charges SET query_text = 'edited' WHERE id = ?", ids[0])
    with Ledger(path) as led:
        assert not led.tampered
        with pytest.raises(LedgerTampered):
            led.backup(tmp_path / "copy.db")
    assert not (tmp_path / "copy.db").exists()


def test_a_host_adopts_another_hosts_checkpoint_only_after_checking_it(
    path: Path, tmp_path: Path
) -> None:
    # Two hosts, one database, an anchor each (host B enrolled with a copy of A's anchor).
    with Ledger(path) as a:
        a.register("d", Epsilon(epsilon=10))
        spend(a, F(1, 100), "first")
    b_anchor = tmp_path / "b.anchor"
    shutil.copyfile(f"{path}.anchor", b_anchor)
    with Ledger(path) as a:  # host A alone makes the checkpoints
        for i in range(25):
            spend(a, F(1, 100), f"a{i}")
    latest = checkpoints(path)[-1]
    with Ledger(path, anchor=b_anchor) as b:
        assert not b.tampered
        spend(b, F(1, 100), "b0")
    vouched = json.loads(b_anchor.read_text())["checkpoint"]
    assert vouched["seq"] == latest  # B checked A's checkpoint against the chain, then took it

    # A checkpoint that the chain does not give is never adopted (and is found on open).
    with Ledger(path) as a:
        for i in range(12):
            spend(a, F(1, 100), f"later{i}")
    forged = checkpoints(path)[-1]
    tamper(
        path,
        "UPDATE checkpoints SET body = replace(body, '\"bob\"', '\"eve\"'), hash = ? WHERE seq = ?",
        "0" * 64,
        forged,
    )
    with Ledger(path, anchor=b_anchor) as b:
        assert b.tampered
        assert any(f"checkpoint at entry {forged}" in p for p in b.verify().problems)
    assert json.loads(b_anchor.read_text())["checkpoint"]["seq"] == latest
