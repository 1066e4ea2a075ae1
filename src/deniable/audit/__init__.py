"""Audit toolkit: check privacy claims against what mechanisms actually do.

:mod:`deniable.audit.empirical` estimates, from samples of a mechanism on two neighbouring
inputs, a lower confidence bound on its privacy loss (ε or zCDP ρ).
:mod:`deniable.audit.queries` does the same for whole queries (all their released numbers
jointly), taking the query as a sampler callable. :mod:`deniable.audit.definitions` computes
exactly, on small finite settings, the ε of DP, noiseless privacy and causal DP.
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
from deniable.audit.queries import (
    NeighbourPair,
    QueryAudit,
    QuerySampler,
    audit_query,
    audit_query_pairs,
    audit_release,
    estimate_query_loss,
    repeat,
)

__all__ = [
    "EmpiricalLoss",
    "Event",
    "EventBound",
    "NeighbourPair",
    "QueryAudit",
    "QuerySampler",
    "audit_epsilon",
    "audit_query",
    "audit_query_pairs",
    "audit_release",
    "audit_rho",
    "binary_renyi",
    "estimate_epsilon",
    "estimate_query_loss",
    "estimate_rho",
    "renyi_rho",
    "repeat",
]
