"""Group commit on the PostgreSQL ledger: concurrent charges of a process in one transaction.

:meth:`Ledger.charge` on PostgreSQL hands its charge to :mod:`deniable.ledger.group`; a
batch is admitted in one write transaction whose reads are made once, before its first
insert (:class:`deniable.ledger.budget.ChargeBatch`), and whose own inserts are then
counted by admission. What must hold, each checked here on a real server:

1. each member is admitted against everything before it, *the earlier members included*:
   the cap, an analyst's allowance, and (after a checkpoint) the rows counted from it.
   Negative control: the same batch with a broken overlay that forgets the batch's own
   inserts overspends the cap — so the test sees the feature;
2. a refused member (budget, repeated idempotency key inside the batch or from before it,
   unknown dataset, a sampled query under zCDP) writes nothing and the others go on;
3. a batch whose transaction fails fails every member and writes nothing;
4. many threads charging one :class:`Ledger` are batched (batches of more than one charge
   happen) and spend exactly the cap, with the chain intact.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))

from _postgres import PostgresServer  # type: ignore[import-not-found]

psycopg = pytest.importorskip("psycopg")

from deniable.accounting.loss import Epsilon, EpsilonDelta  # noqa: E402
from deniable.errors import (  # noqa: E402
    BudgetExceeded,
    DuplicateRequest,
    LedgerError,
    UnknownDataset,
    UnsafeQuery,
)
from deniable.ledger import Ledger  # noqa: E402
from deniable.ledger.budget import ChargeBatch  # noqa: E402
from deniable.ledger.group import Request  # noqa: E402
from deniable.ledger.records import encode_details  # noqa: E402

_made = [0]


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresServer]:
    server = PostgresServer()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def ledger(pg: PostgresServer, tmp_path: Path) -> Iterator[Ledger]:
    """A fresh ledger database with dataset ``d`` (cap ε = 1)."""
    _made[0] += 1
    name = f"batch{_made[0]}"
    with psycopg.connect(pg.dsn(), autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    with Ledger(pg.dsn(database=name), anchor=tmp_path / "a.anchor") as opened:
        opened.register("d", Epsilon(epsilon=1))
        yield opened


def request(
    loss: Fraction,
    analyst: str = "a",
    *,
    key: str | None = None,
    dataset: str = "d",
    details: dict[str, object] | None = None,
    text: str = "SELECT COUNT(*) FROM t",
) -> Request:
    request.made += 1  # type: ignore[attr-defined]
    return Request(
        dataset=dataset,
        loss=Epsilon(epsilon=loss),
        analyst=analyst,
        query_key=f"q{request.made}",  # type: ignore[attr-defined]
        query_text=text,
        details_json=encode_details(details),
        sampled=details is not None and "sampling" in details,
        idempotency_key=key,
    )


request.made = 0  # type: ignore[attr-defined]


def outcome(batch: list[Request]) -> list[str]:
    return ["ok" if r.result is not None else type(r.error).__name__ for r in batch]


def intact(ledger: Ledger) -> None:
    report = ledger.verify(full=True)
    assert report.ok, report.problems


def test_members_count_the_members_before_them(ledger: Ledger) -> None:
    ledger.set_allowance("d", "b", Epsilon(epsilon=Fraction(1, 2)))
    q = Fraction(1, 4)
    batch = [request(q, "a"), request(q, "b"), request(q, "b"), request(q, "b")]
    batch += [request(q, "a"), request(q, "a"), request(q, "c")]
    ledger._charge_batch(batch)
    # b's third is over b's allowance (1/2); after a's second the cap (1) is spent.
    assert outcome(batch) == ["ok"] * 3 + ["BudgetExceeded", "ok"] + ["BudgetExceeded"] * 2
    assert ledger.spent("d") == Epsilon(epsilon=1)
    assert ledger.spent("d", analyst="b") == Epsilon(epsilon=Fraction(1, 2))
    stored = [c.id for c in ledger.history("d")]
    assert stored == [r.result.id for r in batch if r.result is not None]
    assert stored == sorted(stored)
    intact(ledger)


def test_members_count_from_the_vouched_checkpoint(ledger: Ledger) -> None:
    grow = [request(Fraction(1, 2000), f"g{k % 3}") for k in range(1000)]
    ledger._charge_batch(grow)  # 1,001 chain entries: a checkpoint, vouched by the anchor
    assert all(r.result is not None for r in grow)
    with ledger._read() as tx:  # admission now counts from the checkpoint's totals
        assert tx.counted is not None and tx.counted[0] >= grow[-1].result.id  # type: ignore[union-attr]
    batch = [request(Fraction(1, 8), "g1") for _ in range(5)]
    ledger._charge_batch(batch)
    assert outcome(batch) == ["ok"] * 4 + ["BudgetExceeded"]
    assert ledger.spent("d") == Epsilon(epsilon=1)
    intact(ledger)


def test_broken_overlay_overspends(ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control: forgetting the batch's own inserts admits past the cap."""
    monkeypatch.setattr(ChargeBatch, "record", lambda self, *args: None)
    batch = [request(Fraction(1, 4)) for _ in range(6)]
    ledger._charge_batch(batch)
    assert outcome(batch) == ["ok"] * 6  # 3/2 admitted against a cap of 1
    monkeypatch.undo()
    assert ledger.spent("d") == Epsilon(epsilon=Fraction(3, 2))


