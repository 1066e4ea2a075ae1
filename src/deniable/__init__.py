"""deniable: differential privacy you can query, account for and explain.

The entry point is :class:`deniable.Session` (``deniable.curator.session.Session``). It is
imported on first use so that ``import deniable.noise`` stays light (the query stack pulls in
DuckDB, sqlglot and pandas). :data:`deniable.ROW` states row-level privacy when a table is
registered (``privacy_unit=ROW``: each row is its own unit); there is no default unit.
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
    from deniable.query.catalog import ROW

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    if name == "Session":
        from deniable.curator.session import Session

        return Session
    if name == "ROW":
        from deniable.query.catalog import ROW

        return ROW
    raise AttributeError(f"module 'deniable' has no attribute {name!r}")


__all__ = [
    "ROW",
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
