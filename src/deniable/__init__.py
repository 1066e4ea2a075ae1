"""deniable: differential privacy you can query, account for and explain."""

from deniable.errors import (
    BudgetExceeded,
    DeniableError,
    InternalError,
    InvalidParameter,
    LedgerError,
    PrivacyWarning,
    SQLError,
    UnsafeQuery,
)

__version__ = "0.1.0"

__all__ = [
    "BudgetExceeded",
    "DeniableError",
    "InternalError",
    "InvalidParameter",
    "LedgerError",
    "PrivacyWarning",
    "SQLError",
    "UnsafeQuery",
    "__version__",
]
