"""The anchor of a ledger whose database serialises its writers (PostgreSQL): chain.settle.

After a durable commit, :func:`deniable.ledger.chain.settle` returns only once the anchor
covers the write; it writes the newest state the host can vouch for (its proposal, only when
another writer of the host published after its flush), never moves the anchor backwards, and an
acknowledgement (``force``) writes its own state whatever the anchor says.
"""

from __future__ import annotations

import time
from pathlib import Path

from deniable.ledger import chain
from deniable.ledger.integrity import Anchor, FileLock, read_anchor, write_anchor


def state(seq: int, *, ledger_id: str = "L", spent: str = "1/10") -> Anchor:
    return Anchor(
        ledger_id=ledger_id,
        seq=seq,
        head=f"{seq:064x}",
        spent={"d": {"type": "epsilon", "epsilon": spent}},
        checkpoint=None,
        caps={"d": ["epsilon", "1", None, None, "basic"]},
    )


def settle(path: Path, mine: Anchor, *, force: bool = False) -> Anchor:
    lock = FileLock(str(path) + ".lock")
    try:
        chain.settle(str(path), lock, mine, deadline=time.monotonic() + 5, force=force)
    finally:
        lock.close()
    found = read_anchor(str(path))
    assert found is not None
    return found


def test_a_proposal_reads_back_and_a_torn_one_is_ignored(tmp_path: Path) -> None:
    path = str(tmp_path / "a.anchor")
    assert chain.proposed(path) is None
    chain.propose(path, state(7))
    assert chain.proposed(path) == state(7)
    data = Path(chain.proposal_path(path)).read_bytes()
    torn = data.replace(b'"1/10"', b'"9/10"')  # the same length, another total
    Path(chain.proposal_path(path)).write_bytes(torn)
    assert chain.proposed(path) is None


def test_settle_writes_its_own_state_when_nothing_covers_it(tmp_path: Path) -> None:
    path = tmp_path / "a.anchor"
    write_anchor(str(path), state(3))
    assert settle(path, state(5)) == state(5)


def test_a_covering_anchor_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "a.anchor"
    write_anchor(str(path), state(9))
    assert settle(path, state(5)).seq == 9  # never backwards


def test_the_newest_durable_write_of_the_host_is_anchored_for_all(tmp_path: Path) -> None:
    path = tmp_path / "a.anchor"
    write_anchor(str(path), state(3))
    chain.propose(str(path), state(8, spent="8/10"))  # a proposal is never anchored
    assert settle(path, state(5)) == state(5)
    chain._mark(str(path), state(8, spent="8/10"))  # its writer flushed it
    assert settle(path, state(6)) == state(8, spent="8/10")  # covers 6 and 7 too
    chain._mark(str(path), state(7))  # an older one does not replace it
    assert chain._get(chain.durable_path(str(path))) == state(8, spent="8/10")
    chain._mark(str(path), state(12, ledger_id="other"))  # another ledger's is not taken
    assert settle(path, state(10)) == state(10)


def test_an_acknowledgement_writes_its_state_whatever_the_anchor_says(tmp_path: Path) -> None:
    path = tmp_path / "a.anchor"
    write_anchor(str(path), state(40))  # e.g. ahead of a database restored from a backup
    chain._mark(str(path), state(40))  # published before the rollback was found
    assert settle(path, state(12), force=True) == state(12)
    assert settle(path, state(13)) == state(13)  # not the lost branch's entry 40
