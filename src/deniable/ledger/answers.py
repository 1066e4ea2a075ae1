"""The answer cache: released answers stored beside the charge that paid for them.

A repeated identical query (same ``query_key``) is answered from the cache at no cost:
re-publishing a released answer is post-processing. An answer row references its charge, so
it can never exist without the committed charge; the chain records each answer's SHA-256
(the payload itself is not chained). Idempotency keys live on the charges
(:meth:`deniable.ledger.Ledger.charge`); :func:`by_charge` returns a retried request's
stored answer.
"""

from __future__ import annotations

import hashlib

from deniable.errors import InvalidParameter, LedgerError
from deniable.ledger.chain import Write
from deniable.ledger.records import utc_now
from deniable.ledger.store import Tx


def store(w: Write, charge_id: int, data: bytes) -> None:
    """Store ``data`` as charge ``charge_id``'s answer and mark the charge answered, in ``w``.

    Storing the same bytes twice is a no-op.

    Raises:
        InvalidParameter: no such charge.
        LedgerError: a different answer is already stored.
    """
    conn = w.conn
    row = conn.execute(
        "SELECT dataset, query_key FROM charges WHERE id = ?", (charge_id,)
    ).fetchone()
    if row is None:
        raise InvalidParameter(f"no charge with id {charge_id} in this ledger")
    stored = conn.execute(
        "SELECT payload FROM answers WHERE charge_id = ?", (charge_id,)
    ).fetchone()
    if stored is not None:
        if bytes(stored[0]) == data:
            return
        raise LedgerError(f"charge {charge_id} already has a different stored answer")
    now = utc_now()
    conn.execute(
        "INSERT INTO answers (charge_id, dataset, query_key, payload, time) VALUES (?, ?, ?, ?, ?)",
        (charge_id, row[0], row[1], data, now),
    )
    conn.execute("UPDATE charges SET status = 'answered' WHERE id = ?", (charge_id,))
    w.append(
        "answer",
        {"charge_id": charge_id, "sha256": hashlib.sha256(data).hexdigest(), "time": now},
    )


def by_charge(tx: Tx, charge_id: int) -> bytes | None:
    """The stored answer of charge ``charge_id``, or None."""
    row = tx.execute("SELECT payload FROM answers WHERE charge_id = ?", (charge_id,)).fetchone()
    return None if row is None else bytes(row[0])


def by_key(tx: Tx, dataset: str, query_key: str) -> bytes | None:
    """The stored answer of the latest answered charge on ``dataset`` with ``query_key``."""
    row = tx.execute(
        "SELECT payload FROM answers WHERE dataset = ? AND query_key = ? "
        "ORDER BY charge_id DESC LIMIT 1",
        (dataset, query_key),
    ).fetchone()
    return None if row is None else bytes(row[0])
