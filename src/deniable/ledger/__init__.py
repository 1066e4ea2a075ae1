"""The durable budget ledger (DESIGN.md §7): charges committed before any answer leaves.

See :mod:`deniable.ledger.sqlite` for the guarantees and the answer cache's crash window, and
:mod:`deniable.ledger.integrity` for the hash chain and the anchor file.
"""

from deniable.errors import CapConflict, DuplicateRequest, LedgerTampered, UnknownDataset
from deniable.ledger.analysts import AnalystInfo, Principal, Role
from deniable.ledger.integrity import LedgerReport
from deniable.ledger.sqlite import (
    LOST_BY_ROLLBACK,
    SCHEMA_VERSION,
    Charge,
    ChargeStatus,
    CuratorEvent,
    Ledger,
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
