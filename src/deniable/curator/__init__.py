"""The curator: sessions owning tables, policy, budget, ledger and cache."""

from deniable.curator.session import BudgetStatus, Session

__all__ = ["BudgetStatus", "Session"]
