"""The durable budget ledger (DESIGN.md §7): charges committed before any answer leaves.

One :class:`Ledger` facade (:mod:`deniable.ledger.facade`, every guarantee stated there) over
a storage backend (:mod:`deniable.ledger.store`: :mod:`~deniable.ledger.sqlite`, the embedded
default, and :mod:`~deniable.ledger.postgres` for several hosts), with one module per job:
:mod:`~deniable.ledger.chain` (hash chain, replay, audit) and
:mod:`~deniable.ledger.integrity` (hashes, the anchor file, the writers' lock),
:mod:`~deniable.ledger.budget` (caps, allowances, charges, admission),
:mod:`~deniable.ledger.answers` (the answer cache), :mod:`~deniable.ledger.samples` (sample
discipline), :mod:`~deniable.ledger.analysts` (identities and hashed tokens) and
:mod:`~deniable.ledger.records` (the records and their exact encoding).
"""

from deniable.errors import CapConflict, DuplicateRequest, LedgerTampered, UnknownDataset
from deniable.ledger.analysts import AnalystInfo, Principal, Role
from deniable.ledger.facade import Ledger
from deniable.ledger.integrity import LedgerReport
from deniable.ledger.records import (
    LOST_BY_ROLLBACK,
    SCHEMA_VERSION,
    Charge,
    ChargeStatus,
    CuratorEvent,
    SampleRelease,
    new_sample_id,
)

__all__ = [
    "LOST_BY_ROLLBACK",
    "SCHEMA_VERSION",
    "AnalystInfo",
    "CapConflict",
    "Charge",
    "ChargeStatus",
    "CuratorEvent",
    "DuplicateRequest",
    "Ledger",
    "LedgerReport",
    "LedgerTampered",
    "Principal",
    "Role",
    "SampleRelease",
    "UnknownDataset",
    "new_sample_id",
]
