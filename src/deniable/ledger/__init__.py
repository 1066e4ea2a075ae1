"""The durable budget ledger (DESIGN.md §7): charges committed before any answer leaves.

See :mod:`deniable.ledger.sqlite` for the guarantees and the answer cache's crash window.
"""

from deniable.errors import CapConflict, UnknownDataset
from deniable.ledger.sqlite import (
    SCHEMA_VERSION,
    Charge,
    ChargeStatus,
    CuratorEvent,
    Ledger,
)

__all__ = [
    "SCHEMA_VERSION",
    "CapConflict",
    "Charge",
    "ChargeStatus",
    "CuratorEvent",
    "Ledger",
    "UnknownDataset",
]