def test_refused_members_write_nothing(ledger: Ledger) -> None:
    ledger.register("z", EpsilonDelta(epsilon=1, delta=Fraction(1, 10**6)), accountant="zcdp")
    before = ledger.charge(
        "d", Epsilon(epsilon=Fraction(1, 16)), analyst="a", query_key="k0",
        query_text="SELECT 1", idempotency_key="old",
    )  # fmt: skip
    sampled: dict[str, object] = {"sampling": {"rate": "1/2"}}
    batch = [
        request(Fraction(1, 16), key="k1"),
        request(Fraction(1, 16), key="k1"),  # the same key again, inside the batch
        request(Fraction(1, 16), key="old"),  # a key charged before the batch
        request(Fraction(1, 16), dataset="nope"),
        request(Fraction(1, 16), dataset="z", details=sampled),
        request(Fraction(1, 16), "(reserved) x"),
        request(Fraction(1, 16), key="k2"),
    ]
    ledger._charge_batch(batch)
    assert outcome(batch) == [
        "ok",
        "DuplicateRequest",
        "DuplicateRequest",
        "UnknownDataset",
        "UnsafeQuery",
        "InvalidParameter",
        "ok",
    ]
    assert isinstance(batch[1].error, DuplicateRequest)
    assert batch[0].result is not None and batch[1].error.charge_id == batch[0].result.id
    assert isinstance(batch[2].error, DuplicateRequest)
    assert batch[2].error.charge_id == before.id
    assert isinstance(batch[3].error, UnknownDataset)
    assert isinstance(batch[4].error, UnsafeQuery)
    assert ledger.spent("d") == Epsilon(epsilon=Fraction(3, 16))
    assert len(ledger.history("d")) == 3
    assert ledger.history("z") == []
    intact(ledger)


def test_a_failed_batch_fails_every_member(ledger: Ledger) -> None:
    ledger.charge("d", Epsilon(epsilon=Fraction(1, 8)), analyst="a", query_key="k",
                  query_text="SELECT 1")  # fmt: skip
    # PostgreSQL's text cannot hold NUL: the third member's insert fails the transaction.
    batch = [request(Fraction(1, 8)), request(Fraction(1, 8)), request(Fraction(1, 8), text="\0")]
    with pytest.raises(LedgerError):
        ledger._charge_batch(batch)
    assert ledger.spent("d") == Epsilon(epsilon=Fraction(1, 8))
    assert len(ledger.history("d")) == 1
    intact(ledger)
    # Through the group: every member raises, then the ledger charges again.
    group = ledger._group
    members = [request(Fraction(1, 8)), request(Fraction(1, 8), text="\0")]
    errors: list[BaseException] = []

    def submit(r: Request) -> None:
        try:
            group.submit(r)
        except LedgerError as e:
            errors.append(e)

    with group._mutex:  # both queued before either leads: one batch
        group._leading = True
    threads = [threading.Thread(target=submit, args=(r,)) for r in members]
    for t in threads:
        t.start()
    while len(group._queue) < 2:
        threading.Event().wait(0.001)
    with group._mutex:
        group._leading = False
        members[0].lead = True
        members[0].ready.set()
    for t in threads:
        t.join(timeout=30)
    assert len(errors) == 2
    assert len(ledger.history("d")) == 1
    ledger.charge("d", Epsilon(epsilon=Fraction(1, 8)), analyst="a", query_key="k2",
                  query_text="SELECT 1")  # fmt: skip
    assert ledger.spent("d") == Epsilon(epsilon=Fraction(1, 4))
    intact(ledger)


def test_threads_are_batched_and_spend_exactly_the_cap(ledger: Ledger) -> None:
    sizes: list[int] = []
    group = ledger._group
    run = group._run

    def counted(batch: list[Request]) -> None:
        sizes.append(len(batch))
        run(batch)

    group._run = counted
    ids: list[int] = []
    refused = [0]
    start = threading.Barrier(16)

    def charge(t: int) -> None:
        start.wait()
        i = 0
        while True:
            i += 1
            try:
                c = ledger.charge("d", Epsilon(epsilon=Fraction(1, 64)), analyst=f"t{t % 4}",
                                  query_key=f"{t}-{i}", query_text="SELECT 1")  # fmt: skip
            except BudgetExceeded:
                refused[0] += 1
                return
            ids.append(c.id)

    threads = [threading.Thread(target=charge, args=(t,)) for t in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(ids) == 64 and len(set(ids)) == 64
    assert refused[0] == 16
    assert ledger.spent("d") == Epsilon(epsilon=1)
    assert max(sizes) > 1, sizes  # charges did share transactions
    assert sum(sizes) == 64 + 16
    assert {c.id for c in ledger.history("d")} == set(ids)
    intact(ledger)
