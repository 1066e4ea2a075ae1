"""deniable: differential privacy you can query, account for and explain.

The entry point is :class:`deniable.Session` (``deniable.curator.session.Session``). It is
imported on first use so that ``import deniable.noise`` stays light (the query stack pulls in
DuckDB, sqlglot and pandas).
"""

from typing import TYPE_CHECKING

from deniable.errors import (
    BudgetExceeded,
    CapConflict,
    DeniableError,
    EngineError,
    InternalError,
    InvalidParameter,
    LedgerError,
    PrivacyWarning,
    SQLError,
    UnknownDataset,
    UnsafeQuery,
)

if TYPE_CHECKING:
    from deniable.curator.session import Session

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    if name == "Session":
        from deniable.curator.session import Session

        return Session
    raise AttributeError(f"module 'deniable' has no attribute {name!r}")


__all__ = [
    "BudgetExceeded",
    "CapConflict",
    "DeniableError",
    "EngineError",
    "InternalError",
    "InvalidParameter",
    "LedgerError",
    "PrivacyWarning",
    "SQLError",
    "Session",
    "UnknownDataset",
    "UnsafeQuery",
    "__version__",
]
