"""Sample discipline (Li–Qardaji–Su §2.6): a consumed sample answers nothing else.

A sample that paid for a sampling-based release may not be used again.

A release whose guarantee comes from sampling alone (safe k-anonymization) is recorded with
:meth:`Ledger.record_sample_release`: the sample's opaque identity
(:func:`~deniable.ledger.records.new_sample_id`, never derived from data), its rate β and the
``(ε, δ)`` guarantee, charged like any release; the sample is then *consumed*.
"""

from __future__ import annotations

from fractions import Fraction

from deniable.accounting.loss import exact
from deniable.errors import InvalidParameter
from deniable.ledger.chain import Write
from deniable.ledger.store import Tx

CONSUMED_MESSAGE = (
    "this sample was consumed by a release whose guarantee relies on sampling alone (e.g. safe "
    "k-anonymization, Li–Qardaji–Su §2.6); nothing else may be released from it: draw a fresh "
    "sample"
)


QUERIED_MESSAGE = (
    "this sample already answered queries, so a release whose guarantee comes from sampling "
    "alone may not use it (Li–Qardaji–Su §2.6: its sample must answer nothing else); draw a "
    "fresh sample for it; nothing was charged"
)


def queried(conn: Tx, dataset: str, sample: str) -> bool:
    """Whether a query on ``dataset`` was charged on ``sample`` (its details name it)."""
    row = conn.execute(
        "SELECT 1 FROM charges WHERE dataset = ? "
        f"AND {conn.json_text('details', 'sampling', 'sample')} = ? LIMIT 1",
        (dataset, sample),
    ).fetchone()
    return row is not None


def consumed(conn: Tx, dataset: str, sample: str) -> bool:
    """Whether ``sample`` was consumed by a sampling-based release on ``dataset``."""
    if not conn.has_table("sample_releases"):
        return False
    row = conn.execute(
        "SELECT 1 FROM sample_releases WHERE dataset = ? AND sample = ?", (dataset, sample)
    ).fetchone()
    return row is not None


def check_sample(sample: object) -> None:
    """Refuse an identity that is not an opaque sample id."""
    if (
        not isinstance(sample, str)
        or not 8 <= len(sample) <= 128
        or not all(c.isascii() and (c.isalnum() or c in "-_:.") for c in sample)
    ):
        raise InvalidParameter(
            "sample must be an opaque identity of 8 to 128 letters, digits or '-_:.' "
            "(deniable.ledger.new_sample_id()); never derive it from the data"
        )


def sampling_rate(rate: object) -> Fraction:
    """The exact sampling rate β in ``(0, 1]``."""
    if not isinstance(rate, Fraction | int | float):
        raise InvalidParameter("rate must be a number in (0, 1]")
    beta = exact(rate, "rate")
    if not 0 < beta <= 1:
        raise InvalidParameter("rate must be a sampling rate in (0, 1]")
    return beta


def record_consumed(
    w: Write, dataset: str, sample: str, charge_id: int, rate: str, now: str
) -> None:
    """Record ``sample`` as consumed by charge ``charge_id`` (a sampling release), in ``w``."""
    w.conn.execute(
        "INSERT INTO sample_releases (dataset, sample, charge_id, rate, time) "
        "VALUES (?, ?, ?, ?, ?)",
        (dataset, sample, charge_id, rate, now),
    )
    w.append(
        "sample_release",
        {"dataset": dataset, "sample": sample, "charge_id": charge_id, "rate": rate, "time": now},
    )
