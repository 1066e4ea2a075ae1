"""Audit toolkit: check privacy claims against what mechanisms actually do.

:mod:`deniable.audit.empirical` estimates, from samples of a mechanism on two neighbouring
inputs, a lower confidence bound on its privacy loss (ε or zCDP ρ).
"""

from deniable.audit.empirical import (
    EmpiricalLoss,
    Event,
    EventBound,
    audit_epsilon,
    audit_rho,
    binary_renyi,
    estimate_epsilon,
    estimate_rho,
    renyi_rho,
)

__all__ = [
    "EmpiricalLoss",
    "Event",
    "EventBound",
    "audit_epsilon",
    "audit_rho",
    "binary_renyi",
    "estimate_epsilon",
    "estimate_rho",
    "renyi_rho",
]
