"""The group-commit queue (:class:`deniable.ledger.group.GroupCommit`), without a database.

What the ledger relies on: every submitted charge is run exactly once, in submission order,
in batches of at most ``max_batch``; a member's own error is raised by that member only;
a failed batch fails every member (a fresh :class:`LedgerError` each, the failure as its
cause); and concurrent submitters do share batches. The PostgreSQL behaviour (admission in
order inside a batch, durability, refusals) is in
``tests/system/test_ledger_postgres_batch.py``.
"""

from __future__ import annotations

import threading
import time
from fractions import Fraction
from typing import Any

import pytest

from deniable.accounting.loss import Epsilon
from deniable.errors import BudgetExceeded, LedgerError
from deniable.ledger.group import GroupCommit, Request


def member(k: int) -> Request:
    return Request(
        dataset="d",
        loss=Epsilon(epsilon=Fraction(1, 10)),
        analyst=f"a{k}",
        query_key=f"q{k}",
        query_text="SELECT 1",
        details_json="{}",
        sampled=False,
        idempotency_key=None,
    )


def submit_all(group: GroupCommit, members: list[Request]) -> list[Any]:
    """Submit each member from its own thread, all at once; their results or errors."""
    out: list[Any] = [None] * len(members)
    start = threading.Barrier(len(members))

    def go(k: int) -> None:
        start.wait()
        try:
            out[k] = group.submit(members[k])
        except Exception as e:
            out[k] = e

    threads = [threading.Thread(target=go, args=(k,)) for k in range(len(members))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    return out


def test_each_member_runs_once_in_order_in_bounded_batches() -> None:
    batches: list[list[Request]] = []

    def run(batch: list[Request]) -> None:
        batches.append(list(batch))
        time.sleep(0.01)  # a transaction: the others queue meanwhile
        for r in batch:
            r.result = r.query_key  # type: ignore[assignment]

    group = GroupCommit(run, max_batch=4)
    members = [member(k) for k in range(12)]
    out = submit_all(group, members)
    assert out == [m.query_key for m in members]
    ran = [r for b in batches for r in b]
    assert sorted(ran, key=id) == sorted(members, key=id)  # each exactly once
    assert len(ran) == len(set(map(id, ran)))
    assert max(len(b) for b in batches) <= 4
    assert max(len(b) for b in batches) > 1  # concurrent submitters shared a batch


def test_a_refused_member_raises_alone() -> None:
    def run(batch: list[Request]) -> None:
        for r in batch:
            if r.analyst == "a1":
                r.error = BudgetExceeded("no", requested=r.loss, remaining=r.loss)
            else:
                r.result = r.analyst  # type: ignore[assignment]

    out = submit_all(GroupCommit(run), [member(k) for k in range(3)])
    assert isinstance(out[1], BudgetExceeded)
    assert out[0] == "a0" and out[2] == "a2"


def test_a_failed_batch_fails_every_member() -> None:
    failure = LedgerError("cannot commit")

    def run(batch: list[Request]) -> None:
        for r in batch:
            r.result = r.analyst  # type: ignore[assignment]  # admitted, then:
        raise failure

    out = submit_all(GroupCommit(run), [member(k) for k in range(5)])
    assert all(type(e) is LedgerError for e in out)
    assert all(e.__cause__ is failure for e in out)
    assert len({id(e) for e in out}) == 5  # one per thread


def test_a_lone_charge_is_its_own_batch() -> None:
    sizes: list[int] = []

    def run(batch: list[Request]) -> None:
        sizes.append(len(batch))
        batch[0].result = "one"  # type: ignore[assignment]

    group = GroupCommit(run)
    first: Any = group.submit(member(0))
    second: Any = group.submit(member(1))
    assert first == second == "one"
    assert sizes == [1, 1]


@pytest.mark.parametrize("error", [KeyboardInterrupt, SystemExit])
def test_the_lead_passes_on_after_a_base_exception(error: type[BaseException]) -> None:
    calls = [0]

    def run(batch: list[Request]) -> None:
        calls[0] += 1
        if calls[0] == 1:
            raise error
        for r in batch:
            r.result = "ok"  # type: ignore[assignment]

    group = GroupCommit(run)
    with pytest.raises(error):
        group.submit(member(0))
    after: Any = group.submit(member(1))
    assert after == "ok"  # the queue is not left without a leader
