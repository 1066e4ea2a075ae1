"""Group commit: the concurrent charges of one process admitted in one write transaction.

A service handles requests in a thread pool, so one process often has several charges
waiting for the ledger's lock at once. On a ledger whose store serialises its writers itself
(PostgreSQL, :attr:`deniable.ledger.store.Store.serialises_writers`), :meth:`Ledger.charge`
hands its charge to :class:`GroupCommit`: the first caller becomes the *leader*, takes every
charge queued by then (at most :data:`MAX_BATCH`) and runs them in **one** write transaction
— one advisory lock, one chain extension (an entry per charge, hashed in order), one durable
commit and flush, one anchor write — while the next charges queue behind it. Nothing any
guarantee rests on changes:

* **admission** stays serial and exact: the members are admitted one after another inside
  the transaction, each against everything committed before it *and* the members before it
  (the transaction reads its own inserts), under the lock that serialises every writer of
  every host. A member that is refused (budget, duplicate idempotency key, unknown dataset,
  …) is refused before it writes anything and the others carry on;
* **durability**: no member returns before the batch's commit is durable and an anchor
  covers it (the ledger's one write path, :meth:`Ledger._write`); if the transaction fails,
  every member fails with :class:`~deniable.errors.LedgerError` and none may be released;
* **the chain** gets one entry per charge, exactly as if they had been charged one by one.

A leader serves one batch and then hands the lead to the first charge still queued, so a
caller waits for at most the batch running when it queued and then its own batch.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from deniable.accounting.loss import PrivacyLoss
from deniable.errors import LedgerError
from deniable.ledger.records import Charge

MAX_BATCH = 64
"""The most charges one transaction admits (bounds the time the advisory lock is held)."""


@dataclass(eq=False)
class Request:
    """One charge waiting for the leader (its arguments already validated)."""

    dataset: str
    loss: PrivacyLoss
    analyst: str
    query_key: str
    query_text: str
    details_json: str
    sampled: bool
    idempotency_key: str | None
    result: Charge | None = None
    error: BaseException | None = None
    lead: bool = False
    finished: bool = False
    ready: threading.Event = field(default_factory=threading.Event)


class GroupCommit:
    """Runs queued :class:`Request` s in batches, one batch at a time per process.

    Args:
        run: admits and records a batch in one transaction; it sets each member's
            ``result`` or ``error`` (a refusal of that member alone) and raises only when the
            whole transaction failed.
        max_batch: the most members of one batch.
    """

    def __init__(self, run: Callable[[list[Request]], None], *, max_batch: int = MAX_BATCH) -> None:
        self._run = run
        self._max = max_batch
        self._mutex = threading.Lock()
        self._queue: list[Request] = []
        self._leading = False

    def submit(self, request: Request) -> Charge:
        """Charge ``request`` (alone or with others); return its charge once durable.

        Raises:
            Whatever refused this member, or :class:`~deniable.errors.LedgerError` when the
            batch's transaction failed (nothing of the batch may be released).
        """
        with self._mutex:
            self._queue.append(request)
            if not self._leading:
                self._leading = True
                request.lead = True
        if request.lead:
            # A new leader lets the threads that are ready to run queue first (e.g. the
            # members of the batch that just ended, charging again); otherwise batches
            # alternate between one charge and all the others.
            time.sleep(0)
        while not request.finished:
            if request.lead:
                self._lead()
            else:
                request.ready.wait()
                request.ready.clear()
        if request.error is not None:
            raise request.error
        if request.result is None:  # pragma: no cover - run sets one of the two
            raise LedgerError("a batched charge ended without a result")
        return request.result

    def _lead(self) -> None:
        """Run one batch from the head of the queue, then pass the lead on."""
        with self._mutex:
            batch = self._queue[: self._max]
            del self._queue[: self._max]
        try:
            self._run(batch)
        except BaseException as e:
            for member in batch:
                if member.result is None and member.error is None:
                    member.error = _failed(e)
                elif member.result is not None:  # the transaction failed after admission
                    member.result, member.error = None, _failed(e)
        finally:
            with self._mutex:
                for member in batch:
                    member.finished = True
                    member.lead = False
                if self._queue:
                    following = self._queue[0]
                    following.lead = True
                    following.ready.set()
                else:
                    self._leading = False
            for member in batch:
                member.ready.set()


def _failed(error: BaseException) -> BaseException:
    """What a member of a failed batch raises: a fresh error per thread, with the cause."""
    if type(error) is LedgerError:  # others (e.g. LedgerTampered) are shared as they are
        fresh = LedgerError(str(error))
        fresh.__cause__ = error
        return fresh
    return error
